"""The JAX side of the peers benchmark (`experiments/bench/peers_timing.py`): the MLP of
`peers_data.py` as a `landscape.Point` (64 -> h -> h -> 10 tanh, mean cross-entropy on 512 fixed
examples, float32), and the Scan & Snap WikiText model on one fixed batch (ours alone). The
peers' processes never import this module.
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import peers_data

WIKITEXT = "../shared/data/wikitext-2"  # configs/wikitext.py's folder, beside the repository


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

    params = {k: jnp.asarray(arrays[k], dtype) for k in peers_data.LEAVES}
    return landscape.Point(
        params,
        objective=mlp_objective,
        inputs=(jnp.asarray(arrays["x"], dtype), jnp.asarray(arrays["y"])),
        outputs=mlp_outputs,
        output_loss=mlp_output_loss,
        name=f"mlp h={arrays['w2'].shape[0]}",
    )


def agreement(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """Loss and gradient of the MLP in JAX and PyTorch (CPU) against each other and numpy."""
    point = mlp_point(arrays)
    loss_jax = float(point.loss())
    grad_jax = jax.grad(mlp_objective)(point.params, point.inputs)
    from experiments.bench.peers_torch import torch_mlp

    model, criterion, x, y = torch_mlp(arrays)
    loss = criterion(model(x), y)
    loss.backward()
    grad_torch = peers_data.from_torch_layout([p.grad.numpy() for p in model.parameters()])
    diff = max(
        float(np.max(np.abs(np.asarray(grad_jax[k]) - grad_torch[k]))) for k in peers_data.LEAVES
    )
    scale = max(float(np.max(np.abs(grad_torch[k]))) for k in peers_data.LEAVES)
    reference = peers_data.numpy_loss(arrays)
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
