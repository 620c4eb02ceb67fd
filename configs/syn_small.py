"""Syn-Small, Fig. 4 of Tian et al. (notes/scan_snap.md §2.3, §5.4, §7.4).

    python -m experiments.scan_snap --config=configs/syn_small.py
    python -m experiments.scan_snap --config=configs/syn_small.py --config.num_seeds=10

K = 2 classes, M = 34 ids (30 contextual + 2 last + 2 next), Y(0) = Z(0) = 0, SGD with momentum
0.9, batch 128, L = 128, 100 steps. The default runs Fig. 4 left (eta_Y = eta_Z = 1) and right
(eta_Y = 10) as one vmapped program and checks the notes' §7.4 acceptance claims.
Expected time on 2 CPU cores: ~3 s compile, < 0.5 s of training.

Variants (`--config=configs/syn_small.py:<variant>`):
  fig4        Fig. 4 left and right (the default)
  fig4_left   eta_Y = 1 only, exactly the authors' command (seed 2)
  fig4_right  eta_Y = 10 only
  fig5_adam   Fig. 5: Adam with eta_Y = eta_Z in {0.1, 0.5, 1}
  eos         the edge of stability (landscape/scan_snap/eos.py; docs/studies/
              edge_of_stability.md): full-batch gradient descent on one fixed batch of 128
              sequences at eta_Y = eta_Z in {3, 10, 30}, Adam at {0.1, 1}, 3 seeds from the
              uniform init, 300 steps, λ_max tracked every 5 steps
  eos_paper   the same over 1000 steps (prepared, not run)
"""

import ml_collections

from landscape.scan_snap.experiment import default_config
from landscape.scan_snap.task import SYN_SMALL


def get_config(variant: str = "fig4") -> ml_collections.ConfigDict:
    c = default_config()
    c.name = f"syn_small_{variant}"
    c.seed = 2  # the authors' Fig. 4 seed
    c.num_seeds = 1
    c.data.update(SYN_SMALL)
    c.model.update(attend_to_query=False, normalize=True, residual=False, init="zeros")
    c.optim.update(
        name="sgd", momentum=0.9, nesterov=False, weight_decay=0.0, lr_z=1.0, lr_y_over_lr_z=1.0
    )
    c.train.update(batch_size=128, num_steps=100, dtype="float32", log_every=2)
    c.claims = "fig4"
    if variant == "fig4":
        c.sweep = {"optim": {"lr_y_over_lr_z": [1.0, 10.0]}}
    elif variant == "fig4_left":
        pass
    elif variant == "fig4_right":
        c.optim.lr_y_over_lr_z = 10.0
    elif variant == "fig5_adam":
        c.optim.name = "adam"
        c.sweep = {"optim": {"lr_z": [0.1, 0.5, 1.0]}}
        c.claims = "fig5"
    elif variant in ("eos", "eos_paper"):  # the edge of stability (landscape/scan_snap/eos.py)
        c.update(experiment="eos", claims="none", seed=0, num_seeds=3)
        c.model.init = "uniform"  # seeds differ by their initial weights (the batch is fixed)
        c.eval.snapshot_attention = False
        c.train.update(num_steps=300 if variant == "eos" else 1000, log_every=5)
        c.train.update(track_every=5, track_lanczos=16)
        c.eos.update(step_sizes=[3.0, 10.0, 30.0], adam_step_sizes=[0.1, 1.0])
    else:
        raise ValueError(
            f"unknown variant {variant!r}: fig4, fig4_left, fig4_right, fig5_adam, eos or eos_paper"
        )
    return c
