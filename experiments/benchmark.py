"""Times the hot paths and writes JSON: `python -m experiments.benchmark [--only=GROUP]
[--out=f]`. The groups, their flags and rows live in experiments/bench/ (benchmark.py)."""

from absl import app

from experiments.bench.benchmark import main

if __name__ == "__main__":
    app.run(main)
