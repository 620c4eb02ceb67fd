"""Times the hot paths and writes JSON: `python -m experiments.benchmark [--only=GROUP]
[--out=f]`. The groups, their flags and rows live in experiments/bench/ (benchmark.py)."""

if __name__ == "__main__":  # the Ctrl-C hook first, then the imports (jax): experiments/launch.py
    from experiments import launch

    launch.absl_main("experiments.bench.benchmark")
