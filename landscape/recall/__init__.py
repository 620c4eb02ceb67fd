"""Incremental learning for in-context associative recall: the two-layer attention-only model.

The rooms of docs/architecture.md but points.py (flow.py's inits); [room]: a module's room.

task.py        permutations + responses: the token-level and exact collision-vector samplers
model.py       RecallModel (flax.linen): the simplified model (Eqs. 9a-e) and the original
flow.py        [experiment] the theory's initialisations, gradient flow, SGD/GD problems, jumps
theory.py      plateau levels, the conservation law, Thm 3.1 ODE, jump times, the recursion
experiment.py  experiments E1-E6 with claims and figures
claims.py      which associative-recall claims a run reproduces, one function per config
figures.py     gradient-flow losses and stage plots (E1-E4), SGD curves and attention maps
trained.py     trained_point: an SGD run's parameters at a step on its evaluation loss
curvature_study.py    the saddles' index along the saddle-to-saddle path (notes §4.10)
curvature_figures.py  [curvature_study] its figure
eos.py                [curvature_study] experiment = "eos": the edge of stability's phases (jumps)
"""

from landscape.engine import lazy
from landscape.recall import flow, model, task, theory
from landscape.recall.model import RecallModel

__all__ = ["flow", "model", "task", "theory", "RecallModel", "trained_point"]


# trained_point loads on first use: it reads records through the experiment's modules
__getattr__ = lazy.module_getattr(__name__, {"trained_point": f"{__name__}.trained"})
