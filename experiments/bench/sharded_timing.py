"""Probes on a model split over 8 emulated CPU devices against one device
(`python -m experiments.benchmark --only=sharded`): the 64 -> h -> h -> 10 tanh MLP of the peers
benchmark, its hidden weights split Megatron-style over "model" of a (2, 4) mesh, each probe in
a fresh process of 1 and of 8 devices: peak memory (the process's), time, and the answers'
agreement. The issue's target: the 8-device process at most 1.5x the one-device one.
`hvp_loop` is the floor this layout sets: 100 Hutchinson forms by a hand-written HVP on the
parameters as they lie (no flat vectors). `--sharded.inputs=data` splits the examples over the
mesh's "data" axis, as a DP x TP run would (replicated, the data replicas repeat each other's
work and activations)."""

from __future__ import annotations

from typing import Any

from absl import flags

from experiments.bench.sharded_timing_rows import one as run_one
from experiments.bench.timing import Rows

_WIDTH = flags.DEFINE_integer("sharded.width", 1400, "Hidden width (1400: D = 2.07e6).")
_PROBES = flags.DEFINE_list(
    "sharded.probes",
    ["top5", "trace", "hutchpp", "slq", "hvp_loop"],
    "Probes (hvp_loop: 100 Hutchinson forms by a hand-written sharded HVP, the layout's floor).",
)
_INPUTS = flags.DEFINE_enum(
    "sharded.inputs", "replicated", ["replicated", "data"],
    "The examples on every device, or split over the mesh's data axis (DP x TP).",
)  # fmt: skip


def bench_sharded(repeats: int, one_by_one: int) -> dict[str, Any]:
    del repeats, one_by_one
    out = Rows()
    for probe in _PROBES.value:
        one, eight = (run_one(probe, n, _WIDTH.value, _INPUTS.value) for n in (1, 8))
        if "error" in one or "error" in eight:
            out[probe] = dict(one=one, eight=eight)
            continue
        a, b = (sum(abs(x) for x in r["answer"]) for r in (one, eight))
        gap = max(abs(x - y) for x, y in zip(one["answer"], eight["answer"], strict=True))
        out[probe] = dict(
            D=one["D"], one=one, eight=eight,
            peak_ratio=round(eight["peak_mb"] / one["peak_mb"], 2),
            relative_gap=gap / max(a, b, 1e-30),
        )  # fmt: skip
    return out
