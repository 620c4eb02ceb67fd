"""What every experiment CLI shares: --config/--workdir flags, validation, records, errors.

A paper's CLI is `cli.run(experiment)`, where `experiment` is the paper's experiment module with
`validate(cfg)`, `run(cfg, workdir)` and `needs_x64(cfg)`.
"""

import logging

import jax
from absl import app, flags
from ml_collections import config_flags

from experiments import host
from landscape import config as config_lib
from landscape import records, training

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:variant]).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (default runs/<name>/<time>/).")
flags.mark_flags_as_required(["config"])


def run(experiment) -> None:
    def main(argv):
        del argv
        host.use_host_devices(host.HOST_DEVICES.value)  # first: before the backends start
        host.tune_allocator()
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
