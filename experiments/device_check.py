"""The device check, every accelerator row in one call within a budget: `python -m
experiments.device_check [--budget=480] [--trap]` (experiments/bench/device_check.py)."""

from absl import app

from experiments.bench.device_check import main

if __name__ == "__main__":
    app.run(main)
