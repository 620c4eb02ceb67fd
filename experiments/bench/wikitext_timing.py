"""The WikiText rows of `python -m experiments.benchmark --only=wikitext` (Scan and Snap Figs. 7,
10): SGD steps of the d = 200 transformer, the decoder's matmuls and the encoder alone, and the
Fig. 7 estimate against its floor (docs/performance.md)."""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.bench.timing import Rows, best_call_seconds, best_run_seconds, call_and_wait
from landscape.engine import config as config_lib
from landscape.engine import sweeps, training
from landscape.typing import PyTree


def bench_wikitext(repeats: int, one_by_one: int) -> dict[str, Any]:
    """Scan & Snap on WikiText (Figs. 7, 10): SGD steps of the d = 200 transformer at batch 20 x
    bptt 35 over the WikiText-2 valid split's vocabulary (the decoder's three matmuls,
    ~10 GFLOP a step, set the floor: tens of ms). Needs the text folder of configs/wikitext.py."""
    from configs import wikitext as wikitext_configs
    from landscape.scan_snap import text, wikitext

    cfg = wikitext_configs.get_config("fig7")
    message = text.missing_splits_message(
        cfg.text.path, (cfg.text.train_split, cfg.text.eval_split)
    )
    out = Rows()
    if message:
        out["skipped"] = message
        return out
    for layers, runs in ((1, 1), (3, 1), (1, 4)):
        cell = config_lib.with_fields(cfg, {"transformer.num_layers": layers})
        cell.text.eval_chunks = 1
        corpus = wikitext.load(cell)
        steps = 50
        hparams = {"optim.lr_z": np.full(runs, 5.0), "optim.lr_y_over_lr_z": np.full(runs, 2.0)}
        once = functools.partial(train_wikitext, cell, corpus, hparams, runs, steps)
        best, compile_s = best_run_seconds(once, repeats)
        V, d, positions = corpus.vocab_size, cell.transformer.width, 20 * 35
        gflop = 3 * 2 * positions * d * V / 1e9  # decoder: forward, two backward
        ms = 1e3 * best / steps / runs
        out[f"{layers}_layer{'s' if layers > 1 else ''}_{runs}_run{'s' if runs > 1 else ''}"] = (
            dict(
                ms_per_step_per_run=ms,
                compile_seconds=compile_s,
                vocab_size=V,
                decoder_gflop_per_step=gflop,
                decoder_gflop_per_second_of_step=gflop / ms * 1e3,
                note=f"{steps} SGD steps (clip 0.5, dropout 0.3) with one 1-chunk snapshot; "
                + (
                    "runs one at a time on each device (runs_per_group 1)"
                    if runs > 1
                    else "one run"
                ),
            )
        )
    rates = _decoder_matmul_rates(corpus.vocab_size, cell.transformer.width, 20 * 35, repeats)
    out["decoder_matmuls_alone"] = rates
    encoders = {
        layers: _encoder_ms(
            config_lib.with_fields(cfg, {"transformer.num_layers": layers}), corpus, repeats
        )
        for layers in (1, 3)
    }
    out["encoder_alone"] = dict(
        ms_1_layer=encoders[1],
        ms_3_layers=encoders[3],
        note="forward and backward of the layers below the decoder "
        "(embedding, dropout, encoder layers) alone, one run",
    )
    depths = cfg.sweep["transformer"]["num_layers"]
    best = max(rates["xla_gflop_per_second"], rates["numpy_blas_gflop_per_second"])
    per_step = {
        1: out["1_layer_1_run"]["ms_per_step_per_run"],
        3: out["3_layers_1_run"]["ms_per_step_per_run"],
    }
    floor_ms = sum(1e3 * gflop / best + encoders[layers] for layers in depths)
    out["fig7_estimate"] = dict(
        minutes=cfg.train.num_steps * sum(per_step[layers] for layers in depths) / 6e4,
        floor_minutes=cfg.train.num_steps * floor_ms / 6e4,
        target_minutes=5,
        note=f"{cfg.train.num_steps} steps at each depth {depths} at the measured steps, "
        "without compilation and snapshots; the floor adds, per step, the decoder's matmuls "
        "at the best rate measured above (XLA's or numpy's BLAS) and the encoder alone: no "
        "softmax, no update",
    )
    return out


def train_wikitext(
    cell: ml_collections.ConfigDict,
    corpus: Any,
    hparams: dict[str, np.ndarray],
    runs: int,
    steps: int,
) -> training.RunResult:
    """`steps` SGD steps of `runs` runs of the WikiText problem (sharded over the devices when
    there are several runs)."""
    from landscape.scan_snap import wikitext

    return training.train(
        wikitext.make_problem(cell, corpus),
        cell.optim,
        hparams,
        list(range(runs)),
        num_steps=steps,
        log_every=steps,
        chunk_steps=steps,
        progress=None,
        sharding=None if runs == 1 else sweeps.run_axis_sharding(),
    )


def _encoder_ms(cfg: ml_collections.ConfigDict, corpus: Any, repeats: int) -> float:
    """Best ms of one forward and backward pass through the model below its decoder."""
    from landscape.scan_snap import model as model_lib
    from landscape.scan_snap import text, wikitext

    net = wikitext.model_of(cfg, corpus.vocab_size)
    params = net.init({"params": jax.random.key(0)}, jnp.zeros((1, cfg.text.bptt), jnp.int32))
    inputs, _ = text.chunk(jnp.asarray(corpus.train), 0, cfg.text.bptt)
    cotangent = jnp.ones(inputs.T.shape + (cfg.transformer.width,), jnp.float32)

    def encoded(p: PyTree) -> jax.Array:
        x, _ = net.apply(
            p,
            inputs.T,
            False,
            method=model_lib.TextTransformer.encode,
            rngs={"dropout": jax.random.key(1)},
        )
        return (x * cotangent).sum()

    grad = jax.jit(jax.grad(encoded))
    return 1e3 * best_call_seconds(lambda: jax.block_until_ready(grad(params)), 10 * repeats)


def _decoder_matmul_rates(V, d, positions, repeats):
    """The decoder's three matmuls of a step (logits h W; the gradients G W^T and h^T G) alone,
    compiled by XLA and in numpy's BLAS: the best rate this machine multiplies these shapes at."""
    rng = np.random.default_rng(0)
    h, W = rng.standard_normal((positions, d), np.float32), rng.standard_normal((d, V), np.float32)
    G = rng.standard_normal((positions, V), np.float32)
    products = ((lambda h, W, G: h @ W), (lambda h, W, G: G @ W.T), (lambda h, W, G: h.T @ G))
    gflop = 3 * 2 * positions * d * V / 1e9

    xla_args = [jax.device_put(a) for a in (h, W, G)]
    xla = sum(
        best_call_seconds(functools.partial(call_and_wait, jax.jit(f), xla_args), 5 * repeats)
        for f in products
    )
    blas = sum(best_call_seconds(lambda f=f: f(h, W, G), 5 * repeats) for f in products)
    return dict(
        gflop=gflop,
        xla_ms=1e3 * xla,
        xla_gflop_per_second=gflop / xla,
        numpy_blas_ms=1e3 * blas,
        numpy_blas_gflop_per_second=gflop / blas,
        note="best of repeated calls of each matmul, float32",
    )
