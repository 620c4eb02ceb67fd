"""The certified top-5's products against ARPACK's over start seeds, on the peers MLP at one
size: `python -m experiments.bench.search_products 1e6 7` prints, for seeds 0..6, our search's
products (`eigenpairs(point, 5, "largest", key=jax.random.key(seed))`, the multiplicity check
apart: its Lanczos steps and its candidates' exact residuals, the certificates) and `eigsh`'s
(`which="LA"`, `tol=1e-5`, `ncv=20`, `v0` drawn from the seed) over our own `hvp_flat`, each
with its largest residual by a fresh product. docs/performance.md, "Products against ARPACK".
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import landscape
from experiments.bench import peers, peers_data, search_products_rows
from landscape.engine import backend


def _arguments(argv: list[str]) -> tuple[str, int]:
    """(size, seeds) from the command line; one sentence for a size or count it cannot take."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", nargs="?", default="1e5", choices=sorted(peers_data.SIZES))
    parser.add_argument("seeds", nargs="?", default=5, type=int, help="seeds 0..seeds-1")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"seeds = {args.seeds}: must be at least 1.")
    return args.size, args.seeds


def main(argv: list[str] | None = None) -> None:
    backend.use_float32_matmuls()
    size, seeds = _arguments(argv if argv is not None else [])
    point = peers.mlp_point(peers_data.load(size, None))
    _, matvec = landscape.hvp_flat(point)
    print(search_products_rows.HEADER)
    counts = []
    for seed in range(seeds):
        line, counted = search_products_rows.row(point, matvec, seed)
        print(line, flush=True)
        counts.append(counted)
    print(search_products_rows.summary(np.asarray(counts, np.float64)))


if __name__ == "__main__":
    main(sys.argv[1:])
