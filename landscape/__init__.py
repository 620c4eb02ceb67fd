"""landscape: loss landscapes and training dynamics of small transformers on synthetic tasks.

import landscape
theta_pi = landscape.markov.theta_pi(p=0.5, q=0.8)   # the unigram point of Thm 2
H = landscape.hessian_at(theta_pi)                  # exact, block-labelled Hessian
print(H.describe())                                 # blocks, spectrum, verdict, prediction
"""

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

from landscape.core.batches import batches
from landscape.core.preconditioner import adam_preconditioner
from landscape.engine.host import setup
from landscape.engine.track import Track
from landscape.point import Point, param_names, params_table, restrict
from landscape.probes.curvature import hessian_at
from landscape.probes.gradient import Gradient, gradient_at, hvp, hvp_flat
from landscape.probes.hessian import FocusReport, Hessian
from landscape.probes.lanczos import Spectrum, lanczos_spectrum
from landscape.probes.results import Curvature, Result
from landscape.tracking import Measurement, Tracker, TrackerState, tracker

if TYPE_CHECKING:
    from landscape.core.datasets import stream
    from landscape.probes.eigen import Eigenpairs, eigenpairs
    from landscape.probes.escape import EscapeDirections, escape_directions
    from landscape.probes.estimates import DiagonalEstimate, SpectralDensity, TraceEstimate
    from landscape.probes.gauss_newton import GaussNewton, ggn_at
    from landscape.probes.geometry import (
        PathResult,
        bezier_path,
        direction_to,
        path,
        random_direction,
    )
    from landscape.probes.slices import SliceResult, slice_2d
    from landscape.probes.spectra import diagonal, spectral_density, trace

try:
    __version__ = importlib.metadata.version("landscape")
except importlib.metadata.PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

PAPERS = ("markov", "ngrams", "recall", "scan_snap")
# The engine's modules, where scripts import them from: `from landscape import sweeps, training`.
ENGINE = (
    "backend",
    "config",
    "gradient_flow",
    "host",
    "memory",
    "optimizers",
    "plotting",
    "precision",
    "protocols",
    "records",
    "sweeps",
    "training",
)
PROBES = {  # name: its module under landscape/; loaded on first use, like the papers
    "spectral_density": "probes.spectra",
    "trace": "probes.spectra",
    "diagonal": "probes.spectra",
    "eigenpairs": "probes.eigen",
    "escape_directions": "probes.escape",
    "ggn_at": "probes.gauss_newton",
    "path": "probes.geometry",
    "bezier_path": "probes.geometry",
    "slice_2d": "probes.slices",
    "random_direction": "probes.geometry",
    "direction_to": "probes.geometry",
    "stream": "core.datasets",
    # their results
    "SpectralDensity": "probes.estimates",
    "TraceEstimate": "probes.estimates",
    "DiagonalEstimate": "probes.estimates",
    "Eigenpairs": "probes.eigen",
    "EscapeDirections": "probes.escape",
    "GaussNewton": "probes.gauss_newton",
    "PathResult": "probes.geometry",
    "SliceResult": "probes.slices",
}


def __getattr__(name: str) -> Any:
    """The paper packages, the engine's modules and the probes load on first use
    (`landscape.markov`, `landscape.sweeps`, `landscape.slice_2d` ...): a CLI run of one paper
    does not import the others (recall's gradient flow alone pulls in diffrax, ~1 s)."""
    if name in PAPERS:
        return importlib.import_module(f"landscape.{name}")
    if name in ENGINE:
        return importlib.import_module(f"landscape.engine.{name}")
    if name in PROBES:
        return getattr(importlib.import_module(f"landscape.{PROBES[name]}"), name)
    raise AttributeError(f"module 'landscape' has no attribute {name!r}")


__all__ = [
    "__version__",
    "setup",
    "Track",
    "tracker",
    "adam_preconditioner",
    "Tracker",
    "TrackerState",
    "Measurement",
    "Point",
    "param_names",
    "params_table",
    "restrict",
    "batches",
    "stream",
    "gradient_at",
    "hessian_at",
    "hvp",
    "hvp_flat",
    "lanczos_spectrum",
    "spectral_density",
    "trace",
    "diagonal",
    "eigenpairs",
    "escape_directions",
    "ggn_at",
    "path",
    "bezier_path",
    "slice_2d",
    "random_direction",
    "direction_to",
    # results: every one has point, finite, describe(), summary(); kind() where it judges
    "Curvature",
    "Result",
    "Gradient",
    "Hessian",
    "FocusReport",
    "Spectrum",
    "SpectralDensity",
    "TraceEstimate",
    "DiagonalEstimate",
    "Eigenpairs",
    "EscapeDirections",
    "GaussNewton",
    "PathResult",
    "SliceResult",
    "markov",
    "ngrams",
    "recall",
    "scan_snap",
]
