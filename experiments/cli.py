"""What every experiment CLI shares: --config/--workdir flags, validation, records, errors.

A paper's CLI is `cli.run(experiment)`, where `experiment` is the paper's experiment module with
`validate(cfg)`, `run(cfg, workdir)` and `needs_x64(cfg)`.
"""

import ctypes
import logging

import jax
from absl import app, flags
from ml_collections import config_flags

from landscape import config as config_lib
from landscape import records, training

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:variant]).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (default runs/<name>/<time>/).")
flags.mark_flags_as_required(["config"])


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
    return all(libc.mallopt(option, value) == 1 for option, value in
               ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2 ** 30), (M_ARENA_MAX, 1)))


def run(experiment) -> None:
    def main(argv):
        del argv
        tune_allocator()
        logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice
        cfg = _CONFIG.value
        if experiment.needs_x64(cfg):
            jax.config.update("jax_enable_x64", True)
        try:
            experiment.validate(cfg)  # before anything compiles or any folder is made
        except config_lib.ConfigError as error:
            raise app.UsageError(str(error)) from None
        workdir = (records.Workdir(_WORKDIR.value) if _WORKDIR.value
                   else records.Workdir.new(cfg.name))
        try:
            experiment.run(cfg, workdir)
        except training.NonFiniteLossError as error:
            raise SystemExit(f"Stopped: {error}") from None

    app.run(main)
