"""The search-against-ARPACK table's rows (the command line: experiments/bench/search_products.py):
one seed's certified top-5 and `eigsh`'s over the same `hvp_flat`, and the summary under them."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

import landscape

HEADER = (
    "| seed | ours: search = Lanczos steps + exact residuals (check) | max residual "
    "| ARPACK | max residual |\n|---|---|---|---|---|"
)


def row(point: landscape.Point, matvec: Callable, seed: int) -> tuple[str, tuple[int, ...]]:
    """One seed's table row and its counts (search, its Lanczos steps, ARPACK's products):
    `eigenpairs(point, 5, "largest")` from `jax.random.key(seed)`, and `eigsh` (`which="LA"`,
    `tol=1e-5`, `ncv=20`, `v0` drawn from the seed) over `matvec`, every product counted, each
    with its largest residual by a fresh product."""
    from scipy.sparse.linalg import LinearOperator, eigsh  # type: ignore[import-untyped]  # no stubs

    found = landscape.eigenpairs(
        point, 5, "largest", dense_below=0, progress=None, key=jax.random.key(seed)
    )
    count = [0]

    def counted(v: np.ndarray) -> np.ndarray:
        count[0] += 1
        return np.asarray(matvec(v), np.float64)

    dim = point.num_params
    operator = LinearOperator((dim, dim), matvec=counted, dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(dim)
    values, vectors = eigsh(operator, k=5, which="LA", tol=1e-5, ncv=20, v0=v0)
    taken = count[0]
    residual = max(
        float(np.linalg.norm(counted(v) - value * v))
        for value, v in zip(values, vectors.T, strict=True)
    )
    search = found.num_hvps - found.num_hvps_check  # Lanczos steps + exact residuals
    steps = search - found.num_hvps_residuals
    line = (
        f"| {seed} | {search} = {steps} + {found.num_hvps_residuals} ({found.num_hvps_check}) "
        f"| {max(found.residuals):.2g} | {taken} | {residual:.2g} |"
    )
    return line, (search, steps, taken)


def summary(counts: np.ndarray) -> str:
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
