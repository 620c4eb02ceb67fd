"""The cost of curvature tracked inside a training run (`python -m experiments.benchmark
--only=track`): the n-gram Fig. 3 config, 5 seeds, lambda_min / lambda_max every 64 steps by
10 Lanczos steps on a 128-sequence evaluation batch, against the untracked run, and the
tracking's Hessian-vector products timed alone (issue 39 item 2)."""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from configs import ngrams
from landscape.engine import track as track_lib
from landscape.ngrams import experiment


def _run_seconds(cfg: Any, repeats: int) -> tuple[float, float, Any]:
    """(best run seconds, compile seconds, the result) of the config's one program."""
    results = [experiment.train_group(cfg, {}, progress=None)["result"] for _ in range(repeats)]
    return min(r.run_seconds for r in results), results[0].compile_seconds, results[0]


def _hvps(loss: Any, num: int, params: Any, hp: Any) -> jax.Array:
    """`num` Hessian-vector products of `loss` at params, each a jvp of the gradient (the
    primal pass every time): what the tracking would cost done naively, one after another."""
    flat, unravel = ravel_pytree(params)
    grad = jax.grad(lambda x: loss(unravel(x), hp))

    def body(i: jax.Array, v: jax.Array) -> jax.Array:
        hv = jax.jvp(grad, (flat,), (v,))[1]
        return hv / jnp.linalg.norm(hv)

    return jax.lax.fori_loop(0, num, body, jnp.ones_like(flat))


def _call_seconds(fn: Any, args: tuple, times: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(times):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t0) / times)
    return best


def bench_track(repeats: int, one_by_one: int, steps: int = 1024) -> dict[str, Any]:
    """Rows: the untracked and tracked Fig. 3 programs (5 seeds, `steps` steps), their ratio,
    and the tracking's extra seconds against its HVPs timed alone (the measurement `measure`
    vmapped over the 5 runs, and the same number of naive HVPs)."""
    del one_by_one
    cfg = ngrams.get_config("fig5")  # Fig. 3's setting for seeds 1..5, one vmapped program
    cfg.train.update(num_steps=steps, log_every=64, test_sequences=256, track_sequences=128)
    plain, plain_compile, _ = _run_seconds(cfg, repeats)
    cfg.train.update(track_every=64, track_lanczos=10)
    tracked, tracked_compile, result = _run_seconds(cfg, repeats)
    count = len(result.tracked_steps)
    track = track_lib.track_of(cfg, experiment.tracking_loss(cfg))
    assert track is not None
    hp = {k: jnp.asarray(v, jnp.float32) for k, v in result.hparams.items()}
    params = jax.tree.map(jnp.asarray, result.final_params)
    measure = jax.jit(jax.vmap(functools.partial(track_lib.measure, track), (0, 0, None)))
    measured = _call_seconds(measure, (params, hp, jnp.int32(64)), 5)
    naive = jax.jit(jax.vmap(functools.partial(_hvps, track.loss, 10), (0, 0)))
    naive_seconds = _call_seconds(naive, (params, hp), 5)
    return {
        "fig3_5_seeds_untracked": dict(
            run_seconds=plain, ms_per_step=1e3 * plain / steps, compile_seconds=plain_compile
        ),
        "fig3_5_seeds_tracked": dict(
            run_seconds=tracked,
            ms_per_step=1e3 * tracked / steps,
            compile_seconds=tracked_compile,
            ratio_to_untracked=tracked / plain,
            target_ratio=2.0,
            note=f"lambda_min/max every 64 steps ({count} tracked steps incl. 0; step 0 at "
            "init), 10 Lanczos steps, 128-sequence evaluation batch",
        ),
        "tracking_overhead": dict(
            extra_seconds=tracked - plain,
            measure_alone_seconds=(count - 1) * measured,
            naive_hvps_alone_seconds=(count - 1) * naive_seconds,
            ratio_to_measure_alone=(tracked - plain) / ((count - 1) * measured),
            ratio_to_naive_hvps=(tracked - plain) / ((count - 1) * naive_seconds),
            target_ratio=1.2,
            note="the tracked run's extra seconds over its tracked steps after 0, against "
            "the same measurements (one linearisation + 10 HVPs + Lanczos, vmapped over the 5 "
            "runs) timed alone, and against 10 plain jvp-of-grad HVPs timed alone",
        ),
    }
