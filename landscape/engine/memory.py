"""Memory before anything compiles: a config's largest program by shape arithmetic, the memory
this process may take, and one sentence naming the field to lower when it does not fit."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections

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


def available_memory_bytes() -> float:
    """Memory this process may still take: MemAvailable of /proc/meminfo, capped by a cgroup
    limit where one is set; inf where neither can be read (then nothing is refused)."""
    available = math.inf
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = float(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            available = min(available, float(text))
    return available


def device_free_bytes(device: jax.Device | None = None) -> float:
    """Memory still free on `device` (default: the first local device) for XLA's buffers: its
    allocator's limit less what is in use (`device.memory_stats()`, reported by GPUs and TPUs),
    or, where the device reports none (the CPU), `available_memory_bytes()`."""
    device = jax.local_devices()[0] if device is None else device
    try:
        stats = device.memory_stats()
    except Exception:  # not every backend implements it
        stats = None
    if not stats or "bytes_limit" not in stats:
        return available_memory_bytes()
    return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0))


def format_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


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
    the most in that cell (the first within 80% of the best): an absurd value, lowered to its
    default, saves nearly everything. Flat dicts, not ConfigDict copies: about a millisecond.
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

    savings = {field: saving(field) for field in fields}
    best = max(savings.values())
    return MemoryEstimate(float(need), what, next(f for f in fields if savings[f] >= 0.8 * best))


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
