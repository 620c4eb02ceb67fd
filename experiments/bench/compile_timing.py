"""Where compilation goes: the programs of a training run, each traced, lowered and compiled by
XLA on its own with the persistent cache off (`python -m experiments.benchmark --only=compile`).

A run's programs are those `training.train` hands to the hook of `training.watching_programs`
before it compiles them: the vmapped init, the first records (the snapshot) and the chunk.
`programs_of(start)` runs an experiment's own entry point up to that point and times
`jax.jit(f).trace(...)`, `.lower()` and `.compile()` of each (with XLA's cost analysis and its
instruction counts before and after optimisation) instead of training.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from landscape.engine import training


class _Measured(Exception):
    """Stops a run once its programs are measured."""


def _instructions(hlo_text: str) -> int:
    """HLO instructions of a module's text (its `name = op(...)` lines)."""
    return sum(1 for line in hlo_text.splitlines() if " = " in line and not line.startswith("//"))


def stage_seconds(jitted: Any, *args: Any) -> dict[str, float]:
    """Seconds to trace, lower and compile `jitted` at `args`, the compile's CPU seconds (XLA's
    LLVM code generation runs on several threads), HLO instructions before and after XLA's
    optimisation, and XLA's estimated flops and bytes."""
    t0 = time.perf_counter()
    traced = jitted.trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2, c2 = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    t3, c3 = time.perf_counter(), time.process_time()
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost
    return dict(
        trace_seconds=t1 - t0,
        lower_seconds=t2 - t1,
        compile_seconds=t3 - t2,
        compile_cpu_seconds=c3 - c2,
        hlo_instructions=_instructions(lowered.as_text(dialect="hlo")),
        optimized_instructions=_instructions(compiled.as_text()),
        flops=float(cost.get("flops", 0.0)),
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
    )


def _measure(programs: training.Programs) -> dict[str, dict[str, float]]:
    """The three programs `training.train` would compile, each measured."""
    rows = {"init": stage_seconds(programs.init, *programs.init_args)}
    state = programs.init(*programs.init_args)
    rows["first_snapshot"] = stage_seconds(programs.first_records, state, programs.hparams)
    rows["chunk"] = stage_seconds(programs.chunk, state, jnp.int32(0), programs.hparams)
    return rows


def programs_of(start: Callable[[], object]) -> dict[str, dict[str, float]]:
    """The programs `start()` (one training program's entry point) would compile, measured."""
    found: list[dict[str, dict[str, float]]] = []

    def measured(programs: training.Programs) -> None:
        found.append(_measure(programs))
        raise _Measured  # the run ends here, before it compiles

    with training.watching_programs(measured), contextlib.suppress(_Measured):
        start()
    if not found:
        raise RuntimeError("the entry point compiled no training program")
    return found[0]


def total(rows: dict[str, dict[str, float]]) -> dict[str, float]:
    """Trace + lower + compile seconds of a run's programs together, and each stage's sum."""
    out = {
        stage: float(sum(r[stage] for r in rows.values()))
        for stage in ("trace_seconds", "lower_seconds", "compile_seconds", "compile_cpu_seconds")
    }
    out["seconds"] = out["trace_seconds"] + out["lower_seconds"] + out["compile_seconds"]
    return out


def median_rows(repeats: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per program and field, the median over repeated measurements."""
    return {
        program: {
            field: float(np.median([r[program][field] for r in repeats]))
            for field in repeats[0][program]
        }
        for program in repeats[0]
    }
