"""A dataset held in memory in batches: `batches(data, batch_size)` stacks it (a `Ragged` pair
when a short last batch is left), and `mean_over_batches(objective)` is its loss, the mean of
the per-batch losses weighted by their examples (`mean_over`), which the probes' operator reads
batch by batch (`landscape.core.operator`). docs/guide/own_model.md, docs/design/batches.md."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.typing import PyTree


@jax.tree_util.register_pytree_node_class
class Ragged:
    """n examples as B equal batches of b (`stack`, leaves (B, b, ...)) and the r = n mod b left
    (`last`, leaves (r, ...)): the short last batch kept apart, so that the loss sees only real
    examples and `mean_over` weighs its mean by r / b (docs/design/batches.md)."""

    def __init__(self, stack: PyTree, last: PyTree) -> None:
        self.stack, self.last = stack, last

    def tree_flatten(self) -> tuple[tuple[PyTree, PyTree], None]:
        return (self.stack, self.last), None

    @classmethod
    def tree_unflatten(cls, _: None, children: tuple[PyTree, PyTree]) -> Ragged:
        return cls(*children)

    def __repr__(self) -> str:
        shapes = [np.shape(leaf) for leaf in jax.tree.leaves(self)]
        return f"Ragged(leaves of shapes {shapes})"


def split(batches: PyTree) -> tuple[PyTree, PyTree | None]:
    """(the equal batches, stacked; the short last batch or None)."""
    if isinstance(batches, Ragged):
        return batches.stack, batches.last
    return batches, None


def streams(data: object) -> bool:
    """Whether `data` is a dataset read a pass at a time (`landscape.stream`: its loops are
    `landscape.core.stream.Streamed`'s), not arrays: where the data lives, asked here alone."""
    return bool(getattr(data, "is_stream", False))


def mean_loss(objective: Callable, params: PyTree, data: PyTree, program: Callable) -> float:
    """The loss at params: a pass over a stream (its mean over the batches), else
    `program(params, data)`, the objective compiled."""
    if streams(data):
        return float(data.loss(objective, params))
    return float(program(params, data))


def traced_form(data: PyTree) -> PyTree:
    """`data` as a trace of the loss sees it: a stream's first batch as a stack of one."""
    if streams(data):
        return jax.tree.map(lambda x: x[None], data.first)
    return data


def refuse_unless(data: object, caller: str) -> None:
    """One sentence where `data` streams and `caller` does not take a stream; else nothing."""
    if streams(data):
        data.refuse_unless(caller)  # type: ignore[attr-defined]


def check_stacked(batches: PyTree, holder: str) -> None:
    """One sentence unless `batches` stream (checked as they stream) or are leaves sharing a
    leading axis of B >= 1 batches, a short last batch apart; `holder` begins the sentence."""
    if streams(batches):
        return
    leaves = jax.tree_util.tree_leaves(split(batches)[0])
    sizes = {int(np.shape(leaf)[0]) if np.ndim(leaf) else -1 for leaf in leaves}
    if not leaves or len(sizes) != 1 or min(sizes) < 1:
        raise ValueError(
            f"{holder} leading shapes {[np.shape(leaf) for leaf in leaves]}: every leaf must have "
            "the same leading axis of B >= 1 batches, e.g. landscape.batches((x, y), "
            "batch_size=256)."
        )


def first_batch(batches: PyTree) -> PyTree:
    """The first batch of a dataset in batches, what a loss is traced on."""
    return jax.tree.map(lambda x: x[0], split(batches)[0])


def count(batches: PyTree) -> int:
    """The number of batches of a dataset in batches, a short last one included."""
    stack, last = split(batches)
    return int(jax.tree.leaves(stack)[0].shape[0]) + (last is not None)


def mean_over(term: Callable[[PyTree], Any], batches: PyTree, zeros: Any) -> Any:
    """The mean over a dataset in batches of term(batch) (a pytree of arrays, each a mean over
    the batch's examples): summed over the B equal batches in a lax.scan and divided by B; with
    a short last batch of r examples, Σ_k w_k term_k / Σ_k w_k for w_k = n_k / b (w = 1 for a
    full batch, r / b for the last), the mean over all n examples (docs/design/batches.md)."""
    stack, last = split(batches)

    def add(total: Any, batch: PyTree) -> tuple[Any, None]:
        return jax.tree.map(jnp.add, total, term(batch)), None

    total, _ = jax.lax.scan(add, zeros, stack)
    count, size = jax.tree.leaves(stack)[0].shape[:2]
    if last is None:
        return jax.tree.map(lambda t: t / count, total)
    weight = jax.tree.leaves(last)[0].shape[0] / size
    return jax.tree.map(lambda t, x: (t + weight * x) / (count + weight), total, term(last))


class MeanOverBatches:
    """objective(params, batch) as the mean over a dataset in batches (`mean_over`: a lax.scan,
    each batch rematerialised, so a gradient holds one batch's activations). The probes read
    `per_batch` to accumulate gradients and Hessian-vector products batch by batch
    (`landscape.core.operator`)."""

    def __init__(self, per_batch: Callable[[PyTree, PyTree], jax.Array]) -> None:
        self.per_batch = per_batch
        self.loss_fn = getattr(per_batch, "loss_fn", per_batch)  # names it in error messages

    def __call__(self, params: PyTree, batches: PyTree) -> jax.Array:
        body = jax.checkpoint(lambda batch: self.per_batch(params, batch))
        first = jax.eval_shape(self.per_batch, params, first_batch(batches))
        return mean_over(body, batches, jnp.zeros((), first.dtype))


@functools.lru_cache(maxsize=256)
def mean_over_batches(objective: Callable) -> MeanOverBatches:
    """One MeanOverBatches per objective, so points of one model share compiled programs."""
    return MeanOverBatches(objective)


def batches(data: PyTree, batch_size: int, drop_remainder: bool = False) -> PyTree:
    """`data` (leaves with one leading axis of n examples) in batches of `batch_size`, for
    `Point(params, objective=..., batches=...)`, the loss their mean over all n examples.

    Leaves of shape (B, batch_size, ...) when batch_size divides n; otherwise a `Ragged` pair of
    those B full batches and a last batch of the r = n mod batch_size examples left, whose mean
    loss weighs r / batch_size of a full batch's (`mean_over`, docs/design/batches.md).
    `drop_remainder=True` leaves those r examples out instead.
    """
    _checks.check_int("batch_size", batch_size, 1, "examples per batch")
    _checks.check_bool("drop_remainder", drop_remainder)
    leaves = jax.tree_util.tree_leaves(data)
    sizes = {int(np.shape(leaf)[0]) if np.ndim(leaf) else -1 for leaf in leaves}
    if not leaves or len(sizes) != 1 or min(sizes) < 1:
        raise ValueError(
            f"data has leading shapes {[np.shape(leaf) for leaf in leaves]}: every leaf must "
            "have the same leading axis of n examples."
        )
    n = sizes.pop()
    count, rest = divmod(n, batch_size)
    if count == 0:
        raise ValueError(f"batch_size = {batch_size} is larger than the n = {n} examples.")
    stack = jax.tree.map(
        lambda x: jnp.reshape(x[: count * batch_size], (count, batch_size) + np.shape(x)[1:]),
        data,
    )
    if not rest or drop_remainder:
        return stack
    return Ragged(stack, jax.tree.map(lambda x: jnp.asarray(x[count * batch_size :]), data))
