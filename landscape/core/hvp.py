"""Hessian-vector products of a loss of flat parameters, the operator every Krylov method
multiplies by: the gradient linearised once (one tangent pass a product), a dataset's batches
accumulated in a scan, and a block of products vmapped or, on the CPU, one at a time
(docs/design/cpu_formulations.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from landscape.core import batches as batches_lib

LinearMap = Callable[[jax.Array], jax.Array]


def linearized_gradient(
    loss: Callable[[jax.Array], jax.Array], flat: jax.Array
) -> tuple[jax.Array, jax.Array, Callable[[jax.Array], jax.Array]]:
    """(L(x), ∇L(x), v -> H v) at the flat parameters x: the gradient linearised once
    (forward-over-reverse, `jax.linearize`), so each Hessian-vector product after it is one
    tangent pass, with no second pass of the primal computation."""
    (value, grad), linear = jax.linearize(jax.value_and_grad(loss), flat)
    return value, grad, lambda v: linear(v)[1]


def linearized_on_tree(
    loss: Callable[[Any], jax.Array], flat: jax.Array, unravel: Callable, ravel: Callable
) -> tuple[jax.Array, jax.Array, Callable[[jax.Array], jax.Array]]:
    """`linearized_gradient` for a loss of the parameters as they lie (`unravel(x)`), the
    gradient and each product taken as they lie and laid flat by `ravel` after (over a mesh,
    `Layout.to_flat`'s one concatenation: differentiated through `unravel`, each leaf's
    cotangent came back as a slice padded to the whole flat vector, and on deep models XLA held
    one per leaf; docs/guide/foundation_scale.md)."""
    (value, tree), linear = jax.linearize(lambda x: jax.value_and_grad(loss)(unravel(x)), flat)
    return value, ravel(tree), lambda v: ravel(linear(v)[1])


def laid_flat(
    loss: Callable[[Any], jax.Array], unravel: Callable[[jax.Array], Any], ravel: Callable
) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """x -> (L, ∇L) for a loss of the parameters as they lie (`unravel(x)`), the gradient taken
    as they lie and then laid flat by `ravel` (`linearized_on_tree`'s reason)."""

    def value_and_grad(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        value, tree = jax.value_and_grad(loss)(unravel(x))
        return value, ravel(tree)

    return value_and_grad


ROWS_MAPPED_FROM = 10_000  # on the CPU, products of vectors this long are made one at a time


def each_row(linear: LinearMap, dim: int) -> LinearMap:
    """V (K, dim) -> the rows' products: vmapped, or on the CPU from `ROWS_MAPPED_FROM` a loop
    inside the program (`lax.map`), where a vmapped block's products were 1.3-2x slower each
    (D = 1e5-1e6) and none faster from D = 1e3 (docs/design/cpu_formulations.md)."""
    if rows_mapped(dim):
        return lambda vectors: jax.lax.map(linear, vectors)
    return jax.vmap(linear)


def rows_mapped(dim: int) -> bool:
    """Whether `each_row` makes products of vectors of length `dim` one at a time."""
    return jax.default_backend() == "cpu" and dim >= ROWS_MAPPED_FROM


def batched_gradient(
    loss: Callable[[jax.Array, Any], jax.Array],
    flat: jax.Array,
    batches: Any,
    layout: tuple[Callable, Callable] | None = None,
) -> tuple[
    jax.Array, jax.Array, Callable[[jax.Array], jax.Array], Callable[[jax.Array], jax.Array]
]:
    """(L(x), ∇L(x), v -> H v, V -> H V row by row) for L(x) the mean over the leading axis of
    `batches` of loss(x, batch): each accumulated batch by batch in a lax.scan, so memory holds
    one batch (a product linearises each batch in turn; a block of rows shares that); a short
    last batch weighed by its examples (`batches.mean_over`). With `layout` = (unravel, ravel),
    `loss` takes the parameters as they lie and each gradient is laid flat (`laid_flat`)."""

    def value_and_grad_on(batch: Any) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
        if layout is None:
            return jax.value_and_grad(lambda x: loss(x, batch))
        return laid_flat(lambda p: loss(p, batch), *layout)

    def grad_on(batch: Any) -> Callable[[jax.Array], jax.Array]:
        return lambda x: value_and_grad_on(batch)(x)[1]

    def mean_of(term: Callable[[Any], Any], zeros: Any) -> Any:
        return batches_lib.mean_over(term, batches, zeros)

    first = batches_lib.first_batch(batches)
    value_dtype = jax.eval_shape(value_and_grad_on(first), flat)[0].dtype  # not the params'
    value, grad = mean_of(
        lambda b: value_and_grad_on(b)(flat),
        (jnp.zeros((), value_dtype), jnp.zeros_like(flat)),
    )

    def matvec(v: jax.Array) -> jax.Array:
        return mean_of(lambda b: jax.jvp(grad_on(b), (flat,), (v,))[1], jnp.zeros_like(v))

    def rows(vectors: jax.Array) -> jax.Array:
        def block(batch: Any) -> jax.Array:
            return each_row(jax.linearize(grad_on(batch), flat)[1], flat.size)(vectors)

        return mean_of(block, jnp.zeros_like(vectors))

    return value, grad, matvec, rows


def loss_operator(
    loss: Callable[..., jax.Array],
    flat: jax.Array,
    unravel: Callable,
    inputs: tuple,
    batched: bool,
    ravel: Callable | None = None,
) -> tuple[jax.Array, jax.Array, LinearMap]:
    """(L, ∇L, v -> H v) of loss(unravel(x), *inputs) at the flat parameters x: the gradient
    linearised once, or with `batched` the mean over the leading axis of inputs[0] accumulated
    batch by batch (the tracker's and the engine's Track's operator); with `ravel`, each
    gradient taken as the parameters lie and laid flat by it (`linearized_on_tree`)."""
    if not batched:
        if ravel is None:
            return linearized_gradient(lambda x: loss(unravel(x), *inputs), flat)
        return linearized_on_tree(lambda p: loss(p, *inputs), flat, unravel, ravel)
    (batches,) = inputs
    if ravel is None:
        found = batched_gradient(lambda x, batch: loss(unravel(x), batch), flat, batches)
    else:
        found = batched_gradient(lambda p, batch: loss(p, batch), flat, batches, (unravel, ravel))
    return found[:3]


def preconditioned(linear: LinearMap, inverse_sqrt: jax.Array) -> LinearMap:
    """v -> P^{-1/2} H P^{-1/2} v for a diagonal preconditioner P, given as the flat vector
    P^{-1/2} (for Adam, 1 / sqrt(sqrt(v̂) + ε)): its eigenvalues are the preconditioned
    sharpness's (Cohen et al., 2022, §3)."""
    return lambda v: inverse_sqrt * linear(inverse_sqrt * v)
