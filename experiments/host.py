"""Process-wide settings every entry point applies first: host devices, the allocator and the
persistent compilation cache."""

import ctypes
import os
import pathlib

import jax
from absl import flags

HOST_DEVICES = flags.DEFINE_integer(
    "host_devices",
    None,
    "CPU devices the runs of a sweep are sharded over (default: one per "
    "usable core, unless XLA_FLAGS sets --xla_force_host_platform_device_count or "
    "JAX_NUM_CPU_DEVICES is set). Only the CPU backend is affected.",
    lower_bound=1,
)

COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache",
    "~/.cache/landscape/jax",
    "Folder of JAX's persistent compilation "
    "cache: a program compiled once (same code, shapes, options and JAX version) is loaded "
    "from it instead of compiled again. '' turns it off. JAX_COMPILATION_CACHE_DIR, if set, "
    "wins.",
)

FORMULATIONS = flags.DEFINE_enum(
    "formulations",
    None,
    ["cpu", "plain"],
    "Trace the hot paths' CPU-tuned or plain XLA "
    "formulations (landscape/backend.py) instead of the backend's own choice (the CPU-tuned ones "
    "on the CPU). They give the same numbers up to float rounding: on one machine, 'plain' checks "
    "how much a result depends on the order of the arithmetic (half precision, chaotic runs). "
    "Recorded in config.json's provenance; pass it again with --resume.",
)

COORDINATOR = flags.DEFINE_string(
    "coordinator_address",
    None,
    "host:port of process 0, to run one sweep over several "
    "processes or machines (jax.distributed), with --num_processes and --process_id; every "
    "process runs the same command. Process 0 writes the records.",
)
NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Processes in a --coordinator_address run.", lower_bound=1
)
PROCESS_ID = flags.DEFINE_integer(
    "process_id",
    None,
    "This process's index (0 .. num_processes - 1) in a --coordinator_address run.",
    lower_bound=0,
)
DISTRIBUTED = flags.DEFINE_bool(
    "distributed",
    False,
    "Run over several processes with jax.distributed's auto-detection "
    "(SLURM, TPU pods, ...) instead of --coordinator_address.",
)


def distributed_flags_error() -> str | None:
    """One sentence if the multi-process flags do not go together, else None."""
    given = [
        COORDINATOR.value is not None,
        NUM_PROCESSES.value is not None,
        PROCESS_ID.value is not None,
    ]
    if any(given) and not all(given):
        return (
            "--coordinator_address, --num_processes and --process_id go together (or "
            "--distributed alone, to let jax.distributed detect them)."
        )
    process_id, num_processes = PROCESS_ID.value, NUM_PROCESSES.value
    if all(given) and process_id is not None and num_processes is not None:
        if process_id >= num_processes:
            return f"--process_id={process_id}: must be below --num_processes={num_processes}."
    if all(given) and DISTRIBUTED.value:
        return "--distributed detects the processes itself: leave out --coordinator_address."
    return None


def start_distributed() -> bool:
    """jax.distributed.initialize() as the flags ask (before the backends start), with CPU
    collectives over gloo so that CPU processes can run one program; False when not asked."""
    if not (DISTRIBUTED.value or COORDINATOR.value):
        return False
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if COORDINATOR.value:
        jax.distributed.initialize(
            COORDINATOR.value, num_processes=NUM_PROCESSES.value, process_id=PROCESS_ID.value
        )
    else:
        jax.distributed.initialize()
    return True


def use_compilation_cache(path: str | None) -> str | None:
    """Point JAX's persistent compilation cache at `path` (None or '': off) and cache every
    program that took at least 0.1 s to compile; returns the folder in use. A folder set by
    JAX_COMPILATION_CACHE_DIR (e.g. the test suite's) is kept. A cache hit is the compiled
    executable itself, so no number changes."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    if not path:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    folder = pathlib.Path(path).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    return str(folder)


def use_host_devices(count: int | None = None) -> int | None:
    """Give the CPU backend `count` devices (None: one per usable core) so that a sweep's runs,
    sharded over all devices (landscape.sweeps), run on every core at once: XLA's CPU fusions use
    one thread each. Without an explicit count, a device count the user set (XLA_FLAGS'
    --xla_force_host_platform_device_count or JAX_NUM_CPU_DEVICES) is kept and None returned.
    Must run before any JAX computation initialises the backends (jax.config raises then).
    """
    if count is None:
        if (
            "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or "JAX_NUM_CPU_DEVICES" in os.environ
        ):
            return None
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    jax.config.update("jax_num_cpu_devices", count)
    return count


def tune_allocator() -> bool:
    """Keep glibc from returning XLA's large temporaries to the OS after every step.

    By default each large buffer is a fresh mmap, so every training step page-faults its
    temporaries in again (~80k faults per GPT step at N = 1024); serving them from a heap that is
    never trimmed halves such steps on CPU. Process-wide, so only entry points call it.
    Returns False where glibc's mallopt is unavailable (nothing changes then).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
    return all(
        libc.mallopt(option, value) == 1
        for option, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**30), (M_ARENA_MAX, 1))
    )
