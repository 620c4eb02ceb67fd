"""Gradient flow d(theta)/dt = -grad L(theta) on a population loss, with an adaptive solver.

Plateaus of saddle-to-saddle dynamics last ~1/eps while the jumps between them take O(1) time,
so a fixed step either crawls through the plateau or blurs the jump. We integrate with diffrax's
8th-order Dormand-Prince method and a PID step-size controller (rtol 1e-10 keeps conserved
quantities to ~1e-11), saving at requested times. Everything is jit- and vmap-able: a grid of
initialisations is one program (`jax.vmap(lambda p: gradient_flow(loss, p, ts))`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import diffrax
import jax
import jax.numpy as jnp

from landscape.typing import PyTree


@dataclasses.dataclass(frozen=True)
class FlowSettings:
    rtol: float = 1e-10
    atol: float = 1e-12
    max_steps: int = 200_000


def gradient_flow(
    loss_fn: Callable[[PyTree], jax.Array],
    params0: PyTree,
    save_times: jax.Array,
    settings: FlowSettings = FlowSettings(),
) -> tuple[PyTree, jax.Array]:
    """Integrate the flow from params0 (at t = 0) and return (params at save_times, ok).

    The returned pytree has a leading axis of len(save_times); `ok` is False if the solver
    stopped early (max_steps reached or a non-finite state), in which case the later saves are
    not meaningful.
    """
    grad = jax.grad(loss_fn)
    term = diffrax.ODETerm(lambda t, params, args: jax.tree.map(jnp.negative, grad(params)))
    solution = diffrax.diffeqsolve(
        term,
        diffrax.Dopri8(),
        t0=0.0,
        t1=save_times[-1],
        dt0=None,
        y0=params0,
        saveat=diffrax.SaveAt(ts=save_times),
        stepsize_controller=diffrax.PIDController(rtol=settings.rtol, atol=settings.atol),
        max_steps=settings.max_steps,
        throw=False,
    )
    return solution.ys, solution.result == diffrax.RESULTS.successful
