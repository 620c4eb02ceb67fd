"""A Krylov-Schur call's vector work on the device (`krylov_schur` has the search and its legend):
`begin` restarts the vectors, then each product of `next_vector` makes a `step`, while
`Carry.product_due`. `run_call` is that loop inside one program (`lax.while_loop`); a host loop (a
stream's passes over its data) drives the same steps, one small program each.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape.core import orthonormal
from landscape.core.krylov_schur import Mode, Outcome, Plan
from landscape.core.layout import Layout
from landscape.core.orthonormal import hashed_normal

_DOT = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)


class Carry(NamedTuple):
    """A call's state between its products: the vectors (ncv, D; the k locked rows, then the
    basis; held in the plan's dtype or as bfloat16's bits, `orthonormal.held_dtype`, and read
    in the plan's), the outcome so far, whether a Ritz pair was refused (the later ones are
    not accepted), whether the call goes on to another product, the run's projected
    matrix."""

    vectors: jax.Array
    outcome: Outcome
    failed: jax.Array
    product_due: jax.Array
    proj: jax.Array


def run_call(
    product: Callable[[jax.Array], jax.Array],
    vectors: jax.Array,
    plan: Plan,
    key: jax.Array,
    which: str,
    layout: Layout,
    point: tuple[jax.Array, jax.Array],
) -> tuple[jax.Array, Outcome]:
    """`plan` with `product` (v -> A v) inside the caller's program: `begin`, then `step`s
    under one while_loop. `point` = (value, gradient) goes into the outcome as it is."""

    def body(carry: Carry) -> Carry:
        v = next_vector(plan, carry)
        return step(plan, key, which, layout, carry, v, product(v))

    carry = begin(vectors, plan, key, point, layout)
    carry = jax.lax.while_loop(lambda carry: carry.product_due, body, carry)
    return carry.vectors, carry.outcome


def begin(
    vectors: jax.Array,
    plan: Plan,
    key: jax.Array,
    point: tuple[jax.Array, jax.Array],
    layout: Layout,
) -> Carry:
    """A call's carry before its first product: the vectors restarted (`_restarted`), an empty
    Outcome (ncv long) holding the point's (value, gradient), product_due when the plan asks
    for a product."""
    vectors = _restarted(vectors, plan, key, layout)
    total, dtype = vectors.shape[0], plan.proj.dtype
    value, gradient = point
    outcome = Outcome(
        jnp.asarray(0, jnp.int32), jnp.zeros(total, dtype), jnp.zeros((total, total), dtype),
        jnp.zeros(total, dtype), jnp.zeros(total, dtype), jnp.zeros(total, dtype),
        jnp.zeros(total, bool), jnp.zeros(total, dtype), jnp.zeros(total, bool),
        value.astype(dtype), gradient,
    )  # fmt: skip
    product_due = outcome.taken < plan.steps
    return Carry(vectors, outcome, jnp.asarray(False), product_due, plan.proj)


def next_vector(plan: Plan, carry: Carry) -> jax.Array:
    """The vector the call multiplies next: the basis row a Lanczos step extends from, or the
    candidate Ritz vector whose residual it checks."""
    k, i = plan.locked, carry.outcome.taken
    last = carry.vectors.shape[0] - 1
    return jax.lax.cond(
        plan.mode == Mode.EXTEND,
        lambda: orthonormal.widened(
            carry.vectors[jnp.minimum(k + plan.start + i, last)], plan.proj.dtype
        ),
        lambda: orthonormal.combination(plan.coeffs[:, jnp.minimum(i, k - 1)], carry.vectors),
    )


def _restarted(vectors: jax.Array, plan: Plan, key: jax.Array, layout: Layout) -> jax.Array:
    """The vectors rotated in place to qᵀ vectors (q the identity on the locked rows, its zero
    columns the basis rows a restart drops); for a fresh phase the first basis row (q's seed)
    plus N(0, I/D), orthogonal to the locked rows and of unit norm (the first call's start: the
    noise alone). Each phase draws its own noise (numbered by the products before it): the seed
    lies in the earlier phases' Krylov space, and a further copy of a locked eigenvalue lies
    outside it."""
    total, dim = vectors.shape
    k, dtype = plan.locked, plan.proj.dtype
    vectors = layout.rotate(vectors, plan.q, active=plan.rotate)
    noise_key = jax.random.fold_in(jax.random.split(key)[1], plan.products)
    seed = orthonormal.widened(vectors[k], dtype)

    def start(seed: jax.Array) -> jax.Array:
        noise = layout.clean(layout.place(jax.random.normal(noise_key, (dim,), dtype)))
        raw = seed + noise / float(np.sqrt(dim))
        return _unit_remainder(vectors, raw, jnp.arange(total) < k)

    if layout.cpu_mesh:  # its collectives outside any conditional
        first = jnp.where(plan.fresh, start(seed), seed)
    else:
        first = jax.lax.cond(plan.fresh, start, lambda seed: seed, seed)
    return _set_row(vectors, k, first)


def step(
    plan: Plan,
    key: jax.Array,
    which: str,
    layout: Layout,
    carry: Carry,
    v: jax.Array,
    hv: jax.Array,
) -> Carry:
    """The carry after the product hv of v (`next_vector`), made through one call site whatever
    the mode, and its vector work; a run's projected matrix grown by the step. The call goes on
    while it has products left, the run has not converged and every product is finite (the
    host ends the search at one that is not)."""
    vectors, outcome, failed, _, proj = carry
    k, i = plan.locked, outcome.taken
    at = jnp.minimum(i, k - 1)
    row = plan.start + i  # of the basis: vectors[k + row]
    extending = plan.mode == Mode.EXTEND
    zero = jnp.zeros((), v.dtype)
    coupling = (i == 0, plan.column, outcome.beta[jnp.maximum(i - 1, 0)])
    fresh_key = jax.random.fold_in(key, plan.products + i)

    def checked(step: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        # in each branch, so no collective runs beside the conditional (Layout.cpu_mesh)
        residual = jnp.linalg.norm(hv - plan.theta[at] * v)
        return (*step, residual, jnp.all(jnp.isfinite(hv)))

    alpha, beta, following, residual, finite = jax.lax.cond(
        extending,
        lambda: checked(_lanczos_step(vectors, k, row, coupling, v, hv, (fresh_key, layout))),
        lambda: checked((zero, zero, v)),
    )
    ok = ~extending & ~failed & (residual <= plan.tol) & finite
    kept = ok & (plan.slots[at] < k)  # accepted and among the k most wanted
    write = jnp.where(extending, k + row + 1, jnp.where(kept, plan.slots[at], vectors.shape[0]))
    vectors = _set_row(vectors, write, following)  # following is v for a Ritz pair
    outcome = outcome._replace(
        taken=i + 1,
        alpha=outcome.alpha.at[i].set(alpha, mode="drop"),
        beta=outcome.beta.at[i].set(jnp.where(finite, beta, jnp.nan), mode="drop"),
        more=outcome.more.at[i].set(jnp.any(following != 0), mode="drop"),
        residual=outcome.residual.at[i].set(jnp.where(finite, residual, jnp.nan), mode="drop"),
        accepted=outcome.accepted.at[i].set(ok, mode="drop"),
    )
    proj = proj.at[row, row].set(alpha, mode="drop")
    proj = proj.at[row + 1, row].set(beta, mode="drop").at[row, row + 1].set(beta, mode="drop")
    done, ritz = _converged(proj, row + 1, beta, plan, which)
    outcome = _where(
        extending, outcome._replace(theta=ritz[0], vectors=ritz[1], estimates=ritz[2]), outcome
    )
    ends = (extending & finite & done) | ~finite
    product_due = (outcome.taken < plan.steps) & ~ends
    return Carry(vectors, outcome, failed | (~extending & ~ok), product_due, proj)


def _set_row(vectors: jax.Array, index: jax.Array, row: jax.Array) -> jax.Array:
    """vectors with row `index` set to `row` as they hold it (`orthonormal.narrowed`), in
    place; nothing past the last row."""
    return vectors.at[index].set(orthonormal.narrowed(row, vectors.dtype), mode="drop")


def _where(pred: jax.Array, a: Outcome, b: Outcome) -> Outcome:
    return Outcome(*(jnp.where(pred, x, y) for x, y in zip(a, b, strict=True)))


def _converged(
    proj: jax.Array, size: jax.Array, beta: jax.Array, plan: Plan, which: str
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    """Whether the `need` most wanted Ritz pairs of proj's leading `size` rows have Lanczos
    estimates |β s_last| within rtol · max(scale, |Ritz values|) (the run may end), and that
    Rayleigh-Ritz: (values ascending, eigenvectors, estimates)."""
    rows = proj.shape[0]
    holds = jnp.arange(rows) < size
    projected = jnp.where(holds[:, None] & holds[None, :], proj, 0)
    far = jnp.sum(jnp.abs(projected)) + 1.0  # absent rows: beyond the wanted end
    projected += jnp.diag(jnp.where(holds, 0.0, -far if which == "largest" else far))
    theta, vectors = jnp.linalg.eigh(projected)  # ascending
    estimates = jnp.abs(beta * vectors[jnp.maximum(size - 1, 0)])
    order = jnp.arange(rows)
    wanted = order >= rows - plan.need if which == "largest" else order < plan.need
    seen = jnp.max(jnp.where(jnp.abs(theta) < far / 2, jnp.abs(theta), 0))  # real ones
    tol = plan.rtol * jnp.maximum(plan.scale, seen)
    done = (size >= plan.need) & jnp.all(jnp.where(wanted, estimates, 0) <= tol)
    return done, (theta, vectors, estimates)


def _lanczos_step(
    vectors: jax.Array,
    k: jax.Array,
    row: jax.Array,
    coupling: tuple[jax.Array, jax.Array, jax.Array],
    v: jax.Array,
    av: jax.Array,
    random: tuple[jax.Array, Layout],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(alpha, beta, the next Lanczos vector) of a step from basis row `row`: the coupling known
    before it subtracted (`coupling` = (first, column, previous beta): on a run's first step the
    kept Ritz vectors' arrowhead `column`, after it the tridiagonal), then one classical
    Gram-Schmidt pass against every row (locked and basis), a second only when the first
    removed most of the vector (Daniel-Gragg-Kaufman-Stewart); a random direction orthogonal to
    them when the Krylov space is exhausted (beta 0, drawn from `random` = (key, layout)), zero
    when nothing is left."""
    first, column, previous = coupling
    key, layout = random
    alpha = _DOT(v, av)
    below = k + jnp.maximum(row - 1, 0)
    known = jax.lax.cond(
        first,
        lambda: orthonormal.combination(column, vectors),
        lambda: jnp.where(row > 0, previous, 0) * orthonormal.widened(vectors[below], v.dtype),
    )
    w = av - alpha * v - known
    once = orthonormal.orthogonalised(vectors, w)
    w = jax.lax.cond(
        jnp.linalg.norm(once) < 0.5 * jnp.linalg.norm(w),
        lambda: orthonormal.orthogonalised(vectors, once),
        lambda: once,
    )
    beta, eps = jnp.linalg.norm(w), jnp.finfo(w.dtype).eps
    seen = jnp.maximum(jnp.max(jnp.abs(column)), jnp.abs(previous))
    scale = jnp.maximum(jnp.maximum(seen, jnp.linalg.norm(av)), jnp.abs(alpha))
    exhausted = beta <= 100 * eps * scale
    following = jax.lax.cond(
        exhausted,
        lambda: _unit_remainder(vectors, layout.clean(layout.place(hashed_normal(key, v)))),
        lambda: w / jnp.where(exhausted, 1, beta),
    )
    return alpha, jnp.where(exhausted, 0, beta), following


def _orthogonalised(rows: jax.Array, w: jax.Array, only: jax.Array | None) -> jax.Array:
    """`orthonormal.orthogonalised`, or against the rows `only` marks (a mask, where a slice
    would copy the rows: a fresh start's, beside the basis rows a restart left as they were)."""
    if only is None:
        return orthonormal.orthogonalised(rows, w)
    found = orthonormal.coefficients(rows, w)
    return w - orthonormal.combination(jnp.where(only, found, 0), rows)


def _unit_remainder(rows: jax.Array, raw: jax.Array, only: jax.Array | None = None) -> jax.Array:
    """The unit part of `raw` orthogonal to the rows (or those `only` marks; two passes: a
    random vector lies mostly in a large basis); zero when they span everything."""
    w = _orthogonalised(rows, _orthogonalised(rows, raw, only), only)
    norm = jnp.linalg.norm(w)
    usable = norm > jnp.sqrt(jnp.finfo(w.dtype).eps) * jnp.linalg.norm(raw)
    return jnp.where(usable, w / jnp.where(usable, norm, 1), 0)
