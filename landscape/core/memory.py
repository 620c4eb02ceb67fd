"""One memory policy for every probe, the tracker and the engine: the memory free for XLA's
buffers (a device's allocator, or what this process may still take on the CPU), the share of
it one call may plan for (`MEMORY_FRACTION`), and the compiler's memory given back after a long
compile (`give_back_after_compile`). docs/design/curvature.md, "At the size of real models"."""

from __future__ import annotations

import ctypes
import math
import pathlib
import resource

import jax

MEMORY_FRACTION = 0.5  # of the free memory, for the blocks, vectors and evaluations of one call
# a backend compile at least this long leaves a compiler's worth of freed memory in the C heap
TRIM_AFTER_SECONDS = 0.5
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's; absent elsewhere


def give_back_after_compile(event: str, duration_secs: float, **_: str | int) -> None:
    """After a backend compile of TRIM_AFTER_SECONDS or more, the C heap's free pages back to
    the system (glibc's malloc_trim): XLA frees the 100-250 MB it compiled a search with, but
    glibc keeps them resident, and vectors of D above its mmap threshold (32 MB) never reuse
    them, so they added to every large probe's peak (docs/performance.md, "The search's working
    set"). A JAX monitoring listener, run before the program's first run allocates its buffers."""
    if event == COMPILE_EVENT and duration_secs >= TRIM_AFTER_SECONDS and _TRIM is not None:
        _TRIM(0)


jax.monitoring.register_event_duration_secs_listener(give_back_after_compile)


def budget(free: float | None = None) -> float:
    """The bytes one call may hold at once: MEMORY_FRACTION of `free` (default: the free memory
    on the first local device, `device_free_bytes`)."""
    return MEMORY_FRACTION * (device_free_bytes() if free is None else free)


def available_memory_bytes() -> float:
    """Memory this process may still take: the least of MemAvailable (/proc/meminfo), the room
    left under its own cgroup's memory limit and those of the cgroups above it (v2 memory.max,
    v1 memory.limit_in_bytes, less what they hold but could reclaim), and under its address-space
    limit (`ulimit -v`, RLIMIT_AS, less the address space it has); inf where none can be read."""
    return _available(pathlib.Path("/proc"), pathlib.Path("/sys/fs/cgroup"))


def _available(proc: pathlib.Path, cgroup: pathlib.Path) -> float:
    available = _kilobytes(_fields(proc / "meminfo", ":").get("MemAvailable", ""))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        held = _kilobytes(_fields(proc / "self/status", ":").get("VmSize", "0 kB"))
        available = min(available, soft - (held if math.isfinite(held) else 0.0))
    return min(available, _cgroup_room(proc, cgroup))


def _cgroup_room(proc: pathlib.Path, root: pathlib.Path) -> float:
    """The least room under the memory limits of this process's cgroups (/proc/self/cgroup) and
    of every cgroup above them, in the hierarchy mounted at `root` (v2, or v1's memory/)."""
    room = math.inf
    for line in _read(proc / "self/cgroup").splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers == "":  # v2: the whole tree at root (root/unified on a hybrid mount)
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            base = root / "memory"
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts) + 1):
            room = min(room, _room(base.joinpath(*parts[:depth]), *files))
    return room


def _room(folder: pathlib.Path, limit_file: str, usage_file: str, reclaimable: str) -> float:
    """limit - (usage - reclaimable page cache) of one cgroup; inf where it sets no limit."""
    limit = _read(folder / limit_file).strip()
    if not limit.isdigit() or int(limit) >= 2**60:  # "max", unreadable, or v1's "no limit"
        return math.inf
    usage = _read(folder / usage_file).strip()
    cache = _fields(folder / "memory.stat", " ").get(reclaimable, "0").strip()
    held = int(usage) - (int(cache) if cache.isdigit() else 0) if usage.isdigit() else 0
    return float(int(limit) - max(held, 0))


def _fields(path: pathlib.Path, separator: str) -> dict[str, str]:
    """{name: value} of a file of "name<separator>value" lines (/proc/meminfo, memory.stat)."""
    lines = (line.partition(separator) for line in _read(path).splitlines())
    return {name: value for name, _, value in lines}


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def _kilobytes(text: str) -> float:
    """ "123 kB" (a /proc field) in bytes; inf where it is not one."""
    number = text.split()[:1]
    return float(number[0]) * 1024 if number and number[0].isdigit() else math.inf


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
