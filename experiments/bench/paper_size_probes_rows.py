"""The rows of the paper-size probes, one JSON object each (the n-gram Fig. 3 point, Markov
theta_pi at N = 128, a 15-fold eigenvalue cluster); the command line and its flags:
experiments/bench/paper_size_probes.py (it sets the device count before jax is imported, so
this module imports jax inside its functions)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any


def _timed(name: str, call: Callable[[], Any], extra: Callable[[Any], dict] | None = None) -> Any:
    start = time.perf_counter()
    out = call()
    seconds = round(time.perf_counter() - start, 2)
    more = extra(out) if extra else {}
    print(json.dumps({"row": name, "seconds": seconds, **more}), flush=True)
    return out


def _fig3(k: int = 2) -> Any:
    import landscape

    return landscape.ngrams.points.theta_star(
        k, 3.0, num_states=5, order_n=3, seq_len=32, alpha=0.5, num_heads=2, num_sequences=4096
    )


def _cluster(size: int = 2548) -> tuple[Any, Any]:
    """½ xᵀAx whose 4 smallest eigenvalues sit among 400 of ~ -1e-6 beside 1700 zeros."""
    import jax.numpy as jnp
    import numpy as np

    import landscape

    rng = np.random.default_rng(0)
    values = np.concatenate(
        [-np.abs(rng.normal(size=400)) * 1e-6, np.zeros(1700), rng.uniform(1e-3, 0.2, size - 2100)]
    )
    rotation, _ = np.linalg.qr(rng.normal(size=(size, size)))
    point = landscape.Point(
        {"x": jnp.zeros(size)},
        objective=lambda p, m: 0.5 * p["x"] @ m @ p["x"],
        inputs=jnp.asarray((rotation * values) @ rotation.T),
    )
    return point, np.sort(values)[:4]


def time_rows(rows: list[str]) -> None:
    """Time and print the rows named (hessian, ggn128, ggn_ngram, eigen)."""
    import numpy as np

    import landscape

    quiet = None
    if "hessian" in rows:
        hessian = _timed("hessian_at", lambda: landscape.hessian_at(_fig3(), progress=quiet))
        _timed("numpy eigh", lambda: np.linalg.eigh(hessian.matrix))
        _timed("describe", hessian.describe)
    if "ggn128" in rows:
        point = landscape.markov.theta_pi(0.2, 0.3, seq_len=128)
        _timed("ggn_at N=128", lambda: landscape.ggn_at(point, progress=quiet),
               extra=lambda g: {"G_bb": float(g.block("b")[0, 0]), "pi0pi1": 0.24})  # fmt: skip
    if "ggn_ngram" in rows:
        _timed("ggn_at n-gram", lambda: landscape.ggn_at(_fig3(), progress=quiet))
    if "eigen" in rows:

        def found(e: Any) -> dict:
            return {"values": e.values.tolist(), "converged": e.converged, "reason": e.reason}

        _timed("eigenpairs default", lambda: landscape.eigenpairs(_fig3(), 4), extra=found)
        _timed("eigenpairs unigram Lanczos",
               lambda: landscape.eigenpairs(_fig3(1), 4, dense_below=0), extra=found)  # fmt: skip
        point, exact = _cluster()
        _timed("eigenpairs cluster", lambda: landscape.eigenpairs(point, 4, dense_below=0),
               extra=lambda e: {**found(e), "exact": exact.tolist()})  # fmt: skip
