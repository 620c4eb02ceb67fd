"""The probes' activations against XLA's count on one device, compiled only: a lone product, a
Hutchinson block and the search on tanh MLPs at 512-1024 examples and on causal transformers,
where the activations weigh beside the vectors (`blocks.activation_bytes`):

    python -m experiments.bench.activations [--models=N,N]

docs/guide/foundation_scale.md, "The activations", has its table.
"""

from __future__ import annotations

import argparse

from experiments.bench.activations_rows import MODELS, rows


def main() -> None:
    """Print the table (`--models` the indices of `activations_rows.MODELS`; default all)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="indices, comma-separated (default all)")
    args = parser.parse_args()
    names = list(MODELS)
    if args.models:
        chosen = args.models.split(",")
        if not all(i.isdigit() and int(i) < len(names) for i in chosen):
            parser.error(f"--models={args.models}: indices 0-{len(names) - 1}, comma-separated")
        names = [names[int(i)] for i in chosen]
    print("| model | D | program | XLA, MB | estimate | estimate / XLA | four peaks / XLA |\n"
          "|---|---|---|---|---|---|---|")  # fmt: skip
    for line in rows(names):
        print(line, flush=True)


if __name__ == "__main__":
    main()
