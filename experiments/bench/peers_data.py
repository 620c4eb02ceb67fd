"""The peers benchmark's data in numpy alone: the 64 -> h -> h -> 10 tanh MLP's parameters and
512 examples (float32, PyTorch's default init drawn by numpy), saved once to a file that every
framework's process reads, and the answers' rows. A peer's process imports this module, its
own framework and nothing of JAX, so its peak memory is its own."""

from __future__ import annotations

import math
import pathlib
from typing import Any

import numpy as np

IN, OUT, EXAMPLES = 64, 10, 512
SIZES = {"1e3": 1_000, "1e4": 10_000, "1e5": 100_000, "1e6": 1_000_000, "1e7": 10_000_000}
LEAVES = ("w1", "b1", "w2", "b2", "w3", "b3")  # torch's parameter order (weights transposed)
STREAMED_BATCHES = 4  # the stream_* probes: the 512 examples as 4 batches of 128


def hidden_for(dim: int) -> int:
    """The width h whose MLP has the parameter count closest to `dim`."""
    root = (-(IN + OUT + 2) + math.sqrt((IN + OUT + 2) ** 2 + 4 * (dim - OUT))) / 2
    return min((max(1, math.floor(root)), math.ceil(root)), key=lambda h: abs(count(h) - dim))


def count(hidden: int) -> int:
    """Parameters of the 64 -> h -> h -> 10 MLP."""
    return (IN + 1) * hidden + (hidden + 1) * hidden + (hidden + 1) * OUT


def mlp_arrays(hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters (w (in, out), b), inputs x (512, 64) and int labels y (512,), float32:
    PyTorch's Linear init U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for i, (fan_in, fan_out) in enumerate(((IN, hidden), (hidden, hidden), (hidden, OUT)), 1):
        bound = 1.0 / math.sqrt(fan_in)
        arrays[f"w{i}"] = rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)
        arrays[f"b{i}"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
    arrays["x"] = rng.standard_normal((EXAMPLES, IN)).astype(np.float32)
    arrays["y"] = rng.integers(0, OUT, EXAMPLES).astype(np.int32)
    return arrays


def save(size: str, folder: pathlib.Path) -> pathlib.Path:
    """The MLP of `size` written once to `folder/mlp_<size>.npz`, for every process to read."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"mlp_{size}.npz"
    arrays: dict[str, Any] = mlp_arrays(hidden_for(SIZES[size]))
    np.savez(path, allow_pickle=False, **arrays)
    return path


def load(size: str, folder: str | None) -> dict[str, np.ndarray]:
    """The MLP's arrays as `save` wrote them into `folder`; drawn here when no folder is given."""
    if not folder:
        return mlp_arrays(hidden_for(SIZES[size]))
    with np.load(pathlib.Path(folder) / f"mlp_{size}.npz") as data:
        return {key: data[key] for key in data.files}


def direction(arrays: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """A unit vector in parameter space (a dict like the parameters), drawn by numpy."""
    rng = np.random.default_rng(seed)
    v = {k: rng.standard_normal(arrays[k].shape).astype(np.float32) for k in LEAVES}
    norm = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in v.values()))
    return {k: a / np.float32(norm) for k, a in v.items()}


def numpy_loss(arrays: dict[str, np.ndarray]) -> float:
    """The MLP's mean cross-entropy in float64 numpy: the reference for both frameworks."""
    a = {k: v.astype(np.float64) for k, v in arrays.items() if k != "y"}
    h = np.tanh(a["x"] @ a["w1"] + a["b1"])
    h = np.tanh(h @ a["w2"] + a["b2"])
    z = h @ a["w3"] + a["b3"]
    top = z.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(z)), arrays["y"]]))


def torch_layout(tree: dict[str, np.ndarray]) -> list[np.ndarray]:
    """A parameter-shaped dict in torch's order and shapes (weights (out, in))."""
    return [tree[k].T.copy() if k.startswith("w") else tree[k] for k in LEAVES]


def from_torch_layout(leaves: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of `torch_layout`."""
    return {k: a.T if k.startswith("w") else a for k, a in zip(LEAVES, leaves, strict=True)}


def eigen_answer(values: Any, residuals: Any, **more: Any) -> dict[str, Any]:
    """Eigenvalues and their residuals as a row, with the largest relative residual."""
    values = np.asarray(values, np.float64)
    residuals = np.asarray(residuals, np.float64)
    return {
        "values": values.tolist(),
        "residuals": residuals.tolist(),
        "max_rel_residual": float(np.max(residuals / np.abs(values))),
        **more,
    }


def slq_answer(dim: int, nodes: Any, weights: Any) -> dict[str, Any]:
    """The nodes' largest value and the density's mean times D (an estimate of the trace)."""
    nodes, weights = np.asarray(nodes, np.float64), np.asarray(weights, np.float64)
    return {
        "max_node": float(nodes.max()),
        "trace_estimate": float(dim * np.mean(np.sum(nodes * weights, axis=1))),
    }
