"""One probe's three-vector SLQ (30 steps) by XLA's count (`memory_analysis()`: temporaries,
arguments and output less the parameters and data) against `blocks.product_bytes` with
`three_term.vector_bytes`, on pytrees (one device's path) and flat vectors (a mesh's), float32
and bfloat16, on the peers MLP (64 -> h -> h -> 10, 64 examples), one device, compiled only:

    python -m experiments.bench.three_term_memory --width=1380

docs/guide/foundation_scale.md, "The estimate against XLA", has its rows at D = 2e6.
"""

from __future__ import annotations

import argparse

from experiments.bench.three_term_memory_rows import rows


def main() -> None:
    """Print the rows for the width asked (`--width`, `--examples`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1380, help="h (1380: D = 2.01e6)")
    parser.add_argument("--examples", type=int, default=64)
    args = parser.parse_args()
    print("| D | vectors | path | XLA, bytes a parameter | estimate | estimate / XLA |")
    print("|---|---|---|---|---|---|")
    for line in rows(args.width, args.examples):
        print(line, flush=True)


if __name__ == "__main__":
    main()
