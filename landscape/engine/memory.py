"""Memory before anything compiles: a config's largest program by shape arithmetic against the
memory this process may take (`landscape.core.memory`), and one sentence naming the field to
lower when it does not fit."""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections

from landscape.core.memory import available_memory_bytes as available_memory_bytes
from landscape.core.memory import device_free_bytes as device_free_bytes
from landscape.core.memory import format_bytes as format_bytes
from landscape.engine.config import ConfigError, flatten, structural_cells


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """What a config's largest program needs at once, by shape arithmetic (before compiling).

    bytes: the estimate; what: the arrays it counts, in words ("the test set: 65536 sequences x
    32 tokens x ..."); field: the config field to lower to need less (dotted, without "config.").
    """

    bytes: float
    what: str
    field: str


def memory_mappings(proc: pathlib.Path = pathlib.Path("/proc")) -> tuple[int, int] | None:
    """(this process's memory mappings, the kernel's limit on them: vm.max_map_count) on Linux;
    None where /proc does not say."""
    try:
        with open(proc / "self" / "maps", "rb") as maps:
            count = sum(1 for _ in maps)
        return count, int((proc / "sys" / "vm" / "max_map_count").read_text())
    except (OSError, ValueError):
        return None


def free_programs_near_the_map_limit(share: float = 0.5) -> bool:
    """Drop JAX's compiled programs (`jax.clear_caches()`) once this process holds more than
    `share` of its limit on memory mappings; whether it did. Each XLA:CPU executable keeps its
    code in mappings (about 6 for a small program, 480 for an n-gram run's), and at the limit
    (65,530 by default) XLA's next compile cannot allocate and the process dies in a segfault
    (docs/architecture.md, "Long-lived processes"). Later calls compile again."""
    counted = memory_mappings()
    if counted is None or counted[0] <= share * counted[1]:
        return False
    jax.clear_caches()
    return True


def check_memory(estimate: MemoryEstimate | None, available: float | None = None) -> None:
    """Raise one ConfigError sentence when `estimate` exceeds the available memory."""
    if estimate is None:
        return
    available = available_memory_bytes() if available is None else available
    if estimate.bytes > available:
        raise ConfigError(
            f"this run needs about {format_bytes(estimate.bytes)} at once ({estimate.what}) but "
            f"{format_bytes(available)} of memory is available: lower config.{estimate.field}."
        )


def traced_runs(values: dict[str, Any], traced: Sequence[str], zipped: bool = False) -> int:
    """Runs one program vmaps, from a flat config (`flatten`): seeds x the traced sweep axes
    (their product, or one axis' length when `zipped`)."""
    lengths = [
        len(v) for k, v in values.items() if k.startswith("sweep.") and k[len("sweep.") :] in traced
    ]
    runs = (max(lengths) if zipped else math.prod(lengths)) if lengths else 1
    return int(values.get("num_seeds", 1)) * runs


@functools.cache
def _flat_defaults(default_config: Callable[[], Any]) -> dict[str, Any]:
    return flatten(default_config())


def estimate_memory(
    cfg: ml_collections.ConfigDict,
    traced: Sequence[str],
    cell_bytes: Callable[[dict[str, Any]], tuple[float, str]],
    fields: Sequence[str],
    default_config: Callable[[], Any] | None = None,
) -> MemoryEstimate:
    """The MemoryEstimate of a config's largest structural cell, by shape arithmetic.

    cell_bytes(values) -> (bytes, what) for one cell's flat config (`flatten`, with the cell's
    fields set). The field to lower is the one of `fields` (integers, in order of preference)
    whose lowering, to half its value or to its default (`default_config()`) if that is lower, saves
    the most in that cell (the first within 80% of the best; any other integer field of the cell
    after them): an absurd value, lowered to its default, saves nearly everything. Flat dicts,
    not ConfigDict copies: about a millisecond.
    """
    flat = flatten(cfg)
    defaults = _flat_defaults(default_config) if default_config is not None else {}
    cells = [dict(flat, **cell) for cell in structural_cells(cfg, traced)] or [flat]
    (need, what), worst = max(
        ((cell_bytes(cell), cell) for cell in cells), key=lambda pair: pair[0][0]
    )

    def saving(field: str) -> float:
        value = worst.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            return -math.inf
        lower = value // 2
        default = defaults.get(field)
        if isinstance(default, int) and not isinstance(default, bool) and 1 <= default < lower:
            lower = default
        return need - cell_bytes(dict(worst, **{field: lower}))[0]

    # the fields named first; where it does not fit, every other integer of the cell after them
    # (train.num_steps, whose snapshots a run keeps, is named where it is what makes it large)
    others = sorted(
        k
        for k, v in worst.items()
        if k not in fields and not k.startswith("sweep.") and type(v) is int  # no bools
    )
    candidates = [*fields, *(others if need > available_memory_bytes() else [])]
    savings = {field: saving(field) for field in candidates}
    best = max(savings.values())
    # about as good as the best: within 80% of its saving, and leaving about as much (a tenth
    # of the seeds saves 90% of 8000 TB and leaves 800 TB, where fewer steps leave megabytes)
    left = need - best
    chosen = next(
        f
        for f in candidates
        if savings[f] >= 0.8 * best and need - savings[f] <= 1.25 * left + 0.01 * need
    )
    return MemoryEstimate(float(need), what, chosen)


def check_compiled_memory(compiled: jax.stages.Compiled, num_devices: int) -> None:
    """Refuse a program whose buffers (XLA's memory analysis, on every device) exceed the memory
    available, before its first step: one sentence instead of an allocation failure. Host
    devices share the host's memory; an accelerator has its own (`device_free_bytes`)."""
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # not every backend reports it
        return
    if analysis is None:
        return
    # on an accelerator the arguments (the runs' state) are on the device already
    new = analysis.temp_size_in_bytes + analysis.output_size_in_bytes - analysis.alias_size_in_bytes
    if jax.default_backend() == "cpu":
        needed = (new + analysis.argument_size_in_bytes) * num_devices
        available = available_memory_bytes()
    else:
        needed, available = new, device_free_bytes()
    if needed > available:
        raise ConfigError(
            f"the compiled training program needs {format_bytes(needed)} (XLA's "
            f"memory analysis) but {format_bytes(available)} is available: lower the "
            "batch size, the sequence length or the number of runs per program."
        )
