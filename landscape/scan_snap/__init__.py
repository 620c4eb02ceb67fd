"""Scan and Snap (Tian et al.): 1-layer transformer dynamics, Y/Z form; docs/design/scan_snap.md.

The rooms of docs/architecture.md but points.py (no constructed point); [room]: a module's room.

task.py        sequence classes (the authors' Dataset2), c_n (Eq. 5), distinct-token entropy
model.py       YZModel (params Y, Z), its long-sequence loss as a Point; TextTransformer
text.py        [task] WikiText as arrays: the tutorial's tokenizer, vocabulary, id stream, chunks
wikitext.py    [experiment] experiment = "wikitext": the text transformer on WikiText (Figs. 7, 10)
wikitext_claims.py  [claims] its claims, per-run table and figures
curvature_study.py  experiment = "curvature": the WikiText model's Hessian along training
curvature_figures.py  [curvature_study] its figure
eos.py         [curvature_study] experiment = "eos": the edge of stability's phases (scan, snap)
theory.py      closed forms: h*, h, omega1, t0, gamma, Gamma, B_n, chi bounds, the attention ODE
experiment.py  configs -> compiled sweeps -> records, figures and checked claims
padded.py      [experiment] off the CPU, Fig. 6's four K as one program, padded to the largest
claims.py      the claims of Figs. 4-6 (notes §7.4), the theory figures' curves and claims
figures.py     the figures: losses, attention (Figs. 4, 5), entropy vs ratio (Fig. 6), Figs. 3, 8, 9
trained.py     trained_point: a run's parameters at a step on its task's population loss
"""

from landscape.engine import lazy
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
    "trained_point",
]


# trained_point loads on first use: it reads records through the experiment's modules
__getattr__ = lazy.module_getattr(__name__, {"trained_point": f"{__name__}.trained"})
