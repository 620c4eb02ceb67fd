"""One Hutch++ (Meyer, Musco, Musco and Woodruff 2021): a third of the products sketch the
range of H, whose orthonormal basis Q takes tr(Q^T H Q) exactly with another third, and the
rest estimate the trace of the complement by Hutchinson on probes projected off Q. The stages,
the split of the products and the arithmetic shared by the in-memory and streamed traces;
docs/design/curvature.md, "Stochastic spectra, traces and diagonals"."""

from __future__ import annotations

from typing import Any

from landscape.core import orthonormal
from landscape.core.layout import Layout

SKETCH, EXACT, REST = 0, 1, 2  # the stages: sketch the range, its exact part, the rest

Array = Any  # a numpy or a jax array


def split(num_probes: int, method: str) -> tuple[int, int]:
    """(rank, rest): the sketch's and the exact stage's products each, and the Hutchinson
    probes; plain Hutchinson (`method` "hutchinson") sketches nothing."""
    rank = 0 if method == "hutchinson" else num_probes // 3
    return rank, num_probes - 2 * rank


def range_basis(sketch: Array, layout: Layout | None = None) -> Array:
    """Orthonormal rows Q spanning the sketch's rows H g by Householder QR (a range of lower
    rank than the sketch gets orthonormal rows all the same); over a mesh whose devices hold
    the rows' columns (`layout`), by TSQR, unless the model is so small that a device holds
    fewer columns than there are rows."""
    rank, length = sketch.shape
    if layout is None or layout.mesh is None or not layout.axes or rank > length // layout.slices:
        return orthonormal.qr_rows(sketch)
    return orthonormal.tsqr_rows(sketch, layout.mesh, layout.axes)


def projected(range_: Array, probes: Array) -> Array:
    """(I - Q^T Q) g for each probe row g, Q the orthonormal range rows (zero rows ignored)."""
    return probes - (probes @ range_.T) @ range_
