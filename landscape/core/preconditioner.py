"""The diagonal preconditioner P of the preconditioned sharpness λ_max(P^{-1/2} H P^{-1/2}) =
λ_max(P^{-1} H), the curvature an adaptive method's step meets (Cohen et al., 2022;
docs/notes/edge_of_stability.md): P's diagonal as a pytree shaped like the parameters, or
optax Adam's state, whose P is sqrt(v̂) + ε with v̂ the bias-corrected second moment; and the
objective of a point seen in the coordinates u of θ = θ0 + P^{-1/2} u (`Preconditioned`)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.typing import PyTree

_DEPTH = 8  # how deep `adam_state` looks inside nested optimizer states


def adam_state(opt_state: object, depth: int = _DEPTH) -> Any:
    """The first `optax.ScaleByAdamState` inside an optimizer state (a chain's tuple, an
    `inject_hyperparams` state: NamedTuples are searched field by field), or None."""
    import optax  # the optimizer's library, loaded only where its state is read

    if isinstance(opt_state, optax.ScaleByAdamState):
        return opt_state
    if depth and isinstance(opt_state, tuple | list):
        for part in opt_state:
            found = adam_state(part, depth - 1)
            if found is not None:
                return found
    return None


def adam_preconditioner(
    opt_state: object,
    eps: float = 1e-8,
    b2: float = 0.999,
    *,
    eps_root: float = 0.0,
    b1: float | None = None,
) -> PyTree:
    """P's diagonal at optax Adam's last step, sqrt(ν / (1 - b2^t) + eps_root) + eps (optax's
    `scale_by_adam`, t its count), a pytree like the parameters; with `b1`, times Adam's
    first-moment correction 1 - b1^t, as Cohen et al. (2022) write P. Jittable.

    Args:
        opt_state: the state of `optax.adam` (or of a chain holding its `ScaleByAdamState`).
        eps, b2, eps_root: the values the optimizer was built with (optax's defaults here).
        b1: None, or Adam's b1 to fold its bias correction into P.
    """
    state = adam_state(opt_state)
    if state is None:
        raise TypeError(
            f"adam_preconditioner: opt_state is {_checks.type_name(opt_state)} and holds no "
            "optax.ScaleByAdamState: give the state of optax.adam (or of a chain holding it)."
        )
    _checks.check_real("adam_preconditioner: eps", eps, low=0.0, meaning="Adam's ε")
    _checks.check_real("adam_preconditioner: eps_root", eps_root, low=0.0, meaning="Adam's")
    _checks.check_real("adam_preconditioner: b2", b2, low=0.0, high=1.0, high_open=True)
    if b1 is not None:
        _checks.check_real("adam_preconditioner: b1", b1, low=0.0, high=1.0, high_open=True)
    count = state.count
    if not _checks.is_traced(count) and int(np.asarray(count)) < 1:
        raise ValueError(
            "adam_preconditioner: opt_state has taken no step (count = 0), and Adam's second "
            "moment is bias-corrected by 1 - b2^t: take a step before measuring."
        )

    def entry(nu: jax.Array) -> jax.Array:
        t = jnp.asarray(count, nu.dtype)
        nu_hat = nu / (1 - jnp.asarray(b2, nu.dtype) ** t)
        first = 1 if b1 is None else 1 - jnp.asarray(b1, nu.dtype) ** t
        return (jnp.sqrt(nu_hat + eps_root) + eps) * first

    return jax.tree.map(entry, state.nu)


def diagonal(preconditioner: object, params: PyTree, caller: str) -> PyTree:
    """P's diagonal from a probe's or the tracker's `preconditioner=` (a pytree shaped like the
    params, or an optax Adam state, read with optax's defaults: `adam_preconditioner`), in the
    params' dtype; one sentence for a tree shaped otherwise, or entries not finite and > 0
    (checked where they are concrete, not inside a traced function)."""
    if adam_state(preconditioner) is not None:
        preconditioner = adam_preconditioner(preconditioner)
    leaves, structure = jax.tree.flatten(preconditioner)
    if structure != jax.tree.structure(params):  # type: ignore[operator]  # PyTreeDef has !=
        raise ValueError(
            f"{caller}: preconditioner has tree structure {structure} where the params have "
            f"{jax.tree.structure(params)}: give P's diagonal as a pytree shaped like the "
            "params, or optax Adam's state (landscape.adam_preconditioner)."
        )
    shapes = [np.shape(leaf) for leaf in jax.tree.leaves(params)]
    if [np.shape(leaf) for leaf in leaves] != shapes:
        raise ValueError(
            f"{caller}: preconditioner has leaves of shapes {[np.shape(x) for x in leaves]} "
            f"where the params have {shapes}: P's diagonal holds one entry per parameter."
        )
    dtype = jnp.result_type(*jax.tree.leaves(params))
    for leaf in leaves:
        if _checks.is_traced(leaf):
            continue
        values = np.asarray(leaf)
        bad = ~(np.isfinite(values) & (values > 0))
        if np.any(bad):
            raise ValueError(
                f"{caller}: preconditioner has {int(np.sum(bad))} entries that are not finite "
                f"numbers > 0 (one is {values[bad].flat[0]:g}): P's diagonal must be positive, "
                "as Adam's sqrt(v̂) + ε is."
            )
    return jax.tree.map(lambda leaf: _host_or_traced(leaf).asarray(leaf, dtype), preconditioner)


def inverse_sqrt(diagonal: PyTree) -> PyTree:
    """P^{-1/2}'s diagonal, leaf by leaf: the scaling d of v -> d H (d v) (`hvp.preconditioned`);
    numpy on the host where P is concrete (nothing compiled), jnp inside a trace."""
    return jax.tree.map(lambda p: 1 / _host_or_traced(p).sqrt(p), diagonal)


def _host_or_traced(leaf: object) -> Any:
    """numpy for a concrete leaf, jax.numpy for a traced one."""
    return jnp if _checks.is_traced(leaf) else np


class Preconditioned:
    """inner(θ0 + d ⊙ u, inputs) as a function of u, its inputs (inputs, θ0, d) with d = P^{-1/2}
    (traced: one program for every P and θ0): the objective of the probes' view of a point
    (`probes.preconditioning`), whose Hessian at u = 0 `core.operator.hessian_operator`
    multiplies by as d ⊙ H (d ⊙ v), with no pass through the shift."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.loss_fn = getattr(inner, "loss_fn", inner)  # names it in error messages

    def __call__(self, params: PyTree, inputs: PyTree) -> jax.Array:
        inner_inputs, origin, inverse_sqrt = inputs
        moved = jax.tree.map(lambda o, d, u: o + d * u, origin, inverse_sqrt, params)
        return self.inner(moved, inner_inputs)


@functools.lru_cache(maxsize=256)
def preconditioned(inner: Any) -> Preconditioned:
    """One Preconditioned per objective, so the views of one model share programs."""
    return Preconditioned(inner)
