"""Unbiased population-gradient norms at the n-gram points (notes/ngrams.md §4.7 C7): two
independent halves of a point's Monte-Carlo set, in total and per parameter block
(`gradient_norms`; `gradient_statistics` for explicit params, model and set)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from landscape import _checks
from landscape.ngrams import estimators
from landscape.ngrams import model as model_lib
from landscape.point import Point, require_point
from landscape.typing import ArrayLike, PyTree

BLOCKS = ("A1", "V1", "Q2", "K2")  # the simplified model's parameter blocks


def _chunked_grad(params, x_BT, target_BS, model, floor, chunk_size):
    """Gradient of the mean CE over the rows of x_BT, accumulated over chunks (bounded memory)."""
    B = x_BT.shape[0]
    chunk = min(chunk_size, B)
    num_chunks = -(-B // chunk)
    pad = num_chunks * chunk - B
    weight_B = jnp.concatenate([jnp.ones(B, target_BS.dtype), jnp.zeros(pad, target_BS.dtype)])
    x_NCT = jnp.pad(x_BT, ((0, pad), (0, 0))).reshape(num_chunks, chunk, -1)
    y_NCS = jnp.pad(target_BS, ((0, pad), (0, 0))).reshape(num_chunks, chunk, -1)
    w_NC = weight_B.reshape(num_chunks, chunk)

    def chunk_loss(params: PyTree, x_CT: jax.Array, y_CS: jax.Array, w_C: jax.Array) -> jax.Array:
        probs_CS = model.apply({"params": params}, x_CT)
        return jnp.sum(w_C * estimators.cross_entropy(probs_CS, y_CS, floor)) / B

    def body(total: PyTree, inputs: tuple[jax.Array, ...]) -> tuple[PyTree, None]:
        loss, grad = jax.value_and_grad(chunk_loss)(params, *inputs)
        return jax.tree.map(jnp.add, total, (loss, grad)), None

    zero = (jnp.zeros((), target_BS.dtype), jax.tree.map(jnp.zeros_like, params))
    (loss, grad), _ = jax.lax.scan(body, zero, (x_NCT, y_NCS, w_NC))
    return loss, grad


def _block_vectors(tree: PyTree) -> dict:
    """{block name: flat vector}: "total", each top-level block, and "A1/head h", "V1/head h"."""
    out = {"total": jnp.concatenate([jnp.ravel(tree[name]) for name in sorted(tree)])}
    for name in BLOCKS:
        if name not in tree:
            continue
        out[name] = jnp.ravel(tree[name])
        if name in ("A1", "V1"):
            for h in range(tree[name].shape[0]):
                out[f"{name}/head{h + 1}"] = jnp.ravel(tree[name][h])
    return out


@functools.partial(jax.jit, static_argnames=("model", "floor", "chunk_size"))
def _gradient_statistics(params, x_BT, target_BS, *, model, floor, chunk_size):
    half = x_BT.shape[0] // 2
    loss_a, grad_a = _chunked_grad(params, x_BT[:half], target_BS[:half], model, floor, chunk_size)
    loss_b, grad_b = _chunked_grad(
        params, x_BT[half : 2 * half], target_BS[half : 2 * half], model, floor, chunk_size
    )
    blocks_a, blocks_b = _block_vectors(grad_a), _block_vectors(grad_b)
    stats = {"loss": 0.5 * (loss_a + loss_b)}
    for name in blocks_a:
        ga, gb = blocks_a[name], blocks_b[name]
        inner = jnp.vdot(ga, gb)
        suffix = "" if name == "total" else f"/{name}"
        stats["unbiased" + suffix] = jnp.sign(inner) * jnp.sqrt(jnp.abs(inner))
        stats["plain" + suffix] = jnp.linalg.norm(0.5 * (ga + gb))
        stats["noise" + suffix] = 0.5 * jnp.linalg.norm(ga - gb)
    return stats


def gradient_statistics(
    params: PyTree,
    model: model_lib.NgramModel,
    x_BT: ArrayLike,
    target_BS: ArrayLike,
    floor: float = 1e-8,
    chunk_size: int = 2048,
) -> dict:
    """`gradient_norms` for explicit (params, model, set): jitted once per (model, set shape,
    floor), so a sweep over c (params traced) compiles once."""
    _checks.check_int("chunk_size", chunk_size, low=1, meaning="sequences per gradient chunk")
    stats = _gradient_statistics(
        params,
        jnp.asarray(x_BT),
        jnp.asarray(target_BS),
        model=model,
        floor=float(floor),
        chunk_size=int(chunk_size),
    )
    return {name: float(value) for name, value in stats.items()}


def gradient_norms(point: Point, chunk_size: int = 2048) -> dict:
    """Population-gradient norms at a point built here, on its own Monte-Carlo set (notes C7).

    The set is split into two independent halves A, B (first and second half; a last odd
    sequence is dropped) with gradients g_A, g_B of the mean CE on each. For the whole parameter
    vector ("unbiased", "plain", "noise") and for every block ("unbiased/A1", ...,
    "unbiased/V1/head2", ... with heads numbered 1..m):
      unbiased  sign(<g_A, g_B>) sqrt(|<g_A, g_B>|): E<g_A, g_B> = ||grad L||^2, so this is an
                unbiased-in-square estimate of the population-gradient norm; negative values mean
                "below the noise floor";
      plain     ||g||, g = (g_A + g_B)/2 the full-set gradient (biased upwards by the MC noise);
      noise     ||g_A - g_B|| / 2, whose square estimates E||g - grad L||^2: the norm one would
                measure at an exactly stationary point (the noise floor of `plain`).
    Plus "loss", the mean CE over both halves. All values are floats.
    """
    meta = require_point(point, "gradient_norms").meta
    missing = [key for key in ("model", "x_BT", "target_BS", "floor") if key not in meta]
    if missing:
        raise ValueError(
            f"point.meta lacks {missing}: gradient_norms needs a point built by "
            "landscape.ngrams.points (or use gradient_statistics)."
        )
    return gradient_statistics(
        point.params, meta["model"], meta["x_BT"], meta["target_BS"], meta["floor"], chunk_size
    )
