"""Krylov-Schur: restarted Lanczos with locking on exact Hessian-vector products, in memory that
`ncv` bounds: the search behind `eigenpairs` above `dense_below` (eigen.py makes its results;
docs/design/curvature.md has the method, its cost and its tolerances).

Legend: D parameters, k wanted pairs, n = ncv - k basis rows (the Krylov vectors and the next
Lanczos vector). One compiled program per model, `advance`, does a call's vector work on one
linearisation (a restart, then a Lanczos run or the candidates' exact residuals); the decisions
between calls, on arrays of n numbers, are numpy's on the host (`krylov_host`): one
synchronisation a run.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from landscape.core.layout import Layout
from landscape.probes import compiled, operator
from landscape.typing import PyTree

EXTEND, RITZ = 0, 1  # what `advance` multiplies
CHECK, FILL, DONE = 3, 4, 5  # the host's further modes (CHECK and FILL call RITZ)

_DOT = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)


class Plan(NamedTuple):
    """What one call of `advance` is asked (legend in the module docstring). The basis first
    becomes qᵀ basis (n, n) when `rotate`, its first row a fresh start seeded by it when
    `fresh`; then up to `steps` products in `mode`: EXTEND Lanczos steps from basis row `start`
    (`column` (ncv,) the first step's coupling known before it, the kept Ritz vectors'
    arrowhead), RITZ the Ritz vectors coeffs[:, i] · vectors (coeffs (ncv, k), zero on the
    locked rows) with their residuals against theta[i], each accepted at residual <= `tol`
    (until one is not) and written into locked row slots[i] (k: nowhere). `products` numbers
    the products before this call (the seed of a fresh direction where the Krylov space is
    exhausted). A run ends early once the `need` most wanted Ritz pairs of `proj` (n, n: the
    projected matrix, grown by its steps) have Lanczos estimates within rtol · max(scale, their
    values)."""

    mode: jax.Array
    q: jax.Array
    rotate: jax.Array
    fresh: jax.Array
    start: jax.Array
    steps: jax.Array
    column: jax.Array
    coeffs: jax.Array
    theta: jax.Array
    slots: jax.Array
    tol: jax.Array
    products: jax.Array
    proj: jax.Array
    need: jax.Array
    scale: jax.Array
    rtol: jax.Array


class Outcome(NamedTuple):
    """What a call gives back: the products it made, the Rayleigh-Ritz of the run's last step
    (theta (n,) ascending, its eigenvectors (n, n) and their Lanczos estimates, the absent rows'
    values beyond the wanted end: the early stop decided on these, so the host does too), each
    Lanczos step's alpha, beta and whether it left a next vector (n,), each Ritz pair's residual
    and acceptance (c,), and the point's loss and flat gradient (D,), which the linearisation
    gives for free."""

    taken: jax.Array
    theta: jax.Array
    vectors: jax.Array
    estimates: jax.Array
    alpha: jax.Array
    beta: jax.Array
    more: jax.Array
    residual: jax.Array
    accepted: jax.Array
    loss: jax.Array
    gradient: jax.Array


@functools.partial(
    jax.jit, static_argnames=("objective", "which", "layout"), donate_argnames=("vectors",)
)
def advance(
    objective: compiled.Objective,
    params: PyTree,
    inputs: PyTree,
    vectors: jax.Array,
    plan: Plan,
    key: jax.Array,
    which: str,
    layout: Layout | None = None,
) -> tuple[jax.Array, Outcome]:
    """`plan` on the exact Hessian at params, linearised once for every product of the call.
    `vectors` (ncv, D) holds the k locked rows, then the basis's n rows: one buffer, changed in
    place (a rotation, then row writes), which no conditional passes through (XLA would copy
    it). Over a mesh the vectors lie in `layout` (each device's columns its own shards)."""
    layout = layout or Layout(None, (), "")  # one device: ravel_pytree's order, as `of` gives
    op = operator.hessian_operator(objective, params, inputs, layout if layout.mesh else None)
    carry = begin(vectors, plan, key, op.value, op.gradient, layout)

    def going(carry: tuple) -> jax.Array:
        return (carry[1].taken < plan.steps) & ~carry[3]

    def body(carry: tuple) -> tuple:
        v = next_vector(plan, carry)
        return stepped(plan, key, which, layout, carry, v, op.matvec(v))

    vectors, outcome, *_ = jax.lax.while_loop(going, body, carry)
    return vectors, outcome


def begin(
    vectors: jax.Array,
    plan: Plan,
    key: jax.Array,
    value: jax.Array,
    gradient: jax.Array,
    layout: Layout,
) -> tuple:
    """A call's carry before its first product: the vectors restarted (`_restarted`), an empty
    Outcome holding the point's loss and gradient, no failure, no convergence, the run's
    projected matrix."""
    k = plan.slots.size
    vectors = _restarted(vectors, k, plan, key, layout)
    rows, dtype = vectors.shape[0] - k, vectors.dtype
    outcome = Outcome(
        jnp.asarray(0, jnp.int32), jnp.zeros(rows, dtype), jnp.zeros((rows, rows), dtype),
        jnp.zeros(rows, dtype), jnp.zeros(rows, dtype), jnp.zeros(rows, dtype),
        jnp.zeros(rows, bool), jnp.zeros(k, dtype), jnp.zeros(k, bool),
        value.astype(dtype), gradient,
    )  # fmt: skip
    return vectors, outcome, jnp.asarray(False), jnp.asarray(False), plan.proj


def next_vector(plan: Plan, carry: tuple) -> jax.Array:
    """The vector the call multiplies next: the basis row a Lanczos step extends from, or the
    candidate Ritz vector whose residual it checks."""
    vectors, outcome = carry[0], carry[1]
    k, i = plan.slots.size, outcome.taken
    rows = vectors.shape[0] - k
    return jax.lax.cond(
        plan.mode == EXTEND,
        lambda: vectors[k + jnp.minimum(plan.start + i, rows - 1)],
        lambda: _DOT(plan.coeffs[:, jnp.minimum(i, k - 1)], vectors),
    )


def _restarted(vectors: jax.Array, k: int, plan: Plan, key: jax.Array, layout: Layout) -> jax.Array:
    """The basis rows rotated in place to qᵀ basis (the locked rows kept); for a fresh phase the
    first basis row (q's seed) plus N(0, I/D), orthogonal to the locked rows and of unit norm
    (the first call's start: the noise alone). Each phase draws its own noise (numbered by the
    products before it): the seed lies in the earlier phases' Krylov space, and a further copy
    of a locked eigenvalue lies outside it."""
    total, dim = vectors.shape
    keep = (total - k - 1) // 2 + 1  # a thick restart keeps at most half the basis and its next
    vectors = layout.rotate(vectors, plan.q, first=k, keep=keep, active=plan.rotate)
    noise_key = jax.random.fold_in(jax.random.split(key)[1], plan.products)

    def start(seed: jax.Array) -> jax.Array:
        noise = layout.clean(layout.place(jax.random.normal(noise_key, (dim,), vectors.dtype)))
        raw = seed + noise / float(np.sqrt(dim))
        return _unit_remainder(vectors, raw, jnp.arange(total) < k)

    return vectors.at[k].set(jax.lax.cond(plan.fresh, start, lambda seed: seed, vectors[k]))


def stepped(
    plan: Plan,
    key: jax.Array,
    which: str,
    layout: Layout,
    carry: tuple,
    v: jax.Array,
    hv: jax.Array,
) -> tuple:
    """The call's carry after its next product hv of v (`next_vector`), made through one call
    site whatever the mode, and its vector work; a run's projected matrix grown by the step,
    and whether the call ends here (the run converged, or the product is not finite: the host
    ends the search on it)."""
    vectors, outcome, failed, _, proj = carry
    k, i = plan.slots.size, outcome.taken
    at = jnp.minimum(i, k - 1)
    row = plan.start + i  # of the basis: vectors[k + row]
    extending = plan.mode == EXTEND
    zero = jnp.zeros((), v.dtype)
    coupling = (i == 0, plan.column, outcome.beta[jnp.maximum(i - 1, 0)])
    fresh_key = jax.random.fold_in(key, plan.products + i)
    alpha, beta, following = jax.lax.cond(
        extending,
        lambda: _lanczos_step(vectors, k, row, coupling, v, hv, (fresh_key, layout)),
        lambda: (zero, zero, v),
    )
    residual = jnp.linalg.norm(hv - plan.theta[at] * v)
    finite = jnp.all(jnp.isfinite(hv))
    ok = (plan.mode == RITZ) & ~failed & (residual <= plan.tol) & finite
    kept = ok & (plan.slots[at] < k)  # accepted and among the k most wanted
    write = jnp.where(extending, k + row + 1, jnp.where(kept, plan.slots[at], vectors.shape[0]))
    vectors = vectors.at[write].set(following, mode="drop")  # following is v for a Ritz pair
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
    ends = (extending & finite & done) | ~finite  # converged, or a product not finite
    return vectors, outcome, failed | ((plan.mode == RITZ) & ~ok), ends, proj


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
    k: int,
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
        lambda: _DOT(column, vectors),
        lambda: jnp.where(row > 0, previous, 0) * vectors[below],
    )
    w = av - alpha * v - known
    once = _orthogonalised(vectors, w)
    w = jax.lax.cond(
        jnp.linalg.norm(once) < 0.5 * jnp.linalg.norm(w),
        lambda: _orthogonalised(vectors, once),
        lambda: once,
    )
    beta, eps = jnp.linalg.norm(w), jnp.finfo(w.dtype).eps
    seen = jnp.maximum(jnp.max(jnp.abs(column)), jnp.abs(previous))
    scale = jnp.maximum(jnp.maximum(seen, jnp.linalg.norm(av)), jnp.abs(alpha))
    exhausted = beta <= 100 * eps * scale
    following = jax.lax.cond(
        exhausted,
        lambda: _unit_remainder(
            vectors, layout.clean(layout.place(jax.random.normal(key, v.shape, v.dtype)))
        ),
        lambda: w / jnp.where(exhausted, 1, beta),
    )
    return alpha, jnp.where(exhausted, 0, beta), following


def _orthogonalised(rows: jax.Array, w: jax.Array, only: jax.Array | None = None) -> jax.Array:
    """w less its components along the rows (orthonormal; zero rows ignored), or along those
    that `only` marks (a mask, where a slice would copy the rows)."""
    coefficients = _DOT(rows, w)
    if only is not None:
        coefficients = jnp.where(only, coefficients, 0)
    return w - _DOT(coefficients, rows)


def _unit_remainder(rows: jax.Array, raw: jax.Array, only: jax.Array | None = None) -> jax.Array:
    """The unit part of `raw` orthogonal to the rows (or those `only` marks; two passes: a
    random vector lies mostly in a large basis); zero when they span everything."""
    w = _orthogonalised(rows, _orthogonalised(rows, raw, only), only)
    norm = jnp.linalg.norm(w)
    usable = norm > jnp.sqrt(jnp.finfo(w.dtype).eps) * jnp.linalg.norm(raw)
    return jnp.where(usable, w / jnp.where(usable, norm, 1), 0)
