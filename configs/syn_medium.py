"""Syn-Medium, Fig. 6 of Tian et al. (notes/scan_snap.md §2.4, §5.6).

    python -m experiments.scan_snap --config=configs/syn_medium.py          # the paper's grid
    python -m experiments.scan_snap --config=configs/syn_medium.py:quick    # CI-sized grid

Paper grid: K in {2, 6, 10, 20} (num_last in {1, 3, 5, 10}, two next tokens per last token),
eta_Z in {0.5, 1, 2, 3}, eta_Y/eta_Z in {1, 2, 5, 10}, seeds 1..10, 100 SGD steps (momentum 0.9,
batch 128, L = 128) from Y, Z ~ U(+-1/sqrt(M)). 640 runs: one compiled program per K, each vmapped
over its 160 runs. Metric: entropy of the final c_n on n's distinct tokens, renormalised, in nats,
averaged over classes; mean and sample std over seeds.
Expected time on 2 CPU cores: under a minute for the paper grid; ~10 s for `quick`.
"""

import ml_collections

from landscape.scan_snap.experiment import default_config


def get_config(variant: str = "paper") -> ml_collections.ConfigDict:
    c = default_config()
    c.name = f"syn_medium_{variant}"
    c.seed = 1  # seeds 1..10, as the authors' sweep
    c.num_seeds = 10
    c.data.update(
        num_last=1,
        num_next_per_last=2,
        num_common=10,
        num_common_per_last=0,
        num_distinct_per_next=10,
        seq_len=128,
    )
    c.model.init = "uniform"  # the random init is the prior (notes §7.5)
    c.optim.update(name="sgd", momentum=0.9, lr_z=1.0, lr_y_over_lr_z=1.0)
    c.train.update(batch_size=128, num_steps=100, log_every=10)
    c.eval.snapshot_attention = False
    c.claims = "fig6"
    if variant == "paper":
        c.sweep = {
            "data": {"num_last": [1, 3, 5, 10]},
            "optim": {"lr_z": [0.5, 1.0, 2.0, 3.0], "lr_y_over_lr_z": [1.0, 2.0, 5.0, 10.0]},
        }
    elif variant == "quick":  # notes §7.3 CI version: trends, not values
        c.num_seeds = 3
        c.sweep = {
            "data": {"num_last": [1, 3]},
            "optim": {"lr_z": [0.5, 3.0], "lr_y_over_lr_z": [1.0, 2.0, 10.0]},
        }
    else:
        raise ValueError(f"unknown variant {variant!r}: paper or quick")
    return c
