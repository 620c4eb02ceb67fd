"""Associative recall (incremental learning, seed 001): experiments E1-E6 of
notes/assoc_recall.md §7.1, on the simplified model (Eqs. 9a-e) with k = |R| = 4 unless noted.

    python -m experiments.recall --config=configs/recall.py                # Fig. 1 (E4)
    python -m experiments.recall --config=configs/recall.py:first_jump     # E1

Variants (`--config=configs/recall.py:<variant>`), with the CPU time on 2 cores:
  fig1         E4, Fig. 1: SGD + momentum 0.9, lr 1, batch 64, 3000 steps, beta(0) = 0.02 x
               (1, .5, .25, .1), w(0) = 0, exact collision sampler, 5 seeds (~15 s)
  first_jump   E1: gradient flow from I_1 for eps in {0.2 ... 0.001} as one program: plateau
               length ~ 1/eps, jump width, conservation law, invariant manifold (~20 s)
  ei_tail      E1: the exponential-integral tail after the jump, t up to 1e12 (~10 s)
  later_jumps  E2: I_h with c = c1 = 6 for h = 2, 3, 4 at eps = 1e-3 (~10 s)
  stages       E3: beta(0) = eps x shape, 5 shapes x 4 scales: order of activation, jump times
               against the vanishing-init recursion, collapse onto the step function (~40 s)
  dp_vs_ce     E5: Fig. 1 with the DP loss (lr 1) and with CE (lr 0.3) (~20 s)
  ablations    E6: token-level SGD, k = |R| = 3: simplified, no A2, no A0, no A3 (~10 s)
  curvature    the saddles' index along the path (notes §4.10, docs/studies/recall_curvature.md):
               gradient flow from Fig. 1's init (3001 saves) and Fig. 1's SGD (5 seeds), the
               Hessian at every save and kept step against the theory (~10 s; 1-2 min cold)
  curvature_small_eps  the same at eps = 1e-3 (60,000 SGD steps; ~20x longer plateaus)
  eos          the edge of stability on Fig. 1's model (landscape/recall/eos.py; docs/studies/
               edge_of_stability.md): gradient descent on the exact population loss (the full
               batch) at three step sizes and Adam at two, 3 seeds (w(0) = 0.01 N(0, 1)),
               3000 steps, λ_max tracked every 10 steps
  eos_paper    the same over 10,000 steps (prepared, not run)
"""

import ml_collections

from landscape.recall.experiment import default_config

VARIANTS = (
    "fig1",
    "first_jump",
    "ei_tail",
    "later_jumps",
    "stages",
    "dp_vs_ce",
    "ablations",
    "curvature",
    "curvature_small_eps",
    "eos",
    "eos_paper",
)


def get_config(variant: str = "fig1") -> ml_collections.ConfigDict:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    c = default_config()
    c.name = f"recall_{variant}"
    c.claims = variant
    if variant.startswith("curvature"):
        return _curvature(c, variant)
    if variant.startswith("eos"):
        return _eos(c, variant)
    if variant in ("fig1", "dp_vs_ce"):
        c.experiment = "sgd"
        c.num_seeds = 5 if variant == "fig1" else 3
        c.init.update(kind="shape", eps=0.02, beta_shape=[1.0, 0.5, 0.25, 0.1])
        c.optim.update(name="sgd", momentum=0.9, lr=1.0)
        c.train.update(batch_size=64, num_steps=3000, log_every=10, sampler="collisions")
        if variant == "dp_vs_ce":
            c.variants = [
                {"model": {"loss": "dp"}, "optim": {"lr": 1.0}},
                {"model": {"loss": "ce"}, "optim": {"lr": 0.3}},
            ]
    elif variant == "ablations":
        c.experiment = "sgd"
        c.task.update(k=3, num_responses=3)
        c.model.num_heads = 3
        c.init.update(kind="shape", eps=0.01, beta_shape=[1.0, 0.5, 0.2])
        c.optim.update(name="sgd", momentum=0.9, lr=1.0)
        c.train.update(batch_size=32, num_steps=1500, log_every=10, sampler="tokens")
        c.variants = [
            {},
            {"model": {"exact_query": False}},
            # no A0 needs a larger init (notes: eps 0.3, lr 2 at k = 4); at k = 3,
            # eps 0.1 with lr 1 is stage-wise, while lr 2 sticks on L_1 for 1500 steps
            {"model": {"window": False}, "init": {"eps": 0.1}},
            {"model": {"response_only": False}},
        ]
    else:
        c.experiment = "flow"
        if variant == "first_jump":
            c.init.kind = "first_jump"
            c.sweep = {"init": {"eps": [0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001]}}
            c.flow.update(tau_max=250.0, num_saves=8000)
        elif variant == "ei_tail":
            c.init.update(kind="first_jump", eps=0.05)
            c.flow.update(log_time=True, t_max=1e12, num_saves=3000)
        elif variant == "later_jumps":
            c.init.update(kind="later_jump", eps=1e-3, big=6.0)
            c.sweep = {"init": {"stage": [2, 3, 4]}}
            c.flow.update(tau_max=100.0, num_saves=8000)
        elif variant == "stages":
            c.init.kind = "shape"
            c.sweep = {
                "init": {
                    "beta_shape": [
                        [1.0, 0.8, 0.6, 0.4],
                        [0.4, 1.0, 0.6, 0.8],
                        [1.0, 0.5, 0.25, 0.1],
                        [0.7, 1.0, 0.3, 0.5],
                        [1.0, 0.9, 0.2, 0.15],
                    ],
                    "eps": [0.2, 0.05, 0.01, 5e-4],
                }
            }
            c.flow.update(tau_max=300.0, num_saves=8000)
    return c


def _curvature(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """The saddles' index along the path (landscape/recall/curvature_study.py): gradient flow and
    Fig. 1's SGD runs from Fig. 1's init, kept and tracked every 10 steps (20 Lanczos steps: all
    of D = 20, so the tracked λ_min is exact)."""
    c.update(experiment="curvature", claims="curvature", num_seeds=5)
    c.init.update(kind="shape", eps=0.02, beta_shape=[1.0, 0.5, 0.25, 0.1])
    c.optim.update(name="sgd", momentum=0.9, lr=1.0)
    c.train.update(batch_size=64, num_steps=3000, log_every=10, sampler="collisions")
    c.train.update(params_every=10, track_every=10, track_lanczos=20)
    c.flow.update(tau_max=300.0, num_saves=3001)
    if variant == "curvature_small_eps":  # nearer the vanishing-init limit (notes §4.8)
        c.init.eps = 1e-3
        c.train.update(num_steps=60_000, log_every=100, params_every=100, track_every=100)
    return c


def _eos(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """Fig. 1's model and init on its exact population loss (landscape/recall/eos.py)."""
    c.update(experiment="eos", claims="none", num_seeds=3)
    c.init.update(kind="shape", eps=0.02, beta_shape=[1.0, 0.5, 0.25, 0.1], w_noise=0.5)
    c.train.update(sampler="population", num_steps=3000, log_every=10)
    c.train.update(track_every=10, track_lanczos=16)
    c.eos.update(step_sizes=[3.0, 10.0, 30.0], adam_step_sizes=[0.1, 1.0])
    if variant == "eos_paper":
        c.train.num_steps = 10000
    return c
