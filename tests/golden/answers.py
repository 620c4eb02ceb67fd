"""Every public probe's answer at small float64 points, as arrays keyed `point/probe/field`.

`python -m tests.golden.answers` writes them to `tests/golden/answers.npz`;
`tests/probes/test_golden.py` computes them again and holds the code to them: values to 1e-12,
vectors up to sign, product counts that may only fall. A refactor of the probes moves code,
never these answers.
"""

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import landscape

STORED = Path(__file__).with_name("answers.npz")
RNG = np.random.default_rng(0)
X, Y = RNG.standard_normal((48, 4)), RNG.standard_normal((48, 2))
PARAMS = {"w1": RNG.standard_normal((4, 7)) / 2, "w2": RNG.standard_normal((7, 2)) / 2}
VECTOR = RNG.standard_normal(42)
COUNTS = ("num_hvps", "runs", "num_probes")  # may only fall


def outputs(params: Any, batch: Any) -> jax.Array:
    return jnp.tanh(batch[0] @ params["w1"]) @ params["w2"]


def squared_error(z: jax.Array, batch: Any) -> jax.Array:
    return 0.5 * jnp.mean(jnp.sum((z - batch[1]) ** 2, axis=-1))


def mse(params: Any, batch: Any) -> jax.Array:
    return squared_error(outputs(params, batch), batch)


def mlp_points() -> dict[str, landscape.Point]:
    """The same MLP (D = 42) on its 48 examples: one batch, 6 batches of 8, a stream of them."""
    split = dict(objective=mse, outputs=outputs, output_loss=squared_error)
    batches = [(X[i : i + 8], Y[i : i + 8]) for i in range(0, 48, 8)]
    return {
        "one_batch": landscape.Point(PARAMS, inputs=(X, Y), **split),
        "batches": landscape.Point(PARAMS, batches=landscape.batches((X, Y), 8), **split),
        "stream": landscape.Point(PARAMS, batches=landscape.stream(batches, 4), **split),
    }


def _fields(result: Any, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {name: np.asarray(getattr(result, name)) for name in names}


def _eigenpairs(
    point: landscape.Point, which: str, matrix: str, vectors: bool = True
) -> dict[str, np.ndarray]:
    """Values, residuals, product counts, and the vectors where the eigenspace fixes them."""
    found = landscape.eigenpairs(point, 3, which, dense_below=0, progress=None, matrix=matrix)
    fields = ("values", "residuals", "num_hvps", "runs") + (("flat_vectors",) if vectors else ())
    return _fields(found, fields)


def matrix_free(point: landscape.Point) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """Each matrix-free probe of H and G at `point`."""
    yield "gradient", {"vector": landscape.gradient_at(point).vector}
    for matrix in ("hessian", "ggn"):
        yield f"{matrix}/product", {"Hv": np.asarray(landscape.hvp_flat(point, matrix)[1](VECTOR))}
        lanczos = landscape.lanczos_spectrum(point, 12, progress=None, matrix=matrix)
        yield f"{matrix}/lanczos", _fields(lanczos, ("ritz_values", "weights"))
        yield f"{matrix}/top3", _eigenpairs(point, "largest", matrix)
        for method, probes in (("hutch++", 12), ("hutchinson", 8)):
            found = landscape.trace(point, probes, method=method, progress=None, matrix=matrix)
            fields = ("value", "stderr", "exact_part", "samples", "num_probes")
            yield f"{matrix}/trace_{method}", _fields(found, fields)
        density = landscape.spectral_density(point, 4, 10, progress=None, matrix=matrix)
        yield f"{matrix}/slq", _fields(density, ("nodes", "weights"))
    yield "hessian/bottom3", _eigenpairs(point, "smallest", "hessian")
    yield "hessian/diagonal", _fields(landscape.diagonal(point, 4), ("values", "stderr"))


def dense(point: landscape.Point) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """The exact Hessian's and Gauss-Newton matrix's spectra."""
    yield "hessian/dense", {"eigenvalues": np.asarray(landscape.hessian_at(point).eigenvalues)}
    yield "ggn/dense", {"eigenvalues": np.asarray(landscape.ggn_at(point).ggn_eigenvalues)}


def markov() -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """A paper's points: the unigram point of Thm 2 (tied) and Thm 3's saddle (untied)."""
    tied = landscape.markov.theta_pi(p=0.5, q=0.8, seq_len=4)
    untied = landscape.markov.theta_pi(p=0.5, q=0.8, seq_len=4, tied=False)
    yield "markov_tied/top3", _eigenpairs(tied, "largest", "hessian")
    # its 3 smallest lie in a null space of many dimensions: their vectors are any of it
    yield "markov_tied/bottom3", _eigenpairs(tied, "smallest", "hessian", vectors=False)
    yield (
        "markov_tied/hessian/dense",
        {"eigenvalues": np.asarray(landscape.hessian_at(tied).eigenvalues)},
    )
    trace = landscape.trace(tied, 12, progress=None)
    yield "markov_tied/trace", _fields(trace, ("value", "stderr", "samples"))
    density = landscape.spectral_density(tied, 4, 10, progress=None)
    yield "markov_tied/slq", _fields(density, ("nodes", "weights"))
    escape = landscape.escape_directions(untied)
    yield "markov_untied/escape", {"ratios": np.asarray(escape.ratios)}
    grid = [landscape.markov.theta_pi(p=p, q=0.8, seq_len=4) for p in (0.3, 0.6)]
    for i, found in enumerate(landscape.trace(grid, 12, progress=None)):
        yield f"markov_list{i}/trace", _fields(found, ("value", "stderr", "samples"))
    for i, found in enumerate(landscape.spectral_density(grid, 4, 10, progress=None)):
        yield f"markov_list{i}/slq", _fields(found, ("nodes", "weights"))


def tracked() -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """The tracker's measurements along 4 SGD steps, called from Python (a warm start each)."""
    tracker = landscape.tracker(mse, num_iters=8, k=2)
    params, state = PARAMS, tracker.init(PARAMS, jax.random.key(0))
    optimizer = optax.sgd(0.3)
    opt_state = optimizer.init(params)
    for step in range(4):
        measurement, state = tracker.update(state, params, (X, Y))
        yield (
            f"tracker/step{step}",
            {name: np.asarray(value) for name, value in measurement._asdict().items()},
        )
        updates, opt_state = optimizer.update(jax.grad(mse)(params, (X, Y)), opt_state)
        params = optax.apply_updates(params, updates)


def compute() -> dict[str, np.ndarray]:
    """Every answer, flat: `point/probe/field` -> array."""
    answers: dict[str, np.ndarray] = {}
    with jax.enable_x64(True):
        sources: list[tuple[str, Callable[[], Iterator]]] = []
        for name, point in mlp_points().items():
            sources.append((name, lambda point=point: matrix_free(point)))
        sources += [("one_batch", lambda: dense(mlp_points()["one_batch"]))]
        sources += [("", markov), ("", tracked)]
        for prefix, source in sources:
            for probe, fields in source():
                for field, value in fields.items():
                    key = "/".join(part for part in (prefix, probe, field) if part)
                    answers[key] = np.asarray(value)
    return answers


if __name__ == "__main__":
    found = compute()
    np.savez_compressed(STORED, **found)
    print(f"{len(found)} answers written to {STORED}", file=sys.stderr)
