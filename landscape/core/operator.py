"""The Hessian at a point as a linear operator inside a compiled program: `matvec(v_D)` and
`rows(V_KD)`, what every matrix-free probe multiplies by (legend: D parameters, K vectors); or,
for an objective made by `gauss_newton`, the Gauss-Newton matrix G = Jᵀ H_z J (`ggn_operator`).

One batch: the gradient linearised once (`jax.linearize`), so the forward and backward passes
run once per program and each product is one tangent pass. A dataset in batches
(`Point(..., batches=...)`): a `lax.scan` over the batches, each linearised in turn and its
products summed, memory one batch (docs/design/curvature.md, "At the size of real models").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jax.sharding import PartitionSpec as P

from landscape import _checks
from landscape.core import batches as batches_lib
from landscape.core import hvp
from landscape.core import preconditioner as preconditioner_lib
from landscape.core.batches import MeanOverBatches, mean_over_batches
from landscape.core.layout import Layout
from landscape.point import Point
from landscape.typing import PyTree

Objective = Callable[[PyTree, PyTree], jax.Array]
Outputs = Callable[[PyTree, PyTree], jax.Array]
OutputLoss = Callable[[jax.Array, PyTree], jax.Array]
Matrix = Literal["hessian", "ggn"]  # what a matrix-free probe multiplies by


class Operator(NamedTuple):
    """The loss, its flat gradient (D,) and the Hessian's products at the flat params `flat`."""

    flat: jax.Array
    value: jax.Array
    gradient: jax.Array
    matvec: Callable[[jax.Array], jax.Array]
    rows: Callable[[jax.Array], jax.Array]


def hessian_operator(
    objective: Objective, params: PyTree, inputs: PyTree, layout: Layout | None = None
) -> Operator:
    """The Hessian of objective(., inputs) at params, for use inside a traced program; the
    Gauss-Newton matrix instead when the objective is a `GaussNewtonSplit` (`gauss_newton`).
    Its vectors are flat in `layout` (None: `ravel_pytree`'s order; over a mesh, each device's
    slice its own shards, `landscape.core.layout`). An objective `with_options` takes its
    products as its `ProductOptions` say."""
    if isinstance(objective, WithOptions):
        return _optioned(objective, params, inputs, layout)
    if isinstance(objective, preconditioner_lib.Preconditioned):
        return _preconditioned(objective, params, inputs, layout)
    if isinstance(objective, GaussNewtonSplit):
        return ggn_operator(objective.outputs, objective.output_loss, params, inputs, layout)
    if isinstance(objective, MeanOverBatches) and layout is not None and layout.mesh is not None:
        return _split_over_batches(objective.per_batch, params, inputs, layout)
    flat, unravel = flattened(params, layout)
    if isinstance(objective, MeanOverBatches) and is_ggn(objective):
        return _ggn_over_batches(objective.per_batch, params, inputs)  # type: ignore[arg-type]  # is_ggn
    if isinstance(objective, MeanOverBatches):
        return _over_batches(objective.per_batch, flat, unravel, inputs)
    loss = lambda p: objective(p, inputs)  # noqa: E731
    if layout is not None and layout.mesh is not None:  # as the params lie, laid flat after
        found = hvp.linearized_on_tree(loss, flat, unravel, layout.to_flat)
    else:
        found = hvp.linearized_gradient(lambda x: loss(unravel(x)), flat)
    value, gradient, linear = found
    return Operator(flat, value, gradient, linear, hvp.each_row(linear, flat.size))


def _preconditioned(
    wrapped: preconditioner_lib.Preconditioned,
    params: PyTree,
    inputs: PyTree,
    layout: Layout | None,
) -> Operator:
    """The Hessian and gradient at u = 0 of the view's loss L(θ0 + d ⊙ u), d = P^{-1/2}: the
    operator at θ0 congruent by d, d ⊙ H (d ⊙ v) (`hvp.preconditioned`), and d ⊙ ∇L."""
    inner_inputs, origin, inverse_sqrt = inputs
    op = hessian_operator(wrapped.inner, origin, inner_inputs, layout)
    d = flattened(inverse_sqrt, layout)[0]
    return Operator(
        flattened(params, layout)[0], op.value, d * op.gradient,
        hvp.preconditioned(op.matvec, d), lambda vectors: d * op.rows(d * vectors),
    )  # fmt: skip


STORAGES = ("bfloat16",)  # what a probe's kept vectors of D may be rounded to


class ProductOptions(NamedTuple):
    """How a matrix-free probe takes its products and keeps its vectors of D, one meaning for
    every probe: `finite_difference` ε > 0 takes H v by central differences of the gradient
    over a step of norm ε (`finite_difference_operator`; None: the exact product); `storage`
    ("bfloat16") rounds every vector of D the probe keeps (its basis, sketch or probes) to
    that dtype, the products and sums staying in the loss's dtype, at least float32 (None:
    the point's dtype). docs/guide/foundation_scale.md, "Vectors in bfloat16"."""

    finite_difference: float | None = None
    storage: str | None = None


def product_options(
    caller: str,
    points: Sequence[Point],
    matrix: str = "hessian",
    storage: object = None,
    finite_difference: object = None,
) -> ProductOptions:
    """`storage` and `finite_difference` checked once for every probe, one sentence each: a
    storage not in STORAGES, a step that is not a finite number > 0, a difference of G (no
    loss's Hessian), either over a streamed dataset (its probes keep their own vectors)."""
    if storage is not None:
        _checks.check_choice(f"{caller}: storage", storage, STORAGES)
    given = [f"{n}=" for n, v in (("storage", storage), ("finite_difference", finite_difference))
             if v is not None]  # fmt: skip
    if given and any(batches_lib.streams(p.batches) for p in points):
        raise ValueError(
            f"{caller}: {' and '.join(given)} {'needs' if len(given) == 1 else 'need'} the data "
            "in memory (one batch or Point(..., batches=...)); over a streamed dataset leave "
            f"{'it' if len(given) == 1 else 'them'} None."
        )
    if finite_difference is None:
        return ProductOptions(None, storage)  # type: ignore[arg-type]  # checked: a STORAGES name
    if matrix == "ggn":
        raise ValueError(
            f"{caller}: finite_difference= differences the loss's gradient, and the "
            "Gauss-Newton matrix G has no gradient to difference; use matrix='hessian' or "
            "finite_difference=None."
        )
    _checks.check_real(
        f"{caller}: finite_difference", finite_difference, low=0.0, low_open=True,
        meaning="the norm of the step along v in parameter space",
    )  # fmt: skip
    return ProductOptions(float(finite_difference), storage)  # type: ignore[arg-type]  # checked


class WithOptions:
    """An objective whose products follow `options` (`ProductOptions`): the probes' compiled
    programs take it where they take an objective (static), as they take a GaussNewtonSplit,
    so an option chooses the operator without a program of its own."""

    def __init__(self, objective: Objective, options: ProductOptions) -> None:
        self.objective, self.options = objective, options
        self.loss_fn = getattr(objective, "loss_fn", objective)  # names it in error messages

    def __call__(self, params: PyTree, inputs: PyTree) -> jax.Array:
        return self.objective(params, inputs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WithOptions) and (self.objective, self.options) == (
            other.objective, other.options,
        )  # fmt: skip

    def __hash__(self) -> int:
        return hash((WithOptions, self.objective, self.options))


def with_options(objective: Objective, options: ProductOptions | None) -> Objective:
    """`objective` itself under the default options, else a `WithOptions` of it."""
    if options is None or options == ProductOptions():
        return objective
    return WithOptions(getattr(objective, "objective", objective), options)


def options_of(objective: Objective) -> ProductOptions:
    """The `ProductOptions` an objective carries (the defaults for a plain one)."""
    return objective.options if isinstance(objective, WithOptions) else ProductOptions()


def stored(v: jax.Array, options: ProductOptions) -> jax.Array:
    """v as a probe keeps it under `options.storage` (its own dtype when None)."""
    return v if options.storage is None else v.astype(options.storage)


def _optioned(
    wrapped: WithOptions, params: PyTree, inputs: PyTree, layout: Layout | None
) -> Operator:
    """`hessian_operator` under `wrapped.options`: central differences at ε, or the exact
    products; with a storage, each vector is rounded to it before it is multiplied (H sees
    the vector as the probe keeps it), the product in the loss's dtype."""
    objective, options = wrapped.objective, wrapped.options
    if options.finite_difference is not None:
        op = finite_difference_operator(
            objective, params, inputs, options.finite_difference, layout
        )
    else:
        op = hessian_operator(objective, params, inputs, layout)
    if options.storage is None:
        return op

    def matvec(v: jax.Array) -> jax.Array:
        return op.matvec(stored(v, options).astype(v.dtype))

    def rows(vectors: jax.Array) -> jax.Array:
        return op.rows(stored(vectors, options).astype(vectors.dtype))

    return op._replace(matvec=matvec, rows=rows)


class GaussNewtonSplit:
    """output_loss(outputs(params, inputs), inputs) as an objective whose curvature operator is
    the Gauss-Newton matrix: the probes' compiled programs take it where they take an objective
    (static), so `matrix="ggn"` chooses the operator without a program of its own."""

    def __init__(self, outputs: Outputs, output_loss: OutputLoss) -> None:
        self.outputs, self.output_loss = outputs, output_loss
        self.loss_fn = output_loss  # names it in error messages

    def __call__(self, params: PyTree, inputs: PyTree) -> jax.Array:
        return self.output_loss(self.outputs(params, inputs), inputs)


@functools.lru_cache(maxsize=256)
def gauss_newton(outputs: Outputs, output_loss: OutputLoss) -> GaussNewtonSplit:
    """One GaussNewtonSplit per (outputs, output_loss), so points of one model share programs."""
    return GaussNewtonSplit(outputs, output_loss)


def ggn_operator(
    outputs: Outputs,
    output_loss: OutputLoss,
    params: PyTree,
    inputs: PyTree,
    layout: Layout | None = None,
) -> Operator:
    """G = Jᵀ H_z J at params, for use inside a traced program: the model linearised once (its
    VJP, whose residuals every product reuses), J v as the transpose of that VJP (no forward
    mode, so `jax.custom_vjp` models work, as in `ggn_at`), H_z u by the output loss's gradient
    linearised once at z, then Jᵀ by the VJP. `value` and `gradient` are the loss's."""
    flat, unravel = flattened(params, layout)
    lay: Callable[[Any], Any]
    if layout is None or layout.mesh is None:
        at, model, lay, cut = flat, (lambda x: outputs(unravel(x), inputs)), _same, _same
    else:  # as the parameters lie, laid flat after (`hvp.linearized_on_tree`)
        at, model, lay, cut = params, (lambda p: outputs(p, inputs)), layout.to_flat, unravel
    z, vjp = jax.vjp(model, at)
    jvp = jax.linear_transpose(vjp, z)
    value, grad_z, output_hvp = hvp.linearized_gradient(lambda u: output_loss(u, inputs), z)

    def matvec(v: jax.Array) -> jax.Array:
        (jv,) = jvp((cut(v),))
        return lay(vjp(output_hvp(jv))[0])

    return Operator(flat, value, lay(vjp(grad_z)[0]), matvec, hvp.each_row(matvec, flat.size))


def _same(x: Any) -> Any:
    return x


def check_split(points: Sequence[Point], caller: str, carriers: str = "") -> Point:
    """The first point, once every point is known to split its loss into model outputs and an
    output loss, the same for all (one sentence otherwise; `carriers` names who has one)."""
    first = points[0]
    if first.outputs is None or first.output_loss is None:
        raise ValueError(
            f"{caller}: {first.name or 'the point'} does not split its loss into model outputs "
            "and an output loss; build it with Point(..., objective=..., inputs=..., "
            f"outputs=..., output_loss=...){carriers}."
        )
    if any(
        p.outputs is not first.outputs or p.output_loss is not first.output_loss for p in points
    ):
        raise ValueError(f"{caller}: the points of a list must share outputs and output_loss.")
    return first


def for_matrix(
    points: Sequence[Point],
    objective: Objective,
    matrix: str,
    caller: str,
    options: ProductOptions | None = None,
) -> Objective:
    """The objective a probe's programs take for `matrix`: the points' own ("hessian", the
    Hessian's operator) or their Gauss-Newton split ("ggn", `ggn_operator`), `with_options`."""
    _checks.check_choice("matrix", matrix, ("hessian", "ggn"))
    if matrix == "hessian":
        return with_options(objective, options)
    first = check_split(points, f"{caller}(matrix='ggn')")
    split = gauss_newton(first.outputs, first.output_loss)
    mean = mean_over_batches(split) if isinstance(objective, MeanOverBatches) else split
    return with_options(mean, options)


def is_ggn(objective: Objective) -> bool:
    """Whether a program's objective stands for the Gauss-Newton matrix (over batches too)."""
    return isinstance(getattr(objective, "per_batch", objective), GaussNewtonSplit)


def flattened(params: PyTree, layout: Layout | None) -> tuple[jax.Array, Callable]:
    """(the flat params, flat -> params) in `layout` (None: `ravel_pytree`'s)."""
    if layout is None:
        return ravel_pytree(params)
    return layout.to_flat(params), layout.from_flat


@functools.partial(jax.jit, static_argnames=("objective",))
def products(objective: Objective, params: PyTree, inputs: PyTree, vectors: jax.Array) -> jax.Array:
    """H v for each row v of `vectors` (K, D), the gradient linearised once for all of them: the
    one program the eigenvalue search and its certificates share (one compile per model and K)."""
    return hessian_operator(objective, params, inputs).rows(vectors)


def _over_batches(
    per_batch: Objective, flat: jax.Array, unravel: Callable, batches: PyTree
) -> Operator:
    """The mean over the leading axis of `batches` of per_batch's loss, gradient and products,
    each accumulated batch by batch (`hvp.batched_gradient`)."""
    value, gradient, matvec, rows = hvp.batched_gradient(
        lambda x, batch: per_batch(unravel(x), batch), flat, batches
    )
    return Operator(flat, value, gradient, matvec, rows)


def _ggn_over_batches(split: GaussNewtonSplit, params: PyTree, batches: PyTree) -> Operator:
    """G of the mean over the leading axis of `batches`: the mean of each batch's G, its loss
    and gradient, accumulated batch by batch in a lax.scan (each batch linearised in turn),
    weighed by their examples (`batches.mean_over`)."""

    def mean_of(term: Callable[[Operator], PyTree], zeros: PyTree) -> PyTree:
        def one(batch: PyTree) -> PyTree:
            return term(ggn_operator(split.outputs, split.output_loss, params, batch))

        return batches_lib.mean_over(one, batches, zeros)

    flat = ravel_pytree(params)[0]
    first = batches_lib.first_batch(batches)
    value = jnp.zeros((), jax.eval_shape(split, params, first).dtype)
    value, gradient = mean_of(lambda op: (op.value, op.gradient), (value, jnp.zeros_like(flat)))
    return Operator(
        flat, value, gradient,
        lambda v: mean_of(lambda op: op.matvec(v), jnp.zeros_like(v)),
        lambda vectors: mean_of(lambda op: op.rows(vectors), jnp.zeros_like(vectors)),
    )  # fmt: skip


def _split_over_batches(
    per_batch: Objective, params: PyTree, batches: PyTree, layout: Layout
) -> Operator:
    """The mean over the leading axis of `batches` of per_batch's loss, gradient and products
    (H's, or G's for a `GaussNewtonSplit`) over a mesh, in params form: each device scans the
    batches' examples it holds along `layout.data` (a share of a batch counts as a batch of
    its own: the mean of the shares is the batch's for a mean over examples) and the devices
    average once after the scan, one all-reduce of the params a product, where a scan of
    replicated sums reduces once a batch. The vectors are flat in `layout`; a short last
    batch weighed by its examples (`batches.mean_over`; its examples are not split)."""
    product = (
        _ggn_tangent(per_batch)
        if isinstance(per_batch, GaussNewtonSplit)
        else _hessian_tangent(per_batch)
    )

    def mean_over_shares(term: Callable[..., PyTree], *args: PyTree) -> PyTree:
        """term(batch, *args) averaged over the batches and the shares of each batch."""

        def local(batches: PyTree, *args: PyTree) -> PyTree:
            first = batches_lib.first_batch(batches)
            zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(term, first, *args))
            mean = batches_lib.mean_over(lambda batch: term(batch, *args), batches, zeros)
            return jax.lax.pmean(mean, layout.data) if layout.data else mean

        if not layout.data:
            return local(batches, *args)
        return jax.shard_map(
            local, mesh=layout.mesh, in_specs=(P(None, layout.data),) + (P(),) * len(args),
            out_specs=P(), axis_names=set(layout.data), check_vma=False,
        )(batches, *args)  # fmt: skip

    value, gradient = mean_over_shares(
        lambda batch, p: jax.value_and_grad(per_batch)(p, batch), params
    )

    def matvec(v: jax.Array) -> jax.Array:
        tangent = layout.from_flat(v)
        return layout.to_flat(mean_over_shares(product, params, tangent))

    def rows(vectors: jax.Array) -> jax.Array:
        tangents = jax.vmap(layout.from_flat)(vectors)
        products = mean_over_shares(
            lambda batch, p, t: jax.vmap(lambda one: product(batch, p, one))(t),
            params, tangents,
        )  # fmt: skip
        return jax.vmap(layout.to_flat)(products)

    return Operator(layout.to_flat(params), value, layout.to_flat(gradient), matvec, rows)


def _hessian_tangent(per_batch: Objective) -> Callable[[PyTree, PyTree, PyTree], PyTree]:
    """(batch, params, tangent) -> H tangent of per_batch at params, in params form."""

    def product(batch: PyTree, params: PyTree, tangent: PyTree) -> PyTree:
        return jax.jvp(lambda p: jax.grad(per_batch)(p, batch), (params,), (tangent,))[1]

    return product


def _ggn_tangent(split: GaussNewtonSplit) -> Callable[[PyTree, PyTree, PyTree], PyTree]:
    """(batch, params, tangent) -> G tangent at params, in params form (`ggn_operator`)."""

    def product(batch: PyTree, params: PyTree, tangent: PyTree) -> PyTree:
        z, vjp = jax.vjp(lambda p: split.outputs(p, batch), params)
        (jv,) = jax.linear_transpose(vjp, z)((tangent,))
        grad_z = jax.grad(split.output_loss)
        hz = jax.jvp(lambda u: grad_z(u, batch), (z,), (jv,))[1]
        return vjp(hz)[0]

    return product


def finite_difference_operator(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    eps: jax.Array | float,
    layout: Layout | None = None,
) -> Operator:
    """The Hessian's products by central differences of the gradient, the operator PyTorch's
    FSDP tools must use (their gradient collectives have no double backward): H v ≈
    (∇L(θ + h v) - ∇L(θ - h v)) / (2h) with h = eps / |v|, a step of norm `eps` in parameter
    space (traced: one program for every eps). Two gradients a product, over one batch or the
    mean over the leading axis of batches (`Point(..., batches=...)`); θ ± h v rounded to the
    params' dtype, the rest in at least float32. Its bias against the exact `hessian_operator`
    is O(eps²) plus rounding O(u |∇L| / eps) (docs/performance.md, "Exact products against
    finite differences"). Every matrix-free probe takes it (`ProductOptions`)."""
    if is_ggn(objective):
        raise ValueError(
            "finite differences difference the loss's gradient, and the Gauss-Newton matrix "
            "is no loss's Hessian: use matrix='hessian' or no finite_difference."
        )
    flat, unravel = flattened(params, layout)

    def gradient_at(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        value, tree = value_and_grad(objective, unravel(x), inputs)
        return value, flattened(tree, layout)[0]

    value, gradient = gradient_at(flat)

    def matvec(v: jax.Array) -> jax.Array:
        wide = jnp.promote_types(v.dtype, jnp.float32)
        v_wide = v.astype(wide)
        norm = jnp.sqrt(jnp.sum(v_wide * v_wide))
        h = jnp.asarray(eps, wide) / jnp.where(norm > 0, norm, 1)  # v = 0: H v = 0
        x_wide = flat.astype(wide)
        plus = gradient_at((x_wide + h * v_wide).astype(flat.dtype))[1]
        minus = gradient_at((x_wide - h * v_wide).astype(flat.dtype))[1]
        return ((plus.astype(wide) - minus.astype(wide)) / (2 * h)).astype(v.dtype)

    return Operator(flat, value, gradient, matvec, hvp.each_row(matvec, flat.size))


@functools.partial(jax.jit, static_argnames=("objective", "flat", "layout"))
def finite_difference_product(
    objective: Objective,
    params: PyTree,
    inputs: PyTree,
    tangent: PyTree,
    eps: jax.Array,
    flat: bool,
    layout: Layout | None = None,
) -> PyTree:
    """`finite_difference_operator`'s H v for v a pytree shaped like the params (then H v is
    one too) or, `flat`, a vector ((D,) or (D, 1) in `flattened`'s order for `layout`, H v
    shaped as v): one compiled program per model and form, eps traced."""
    op = finite_difference_operator(objective, params, inputs, eps, layout)
    if flat:
        return op.matvec(tangent.reshape(-1)).reshape(tangent.shape)
    return flattened(params, layout)[1](op.matvec(flattened(tangent, layout)[0]))


def value_and_grad(
    objective: Objective, params: PyTree, inputs: PyTree
) -> tuple[jax.Array, PyTree]:
    """(loss, gradient pytree): a dataset's accumulated batch by batch, without the
    rematerialisation its plain gradient would do."""
    if not isinstance(objective, MeanOverBatches):
        return jax.value_and_grad(objective)(params, inputs)
    operator = _over_batches(objective.per_batch, *ravel_pytree(params), inputs)
    return operator.value, ravel_pytree(params)[1](operator.gradient)
