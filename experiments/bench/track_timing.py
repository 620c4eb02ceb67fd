"""The cost of curvature tracked inside a training run (`python -m experiments.benchmark
--only=track`): the n-gram Fig. 3 config, 5 seeds, lambda_min / lambda_max every 64 steps by
10 Lanczos steps on a 128-sequence evaluation batch, against the untracked run, and the
tracking's measurements and Hessian-vector products timed alone.

The compiled chunks (the whole run, one chunk each) are built once and called alternately,
untracked and tracked, so a busy machine's phases fall on both; medians are reported."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from configs import ngrams
from landscape.engine import step, sweeps, training
from landscape.engine import track as track_lib
from landscape.ngrams import experiment


def _program(cfg: Any, track: track_lib.Track | None) -> tuple[Any, Callable, Any]:
    """(initial state, the compiled chunk of the whole run, the runs) as `training.train`
    builds them for the config's 5 seeds over the host devices."""
    seeds = np.arange(cfg.seed, cfg.seed + cfg.num_seeds)
    spec = step.step_spec(
        experiment.make_problem(cfg),
        cfg.optim,
        num_steps=cfg.train.num_steps,
        log_every=cfg.train.log_every,
        chunk_steps=cfg.train.num_steps,
        track=track,
    )
    hparams = {"optim.lr": np.full(len(seeds), cfg.optim.lr)}
    sharding = sweeps.run_axis_sharding(jax.devices()[: len(seeds)])
    runs = training._place_runs(spec.problem, hparams, seeds, sharding, None, np.float32)
    state, _, chunk = training._compile(spec, runs)
    return state, chunk, runs


def _hvps(loss: Any, num: int, params: Any, hp: Any) -> jax.Array:
    """`num` Hessian-vector products of `loss` at params, each a jvp of the gradient (the
    primal pass every time): the HVPs alone, one after another."""
    flat, unravel = ravel_pytree(params)
    grad = jax.grad(lambda x: loss(unravel(x), hp))

    def body(i: jax.Array, v: jax.Array) -> jax.Array:
        hv = jax.jvp(grad, (flat,), (v,))[1]
        return hv / jnp.linalg.norm(hv)

    return jax.lax.fori_loop(0, num, body, jnp.ones_like(flat))


def _whole_run(state: Any, chunk: Callable, runs: Any) -> Any:
    """The run's one chunk from a copy of the initial state (the chunk donates its input)."""
    return chunk(jax.tree.map(jnp.copy, state), jnp.int32(0), runs.hparams)


def _seconds(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - t0


def bench_track(repeats: int, one_by_one: int, steps: int = 1024) -> dict[str, Any]:
    """Rows: the untracked and tracked Fig. 3 chunks (5 seeds, `steps` steps, medians of
    `repeats` alternated calls), their ratio, and the tracking's extra seconds against its
    measurements timed alone (`track.measure` vmapped over the runs, alternated too)."""
    del one_by_one
    cfg = ngrams.get_config("fig5")  # Fig. 3's setting for seeds 1..5, one vmapped program
    cfg.train.update(num_steps=steps, log_every=64, test_sequences=256, track_sequences=128)
    track = track_lib.Track(loss=experiment.tracking_loss(cfg), every=64, num_lanczos=10)
    programs = {"untracked": _program(cfg, None), "tracked": _program(cfg, track)}
    state, _, runs = programs["tracked"]
    params = jax.tree.map(jnp.copy, state.params)
    measure = jax.jit(jax.vmap(functools.partial(track_lib.measure, track), (0, 0, None)))
    naive = jax.jit(jax.vmap(functools.partial(_hvps, track.loss, 10), (0, 0)))
    calls: dict[str, Callable[[], Any]] = {
        name: functools.partial(_whole_run, *program) for name, program in programs.items()
    }
    calls["measure"] = lambda: measure(params, runs.hparams, jnp.int32(64))
    calls["naive_hvps"] = lambda: naive(params, runs.hparams)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats + 1):  # the first round warms up (not counted)
        for name, call in calls.items():
            times[name].append(_seconds(call))
    med = {name: statistics.median(t[1:]) for name, t in times.items()}
    count = steps // 64  # tracked steps inside the chunk (step 0 is measured at init)
    extra = med["tracked"] - med["untracked"]
    return {
        "fig3_5_seeds_untracked": dict(
            run_seconds=med["untracked"], ms_per_step=1e3 * med["untracked"] / steps
        ),
        "fig3_5_seeds_tracked": dict(
            run_seconds=med["tracked"],
            ms_per_step=1e3 * med["tracked"] / steps,
            ratio_to_untracked=med["tracked"] / med["untracked"],
            target_ratio=2.0,
            note=f"lambda_min/max every 64 steps ({count} in the chunk), 10 Lanczos steps, "
            f"128-sequence evaluation batch; medians of {repeats} alternated calls",
        ),
        "tracking_overhead": dict(
            extra_seconds=extra,
            measure_alone_seconds=count * med["measure"],
            naive_hvps_alone_seconds=count * med["naive_hvps"],
            ratio_to_measure_alone=extra / (count * med["measure"]),
            ratio_to_naive_hvps=extra / (count * med["naive_hvps"]),
            target_ratio=1.2,
            note="the tracked chunk's extra seconds against its measurements timed alone "
            "(one linearisation + 10 HVPs + Lanczos, vmapped over the 5 runs) and against 10 "
            "plain jvp-of-grad HVPs timed alone",
        ),
    }
