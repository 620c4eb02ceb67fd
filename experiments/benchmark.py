"""The one benchmark command: `python -m experiments.benchmark [--only=GROUP,...] [--out=f]` times
the hot paths and writes JSON; `--only=device [--budget=480] [--device_rows=...]` is the device
check (`python -m experiments.device_check` its short name). The groups, their flags and rows
live in experiments/bench/ (benchmark.py)."""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.absl_main("experiments.bench.benchmark")
