"""The command-line flags of the process-wide settings every entry point applies first (host
devices, the compilation cache, formulations, several processes); the settings themselves are
`landscape.engine.host.setup()`, which scripts call too; whether the multi-process flags go
together and how they start the processes: experiments/processes.py."""

from absl import flags

from landscape.engine import host as landscape_host

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
    landscape_host.DEFAULT_CACHE,
    "Folder of JAX's persistent compilation "
    "cache: a program compiled once (same code, shapes, options and JAX version) is loaded "
    "from it instead of compiled again. '' turns it off. JAX_COMPILATION_CACHE_DIR, if set, "
    "wins. A folder that cannot be made or written: the run goes on without a cache, one line "
    "says why.",
)

FORMULATIONS = flags.DEFINE_enum(
    "formulations",
    None,
    ["cpu", "plain"],
    "Trace the hot paths' CPU-tuned or plain XLA "
    "formulations (landscape/engine/backend.py) instead of the backend's own choice "
    "(the CPU-tuned ones on the CPU). They give the same numbers up to float rounding: "
    "on one machine, 'plain' checks how much a result depends on the order of the "
    "arithmetic (half precision, chaotic runs). Recorded in config.json's provenance; pass it "
    "again with --resume.",
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

PROCESS_TIMEOUT = flags.DEFINE_float(
    "process_timeout",
    60.0,
    "Over several processes: seconds each one waits for the others to join, and for a process "
    "that stopped answering (killed, crashed, hung) before it ends with a sentence naming it.",
    lower_bound=1.0,
)
