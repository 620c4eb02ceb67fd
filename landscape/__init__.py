"""landscape: loss landscapes and training dynamics of small transformers on synthetic tasks.

import landscape
theta_pi = landscape.markov.theta_pi(p=0.5, q=0.8)   # the unigram point of Thm 2
H = landscape.hessian_at(theta_pi)                  # exact, block-labelled Hessian
print(H.describe())                                 # blocks, spectrum, verdict, prediction
"""

import importlib
from types import ModuleType

from landscape.curvature import gradient_at, hessian_at, hvp, lanczos_spectrum
from landscape.point import Point, param_names, params_table, restrict

PAPERS = ("markov", "ngrams", "recall", "scan_snap")


def __getattr__(name: str) -> ModuleType:
    """The paper packages load on first use (`landscape.markov` ...): a CLI run of one paper
    does not import the others (recall's gradient flow alone pulls in diffrax, ~1 s)."""
    if name in PAPERS:
        return importlib.import_module(f"landscape.{name}")
    raise AttributeError(f"module 'landscape' has no attribute {name!r}")


__all__ = [
    "Point",
    "param_names",
    "params_table",
    "restrict",
    "gradient_at",
    "hessian_at",
    "hvp",
    "lanczos_spectrum",
    "markov",
    "ngrams",
    "recall",
    "scan_snap",
]
