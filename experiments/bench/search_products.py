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

import jax
import numpy as np

import landscape
from experiments.bench import peers, peers_data
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
    from scipy.sparse.linalg import LinearOperator, eigsh  # type: ignore[import-untyped]  # no stubs

    backend.use_float32_matmuls()
    size, seeds = _arguments(argv if argv is not None else [])
    point = peers.mlp_point(peers_data.load(size, None))
    _, matvec = landscape.hvp_flat(point)
    dim, count = point.num_params, [0]

    def counted(v: np.ndarray) -> np.ndarray:
        count[0] += 1
        return np.asarray(matvec(v), np.float64)

    print(
        "| seed | ours: search = Lanczos steps + exact residuals (check) | max residual "
        "| ARPACK | max residual |"
    )
    print("|---|---|---|---|---|")
    counts = []
    for seed in range(seeds):
        found = landscape.eigenpairs(
            point, 5, "largest", dense_below=0, progress=None, key=jax.random.key(seed)
        )
        count[0] = 0
        operator = LinearOperator((dim, dim), matvec=counted, dtype=np.float64)
        v0 = np.random.default_rng(seed).standard_normal(dim)
        values, vectors = eigsh(operator, k=5, which="LA", tol=1e-5, ncv=20, v0=v0)
        taken = count[0]
        residual = max(
            float(np.linalg.norm(counted(v) - value * v))
            for value, v in zip(values, vectors.T, strict=True)
        )
        print(
            f"| {seed} | {_split(found)} ({found.num_hvps_check}) "
            f"| {max(found.residuals):.2g} | {taken} | {residual:.2g} |",
            flush=True,
        )
        search = found.num_hvps - found.num_hvps_check
        counts.append((search, search - found.num_hvps_residuals, taken))
    print(_summary(np.asarray(counts, np.float64)))


def _summary(counts: np.ndarray) -> str:
    """Medians and means of the search, its Lanczos steps and ARPACK's (columns of `counts`,
    a row a seed), and each of ours paired with ARPACK's by seed: the mean difference with its
    standard error, and at how many seeds ours took no more."""
    lines = []
    for name, column in (("search", 0), ("Lanczos steps", 1), ("ARPACK", 2)):
        x = counts[:, column]
        lines.append(f"{name}: median {np.median(x):g}, mean {x.mean():.4g}")
    for name, column in (("search", 0), ("Lanczos steps", 1)):
        d = counts[:, column] - counts[:, 2]
        error = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else np.nan
        lines.append(
            f"{name} - ARPACK, paired: {d.mean():+.3g} ± {error:.2g}, "
            f"no more at {int(np.sum(d <= 0))} of {d.size} seeds"
        )
    return "\n".join(lines)


def _split(found: landscape.Eigenpairs) -> str:
    """The search's products outside the multiplicity check, as Lanczos steps + residuals."""
    search = found.num_hvps - found.num_hvps_check
    residuals = found.num_hvps_residuals
    return f"{search} = {search - residuals} + {residuals}"


if __name__ == "__main__":
    main(sys.argv[1:])
