"""Scan and Snap (Tian et al., NeurIPS 2023): 1-layer transformer dynamics in the Y/Z form.

task.py        sequence classes (the authors' Dataset2), c_n (Eq. 5), distinct-token entropy
model.py       YZModel (flax.linen: params Y, Z), its long-sequence population loss, that loss
               as a Point
theory.py      closed forms: h*, h, omega1, t0, gamma, Gamma, B_n, chi bounds, the attention ODE
experiment.py  configs -> compiled sweeps -> records, figures (Figs. 3-6, 8, 9) and checked claims
"""

from landscape.scan_snap import model, task, theory
from landscape.scan_snap.model import YZModel, population_point
from landscape.scan_snap.task import SequenceClasses, sequence_classes

__all__ = [
    "model",
    "task",
    "theory",
    "YZModel",
    "population_point",
    "SequenceClasses",
    "sequence_classes",
]
