"""The largest model a probe serves on a set of devices, from the estimates the probes plan
with: each product's three vectors of D and its largest leaf (`blocks.product_bytes`) and what
the probe keeps
beside them (`eigen_search.lanczos_search_bytes`, `three_term.vector_bytes`), split over the
devices, against the memory policy's share of each device (`core.memory.MEMORY_FRACTION`).
The model's own parameters are resident before a call and outside the share; its activations
for one product are given per device. docs/guide/foundation_scale.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from landscape.core import eigen_search, memory, three_term

GIB = 2**30
H200_BYTES = 139 * GIB  # what an H200 reports free to JAX, about
PRODUCT_VECTORS = 3  # v and H v flat, one as the parameters lie (`blocks.product_bytes`)
# the largest leaf's share of D, held once more by a product: a 10^10-10^11-parameter
# transformer's embedding (Llama 3 70B's is 1.5%)
LARGEST_LEAF = 0.02
SLQ_STEPS = 30  # spectral_density's default num_iters


@dataclasses.dataclass(frozen=True)
class Probe:
    """A probe as its memory sees it: `name`, and the bytes it keeps per parameter beside its
    products, given the vectors' itemsize and the three-vector storage's."""

    name: str
    basis: str = ""  # spectral_density's basis, where it is one
    k: int = 0  # eigenpairs' k, where it is one

    def kept_bytes(self, itemsize: int, storage: str | None = None) -> float:
        if self.k:
            ncv, stored = eigen_search.default_ncv(self.k), _itemsize(storage)
            return eigen_search.lanczos_search_bytes(1, ncv, itemsize, stored)
        if self.basis:  # three vectors on a node's mesh: products on pytrees split as the params
            return three_term.vector_bytes(1, itemsize, self.basis, SLQ_STEPS, storage, True)
        return 0.0  # a Hutchinson trace keeps its samples, numbers not vectors


PROBES = (
    Probe("certified top-5 (eigenpairs, ncv = 20)", k=5),
    Probe("certified top-1 (eigenpairs, ncv = 20)", k=1),
    Probe("trace (Hutchinson, a product at a time)"),
    Probe("SLQ, full basis (30 steps)", basis="full"),
    Probe("SLQ, three vectors", basis="three"),
)


def largest_dim(
    probe: Probe,
    devices: int,
    itemsize: int = 4,
    storage: str | None = None,
    device_bytes: float = H200_BYTES,
    activations: float = 0.0,
    fraction: float = memory.MEMORY_FRACTION,
    largest_leaf: float = LARGEST_LEAF,
) -> int:
    """The largest D whose vectors, split over `devices`, fit `fraction` of `device_bytes` on
    each beside `activations` bytes of the model's activations for one product, the model's
    largest leaf `largest_leaf` of D."""
    room = fraction * device_bytes - activations
    product = (PRODUCT_VECTORS + largest_leaf) * itemsize
    per_parameter = product + probe.kept_bytes(itemsize, storage)
    return max(0, int(room * devices // per_parameter))


def table(devices: tuple[int, ...] = (8, 32)) -> str:
    """The guide's table: per probe, the largest D on `devices` H200s at the memory policy's
    share and at the whole memory (activations not counted), float32, and for the probes that
    keep vectors (the search, SLQ) those vectors in bfloat16 too (`storage="bfloat16"`)."""
    precisions = (("float32", 4, None), ("float32, bfloat16 vectors", 4, "bfloat16"))
    head = " | ".join(f"{n} H200s, {s}" for n in devices for s in ("half", "whole"))
    lines = [f"| probe | vectors | {head} |", "|---" * (2 + 2 * len(devices)) + "|"]
    for probe in PROBES:
        for label, itemsize, storage in precisions:
            if storage and not (probe.basis or probe.k):
                continue
            cells = [
                _scientific(largest_dim(probe, n, itemsize, storage, fraction=f))
                for n in devices
                for f in (memory.MEMORY_FRACTION, 1.0)
            ]
            lines.append(f"| {probe.name} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _itemsize(storage: str | None) -> int | None:
    return None if storage is None else np.dtype(storage).itemsize


def _scientific(dim: int) -> str:
    """2.1e10 as '2.1 x 10^10'."""
    exponent = int(np.floor(np.log10(dim)))
    if round(dim / 10**exponent, 1) >= 10:  # 9.97e10 rounds to 1.0 x 10^11, not 10.0 x 10^10
        exponent += 1
    return f"{dim / 10**exponent:.1f} x 10^{exponent}"
