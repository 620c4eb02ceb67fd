"""`python -m experiments.device_check [--budget=480] [--trap] [--device_rows=...]`: the same
command as `python -m experiments.benchmark --only=device ...` (the device check, every
accelerator row in one call within a budget: experiments/bench/device_check.py), kept as its
short name."""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.absl_main("experiments.bench.device_check")
