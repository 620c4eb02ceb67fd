"""Scan & Snap experiments (Tian et al., 2023): python -m experiments.scan_snap --config=<file>.

    python -m experiments.scan_snap --config=configs/syn_small.py
    python -m experiments.scan_snap --config=configs/syn_medium.py --workdir=runs/fig6
    python -m experiments.scan_snap --config=configs/syn_small.py --config.optim.lr_z=0.5
"""

import logging

from absl import app, flags
from ml_collections import config_flags

from landscape import config as config_lib
from landscape import records, training
from landscape.scan_snap import experiment

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:variant]).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (default runs/<name>/<time>/).")
flags.mark_flags_as_required(["config"])


def main(argv):
    del argv
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice
    cfg = _CONFIG.value
    try:
        experiment.validate(cfg)  # before anything compiles or any folder is made
    except config_lib.ConfigError as error:
        raise app.UsageError(str(error)) from None
    workdir = records.Workdir(_WORKDIR.value) if _WORKDIR.value else records.Workdir.new(cfg.name)
    try:
        experiment.run(cfg, workdir)
    except training.NonFiniteLossError as error:
        raise SystemExit(f"Stopped: {error}") from None


if __name__ == "__main__":
    app.run(main)
