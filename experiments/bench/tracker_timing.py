"""The functional tracker's cost in a plain optax loop (`python -m experiments.benchmark
--only=tracker`): the 32 -> 256 -> 256 -> 10 tanh MLP of docs/guide/own_loop.md, full-batch SGD
on 2048 examples at lr 0.4, λ_max every 25 steps by `landscape.tracker` at several num_iters,
each measurement timed against the training steps around it, its error against a 40-step
reference; and a new Point with `lanczos_spectrum` from Python per measurement, the way
without the tracker. Medians over the run; the measurements alternate with the steps."""

from __future__ import annotations

import statistics
from typing import Any

import jax
import optax
from absl import flags

import landscape
from experiments.bench.tracker_timing_rows import EVERY, LR, STEPS, num_params, problem, timed

_ITERS = flags.DEFINE_list("tracker.iters", ["3", "5", "8"], "Lanczos steps a measurement.")


def bench_tracker(repeats: int, one_by_one: int) -> dict:
    """Rows: the training step; per num_iters (`--tracker.iters`) the measurement's seconds, in
    training steps, the cost of one every 25 steps against the training time, and λ_max's median
    relative error against the reference; the new-Point-per-measurement way at 20 Lanczos
    steps."""
    del repeats, one_by_one
    iters = tuple(int(m) for m in _ITERS.value)
    params, batch, loss = problem()
    optimizer = optax.sgd(LR)

    @jax.jit
    def train_step(params: Any, opt_state: Any) -> tuple[Any, Any]:
        updates, opt_state = optimizer.update(jax.grad(loss)(params, batch), opt_state)
        return optax.apply_updates(params, updates), opt_state

    trackers = {m: landscape.tracker(loss, num_iters=m) for m in (*iters, 40)}
    states = {m: t.init(params, jax.random.key(4)) for m, t in trackers.items()}
    opt_state, steps = optimizer.init(params), []
    seconds: dict[int, list[float]] = {m: [] for m in trackers}
    errors: dict[int, list[float]] = {m: [] for m in iters}
    old_way: list[float] = []
    for step in range(STEPS + 1):
        if step % EVERY == 0:
            found = {}
            for m, t in trackers.items():
                took, (found[m], states[m]) = timed(t.update, states[m], params, batch)
                seconds[m].append(took)
            reference = float(found[40].lambda_max)
            for m in iters:
                errors[m].append(abs(float(found[m].lambda_max) - reference) / reference)
            if step % (4 * EVERY) == 0:
                point = landscape.Point(params, objective=loss, inputs=batch)
                old_way.append(timed(landscape.lanczos_spectrum, point, 20)[0])
        took, (params, opt_state) = timed(train_step, params, opt_state)
        steps.append(took)
    step_s = statistics.median(steps[1:])
    rows: dict[str, Any] = {"train_step": dict(ms=1e3 * step_s, D=num_params(params))}
    for m in iters:
        each = statistics.median(seconds[m][1:])  # the first compiles
        rows[f"tracker_{m}_iters"] = dict(
            ms=1e3 * each, in_steps=each / step_s, every_25=each / (EVERY * step_s),
            median_rel_error=statistics.median(errors[m][1:]), target_every_25=0.2,
        )  # fmt: skip
    each = statistics.median(old_way[1:])
    rows["new_point_lanczos_spectrum_20"] = dict(
        ms=1e3 * each, in_steps=each / step_s, every_25=each / (EVERY * step_s)
    )
    for name, row in rows.items():
        print(f"  {name}: {row}", flush=True)
    return rows
