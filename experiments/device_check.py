"""The device check, every accelerator row in one call within a budget: `python -m
experiments.device_check [--budget=480] [--trap]` (experiments/bench/device_check.py)."""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.absl_main("experiments.bench.device_check")
