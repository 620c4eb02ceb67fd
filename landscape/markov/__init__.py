"""Attention with Markov (Makkuva et al.): single-layer transformers on Markov chains.

All nine rooms of docs/architecture.md; [room]: the room of a module beyond them.

task.py        binary and S-state chains, samplers, exact enumeration, soft targets
model.py       the theory model (no LayerNorm) and the GPT-2 model, one attention for both
attention.py   [model] that causal attention: whole scores, or tiled with a hand-written backward
points.py      theta_pi (Thm 2 / Thm 3, multi-state), theta_star (Thm 1) as Points
theory.py      closed forms: losses, information, alpha block and spectra, App. D
schema.py      [experiment] the config schema, the traced fields, experiment and claim names
experiment.py  configs -> compiled sweeps -> records, figures and claims (Figs. 1, 3, 4, 5, App. D)
claims.py      per-run outcomes (final loss, f0, f1, stuck) and one claim function per config
figures.py     test-loss curves, the Fig. 4 grid of trapped fractions, the trap study's plots
trap_study.py  [experiment] the single-layer trap: depth x precision, trapped fractions, gradients
atlas.py       [experiment] probes over a (p, q) grid against Thms 2-3; the points' exact Hessians
trained.py     trained_point: a run's parameters at a step on its chain's population loss
curvature_study.py    the trap's curvature along training: trapped vs escaping seeds (§14)
curvature_figures.py  [curvature_study] its figure
basin.py       [curvature_study] a basin's radius along a line; a subspace's chance overlap
eos.py         [curvature_study] experiment = "eos": the edge of stability's phase (the escape)
"""

from landscape.engine import lazy
from landscape.markov import model, points, task, theory
from landscape.markov.model import MarkovModel
from landscape.markov.points import theta_pi, theta_star

__all__ = [
    "model",
    "points",
    "task",
    "theory",
    "MarkovModel",
    "theta_pi",
    "theta_star",
    "trained_point",
]


# trained_point loads on first use: it reads records through the experiment's modules
__getattr__ = lazy.module_getattr(__name__, {"trained_point": f"{__name__}.trained"})
