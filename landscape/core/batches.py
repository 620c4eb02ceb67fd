"""A dataset held in memory in equal batches: `batches(data, batch_size)` stacks it, and
`mean_over_batches(objective)` is its loss, the mean of the per-batch losses, which the probes'
operator reads batch by batch (`landscape.probes.operator`). docs/guide/own_model.md."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.typing import PyTree


class MeanOverBatches:
    """objective(params, batch) as the mean over the leading axis of `batches`: the loss of a
    dataset in batches (a lax.scan; each batch rematerialised, so a gradient holds one batch's
    activations). The probes read `per_batch` to accumulate gradients and Hessian-vector
    products batch by batch (`landscape.probes.operator`)."""

    def __init__(self, per_batch: Callable[[PyTree, PyTree], jax.Array]) -> None:
        self.per_batch = per_batch
        self.loss_fn = getattr(per_batch, "loss_fn", per_batch)  # names it in error messages

    def __call__(self, params: PyTree, batches: PyTree) -> jax.Array:
        body = jax.checkpoint(lambda batch: self.per_batch(params, batch))

        def add(total: jax.Array, batch: PyTree) -> tuple[jax.Array, None]:
            return total + body(batch), None

        count = jax.tree_util.tree_leaves(batches)[0].shape[0]
        first = jax.eval_shape(self.per_batch, params, jax.tree.map(lambda x: x[0], batches))
        total, _ = jax.lax.scan(add, jnp.zeros((), first.dtype), batches)
        return total / count


@functools.lru_cache(maxsize=256)
def mean_over_batches(objective: Callable) -> MeanOverBatches:
    """One MeanOverBatches per objective, so points of one model share compiled programs."""
    return MeanOverBatches(objective)


def batches(data: PyTree, batch_size: int, drop_remainder: bool = False) -> PyTree:
    """`data` (leaves with one leading axis of n examples) as B = n / batch_size equal batches:
    leaves of shape (B, batch_size, ...), for `Point(params, objective=..., batches=...)`.

    n must be a multiple of batch_size (each batch's mean loss then weighs every example
    equally), or `drop_remainder=True` leaves the last n mod batch_size examples out.
    """
    _checks.check_int("batch_size", batch_size, 1, "examples per batch")
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
    if rest and not drop_remainder:
        raise ValueError(
            f"batch_size = {batch_size} does not divide n = {n} examples: give a batch size "
            f"that divides n, or drop_remainder=True to leave the last {rest} out."
        )
    return jax.tree.map(
        lambda x: jnp.reshape(x[: count * batch_size], (count, batch_size) + np.shape(x)[1:]),
        data,
    )
