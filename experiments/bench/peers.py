"""The models of the peers benchmark (`experiments/bench/peers_timing.py`), the same arrays in JAX
and PyTorch: a 64 -> h -> h -> 10 tanh MLP with mean cross-entropy on 512 fixed examples (float32,
PyTorch's default init drawn by numpy), and the Scan & Snap WikiText model on one fixed batch
(JAX only). torch is imported inside the functions that need it.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

IN, OUT, EXAMPLES = 64, 10, 512
SIZES = {"1e3": 1_000, "1e4": 10_000, "1e5": 100_000, "1e6": 1_000_000, "1e7": 10_000_000}
LEAVES = ("w1", "b1", "w2", "b2", "w3", "b3")  # torch's parameter order (weights transposed)
WIKITEXT = "../shared/data/wikitext-2"  # configs/wikitext.py's folder, beside the repository


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


def direction(arrays: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """A unit vector in parameter space (a dict like the parameters), drawn by numpy."""
    rng = np.random.default_rng(seed)
    v = {k: rng.standard_normal(arrays[k].shape).astype(np.float32) for k in LEAVES}
    norm = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in v.values()))
    return {k: a / np.float32(norm) for k, a in v.items()}


def mlp_outputs(params: dict[str, jax.Array], inputs: tuple[jax.Array, jax.Array]) -> jax.Array:
    """The logits (512, 10)."""
    x, _ = inputs
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    h = jnp.tanh(h @ params["w2"] + params["b2"])
    return h @ params["w3"] + params["b3"]


def mlp_output_loss(logits: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> jax.Array:
    """Mean cross-entropy of the logits against the labels."""
    _, y = inputs
    picked = jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def mlp_objective(params: dict[str, jax.Array], inputs: tuple[jax.Array, jax.Array]) -> jax.Array:
    return mlp_output_loss(mlp_outputs(params, inputs), inputs)


def mlp_point(arrays: dict[str, np.ndarray], dtype: Any = jnp.float32) -> Any:
    """The MLP's loss at its initial parameters as a `landscape.Point` (with the split the
    Gauss-Newton matrix needs), in `dtype` (float64 for the dense reference, x64 on)."""
    import landscape

    params = {k: jnp.asarray(arrays[k], dtype) for k in LEAVES}
    return landscape.Point(
        params,
        objective=mlp_objective,
        inputs=(jnp.asarray(arrays["x"], dtype), jnp.asarray(arrays["y"])),
        outputs=mlp_outputs,
        output_loss=mlp_output_loss,
        name=f"mlp h={arrays['w2'].shape[0]}",
    )


def numpy_loss(arrays: dict[str, np.ndarray]) -> float:
    """The MLP's mean cross-entropy in float64 numpy: the reference for both frameworks."""
    a = {k: v.astype(np.float64) for k, v in arrays.items() if k != "y"}
    h = np.tanh(a["x"] @ a["w1"] + a["b1"])
    h = np.tanh(h @ a["w2"] + a["b2"])
    z = h @ a["w3"] + a["b3"]
    top = z.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(z)), arrays["y"]]))


def torch_mlp(arrays: dict[str, np.ndarray], device: str = "cpu") -> tuple[Any, Any, Any, Any]:
    """(model, criterion, x, y) in PyTorch with the same arrays: nn.Sequential of Linear and
    Tanh, nn.CrossEntropyLoss (mean), float32, on `device`."""
    import torch

    hidden = arrays["w2"].shape[0]
    layers = [
        torch.nn.Linear(IN, hidden),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Linear(hidden, OUT),
    ]
    with torch.no_grad():
        for i, layer in enumerate(layers, 1):
            layer.weight.copy_(torch.from_numpy(arrays[f"w{i}"].T.copy()))
            layer.bias.copy_(torch.from_numpy(arrays[f"b{i}"]))
    model = torch.nn.Sequential(layers[0], torch.nn.Tanh(), layers[1], torch.nn.Tanh(), layers[2])
    x = torch.from_numpy(arrays["x"]).to(device)
    y = torch.from_numpy(arrays["y"].astype(np.int64)).to(device)
    return model.to(device), torch.nn.CrossEntropyLoss(), x, y


def torch_layout(tree: dict[str, np.ndarray]) -> list[np.ndarray]:
    """A parameter-shaped dict in torch's order and shapes (weights (out, in))."""
    return [tree[k].T.copy() if k.startswith("w") else tree[k] for k in LEAVES]


def from_torch_layout(leaves: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of `torch_layout`."""
    return {k: a.T if k.startswith("w") else a for k, a in zip(LEAVES, leaves, strict=True)}


def agreement(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """Loss and gradient of the MLP in JAX and PyTorch (CPU) against each other and numpy."""
    point = mlp_point(arrays)
    loss_jax = float(point.loss())
    grad_jax = jax.grad(mlp_objective)(point.params, point.inputs)
    model, criterion, x, y = torch_mlp(arrays)
    loss = criterion(model(x), y)
    loss.backward()
    grad_torch = from_torch_layout([p.grad.numpy() for p in model.parameters()])
    diff = max(float(np.max(np.abs(np.asarray(grad_jax[k]) - grad_torch[k]))) for k in LEAVES)
    scale = max(float(np.max(np.abs(grad_torch[k]))) for k in LEAVES)
    reference = numpy_loss(arrays)
    return {
        "loss_numpy": reference,
        "loss_jax_rel": abs(loss_jax - reference) / abs(reference),
        "loss_torch_rel": abs(float(loss.detach()) - reference) / abs(reference),
        "grad_rel": diff / scale,
    }


def wikitext_point(
    vocab: int = 12_000, batch: int = 10, bptt: int = 35, seed: int = 0, real: bool = True
) -> tuple[Any, str]:
    """(the WikiText model of Fig. 7 (1 layer, d = 200, no dropout) at its initialisation as a
    Point on one fixed batch of `batch` x `bptt` next-token targets, the corpus's name): the
    test split's first chunk when WikiText-2 is beside the repository, else Zipf-distributed
    ids over `vocab` types (the CPU variant's vocabulary size; the timings hold, not the text);
    `real=False`: the Zipf ids always (the paper's vocabulary, whose train split is not here)."""
    import landscape
    from landscape.scan_snap import model as model_lib
    from landscape.scan_snap import text

    root = pathlib.Path(__file__).resolve().parents[2]
    if real and text.missing_splits_message(root / WIKITEXT, ("valid", "test")) is None:
        corpus = text.load(root / WIKITEXT, train_split="valid", eval_split="test")
        vocab, name = corpus.vocab_size, "WikiText-2 test, chunk 0"
        ids = np.asarray(corpus.eval[: bptt + 1, :batch].T)
    else:
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, vocab + 1)
        ids = rng.choice(vocab, size=(batch, bptt + 1), p=weights / weights.sum())
        name = f"synthetic Zipf ids over {vocab} types"
    net = model_lib.TextTransformer(vocab, width=200, hidden=200, num_layers=1, dropout=0.0)
    tokens = jnp.asarray(ids, jnp.int32)
    params = net.init({"params": jax.random.key(seed)}, tokens[:, :bptt])["params"]

    def objective(p: Any, inputs: tuple[jax.Array, jax.Array]) -> jax.Array:
        loss, _ = net.apply({"params": p}, *inputs, method=model_lib.TextTransformer.loss)
        return loss

    inputs = (tokens[:, :-1], tokens[:, 1:])
    return landscape.Point(params, objective=objective, inputs=inputs, name="wikitext"), name


STREAMED_BATCHES = 4  # stream_trace: the 512 examples as 4 batches of 128, streamed


def eigen_answer(values: Any, residuals: Any, **more: Any) -> dict[str, Any]:
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
