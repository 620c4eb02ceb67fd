"""Scan & Snap on real text (Figs. 7, 10; notes/scan_snap.md §2.5, §3.7, §5.7, §5.10).

`experiment = "wikitext"`: `model.TextTransformer` trained with plain SGD on a WikiText id stream
(`text.py`) inside the compiled run, with its own learning rate for the FFNs; logs the validation
loss, attention entropies and maps; claims `fig7` and `fig10`. Details: docs/design/scan_snap.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import experiment as engine_experiment
from landscape.engine import memory, precision, records, sweeps, training
from landscape.engine.experiment import BASELINE_BYTES
from landscape.point import params_table
from landscape.scan_snap import model as model_lib
from landscape.scan_snap import text, wikitext_claims
from landscape.typing import PyTree

TRACED = ("optim.lr_z", "optim.lr_y_over_lr_z")  # the package's: vmapped within a program
CLAIM_SETS = ("fig7", "fig10")
SWEEPABLE = (
    "transformer.num_layers",
    "transformer.width",
    "transformer.hidden",
    "transformer.dropout",
    "text.bptt",
    "train.batch_size",
)


def default_fields() -> dict[str, dict[str, Any]]:
    """The config groups of experiment = "wikitext" (the other groups are the package's)."""
    return dict(
        text=dict(
            path="../shared/data/wikitext-2",  # a WikiText folder (train/valid/test)
            train_split="valid",
            eval_split="test",  # that folder lacks train.txt
            bptt=35,
            eval_batch_size=10,
            eval_chunks=32,  # evaluation chunks a snapshot, spread evenly; 0 = all
            map_chunk=100,
            map_column=0,  # Fig. 7's chunk: rows 100*35.., column 0
            map_steps=[0, 500, 1000, 1500],
        ),  # Fig. 7's columns (multiples of log_every)
        transformer=dict(num_layers=1, width=200, hidden=200, dropout=0.2),
    )


# ----------------------------------------------------------------------------- validation


def validate_run(cfg: ml_collections.ConfigDict) -> None:
    """Whole-run fields of a wikitext config: the folder and its splits, the claim set."""
    t = cfg.text
    config_lib.require_choice(cfg, "text.train_split", text.SPLITS)
    config_lib.require_choice(cfg, "text.eval_split", text.SPLITS)
    message = text.missing_splits_message(t.path, (t.train_split, t.eval_split))
    config_lib.require(message is None, "text.path", t.path, f"a WikiText folder: {message}")
    config_lib.require(
        cfg.experiment == "curvature" or cfg.claims in CLAIM_SETS + ("none",),
        "claims",
        cfg.claims,
        f"one of {CLAIM_SETS + ('none',)} for experiment = 'wikitext'",
    )
    if cfg.claims == "fig10":
        config_lib.require(
            "optim.lr_z" in config_lib.flatten(cfg.sweep),
            "claims",
            cfg.claims,
            "'none' or 'fig7' unless the sweep has an axis optim.lr_z (Fig. 10 "
            "is entropy against the learning rate)",
        )


def validate_cell(cfg: ml_collections.ConfigDict) -> None:
    """Ranges and relations of one program's wikitext fields."""
    r = config_lib.require_number
    t, m = cfg.text, cfg.transformer
    r(cfg, "text.bptt", low=2, integer=True)
    r(cfg, "text.eval_batch_size", low=1, integer=True)
    r(cfg, "text.eval_chunks", low=0, integer=True)
    r(cfg, "transformer.num_layers", low=1, integer=True)
    r(cfg, "transformer.width", low=2, integer=True)
    config_lib.require(
        m.width % 2 == 0,
        "transformer.width",
        m.width,
        "even (sinusoidal positions pair sin and cos)",
    )
    r(cfg, "transformer.hidden", low=1, integer=True)
    r(cfg, "transformer.dropout", low=0, high=1, high_open=True)
    corpus = load(cfg)
    train_chunks = text.num_chunks(corpus.train.shape[0], t.bptt)
    eval_chunks = text.num_chunks(corpus.eval.shape[0], t.bptt)
    config_lib.require(
        train_chunks >= 1,
        "train.batch_size",
        cfg.train.batch_size,
        f"small enough for one chunk of {t.bptt} rows of the {t.train_split} "
        f"split ({corpus.train_tokens} tokens)",
    )
    config_lib.require(
        eval_chunks >= 1,
        "text.eval_batch_size",
        t.eval_batch_size,
        f"small enough for one chunk of {t.bptt} rows of the {t.eval_split} split",
    )
    r(cfg, "text.map_chunk", low=0, high=eval_chunks - 1, integer=True)
    r(cfg, "text.map_column", low=0, high=t.eval_batch_size - 1, integer=True)
    steps = list(t.map_steps)
    n, every = cfg.train.num_steps, cfg.train.log_every
    config_lib.require(
        all(isinstance(s, int) and 0 <= s <= n and s % every == 0 for s in steps),
        "text.map_steps",
        steps,
        f"a list of multiples of train.log_every = {every} in [0, "
        f"train.num_steps = {n}] (the maps are kept every log_every steps)",
    )


def load(cfg: ml_collections.ConfigDict) -> text.Corpus:
    t = cfg.text
    return text.load(
        t.path,
        train_split=t.train_split,
        eval_split=t.eval_split,
        batch_size=cfg.train.batch_size,
        eval_batch_size=t.eval_batch_size,
    )


def corpus_of(v: dict[str, Any]) -> text.Corpus:
    """The corpus a flattened config `v` names (its text.* and batch fields)."""
    return text.load(
        v["text.path"],
        train_split=v["text.train_split"],
        eval_split=v["text.eval_split"],
        batch_size=v["train.batch_size"],
        eval_batch_size=v["text.eval_batch_size"],
    )


def cell_bytes(v: dict[str, Any]) -> tuple[float, str]:
    """(bytes, what) of one program: per run, the parameters with their gradient and update,
    a step's activations (B x bptt positions x the vocabulary, logits and their gradient, and
    each layer's B x bptt x (4 width + hidden) and attention), one evaluation chunk's logits."""
    V = corpus_of(v).vocab_size
    B, T = v["train.batch_size"], v["text.bptt"]
    runs = memory.traced_runs(v, TRACED)
    per_run = _run_bytes(v, V)
    params = num_params(v, V)
    return BASELINE_BYTES + runs * per_run, (
        f"{runs} run(s) at once x a vocabulary of {V} types: {params} parameters, "
        f"{B} x {T} positions of logits"
    )


def num_params(v: dict[str, Any], V: int) -> int:
    """The model's parameters from a flat config and the vocabulary size V: the embedding and
    the decoder, and per layer the attention, the FFN and the LayerNorms."""
    d, h, L = v["transformer.width"], v["transformer.hidden"], v["transformer.num_layers"]
    return 2 * V * d + V + L * (4 * d * d + 2 * d * h + 10 * d)


def _run_bytes(v: dict[str, Any], V: int) -> float:
    """One run's bytes (`cell_bytes`) from a flat config and the vocabulary size V."""
    d, h, L = v["transformer.width"], v["transformer.hidden"], v["transformer.num_layers"]
    B, T = v["train.batch_size"], v["text.bptt"]
    params = num_params(v, V)
    step = 4 * params + 3 * B * T * V + L * B * T * (6 * d + 2 * h + 3 * T)
    evaluation = 2 * v["text.eval_batch_size"] * T * V
    return float(np.dtype(v["train.dtype"]).itemsize * (step + evaluation))


MEMORY_FIELDS = ("train.batch_size", "num_seeds", "text.bptt", "transformer.width")


# ----------------------------------------------------------------------------- the problem


def model_of(cfg: ml_collections.ConfigDict, vocab_size: int) -> model_lib.TextTransformer:
    prec = precision.of(cfg.train.dtype, cfg.model.dtype)
    sizes = cfg.transformer.to_dict()  # width, hidden, num_layers, dropout
    return model_lib.TextTransformer(
        vocab_size, **sizes, dtype=prec.dtype, param_dtype=prec.param_dtype
    )


def eval_chunk_indices(cfg: ml_collections.ConfigDict, corpus: text.Corpus) -> np.ndarray:
    """`text.eval_chunks` chunk indices spread evenly over the evaluation split (all of them
    when it is 0 or more than the split has)."""
    total = text.num_chunks(corpus.eval.shape[0], cfg.text.bptt)
    count = min(cfg.text.eval_chunks or total, total)
    return np.unique(np.linspace(0, total - 1, count).round().astype(np.int32))


def make_problem(cfg: ml_collections.ConfigDict, corpus: text.Corpus) -> training.Problem:
    """SGD on the training split's chunks in order (step mod chunks per epoch); hparams are the
    TRACED learning rates: lr_z for every parameter, lr_z * lr_y_over_lr_z for the FFNs."""
    net = model_of(cfg, corpus.vocab_size)
    bptt, column = cfg.text.bptt, cfg.text.map_column
    train_data, eval_data = jnp.asarray(corpus.train), jnp.asarray(corpus.eval)
    chunks_per_epoch = text.num_chunks(corpus.train.shape[0], bptt)
    eval_chunks = jnp.asarray(eval_chunk_indices(cfg, corpus))

    def init(key: jax.Array, hparams: Any) -> PyTree:
        return net.init({"params": key}, jnp.zeros((1, bptt), jnp.int32))["params"]

    def loss(
        params: PyTree, key: jax.Array, hparams: Any, step: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        inputs, targets = text.chunk(train_data, step % chunks_per_epoch, bptt)
        value, _ = net.apply(
            {"params": params},
            inputs.T,
            targets.T,
            False,
            method=model_lib.TextTransformer.loss,
            rngs={"dropout": key},
        )
        return value, {}

    def snapshot(params: PyTree, hparams: Any) -> dict[str, jax.Array]:
        def evaluate(i: jax.Array) -> tuple[jax.Array, jax.Array]:
            # one chunk at a time: B x bptt x V logits
            inputs, targets = text.chunk(eval_data, i, bptt)
            value, maps = net.apply(
                {"params": params}, inputs.T, targets.T, method=model_lib.TextTransformer.loss
            )
            # (flax types apply's result for mutable collections too: maps is an array here)
            return value, jax.vmap(model_lib.attention_entropy)(maps)  # type: ignore[arg-type]

        losses, entropies = jax.lax.map(evaluate, eval_chunks)  # (C,), (C, layers)
        inputs, _ = text.chunk(eval_data, cfg.text.map_chunk, bptt)
        _, maps = net.apply(
            {"params": params},
            inputs.T[column : column + 1],
            method=model_lib.TextTransformer.encode,
        )
        val_loss = losses.mean()
        return {
            "val_loss": val_loss,
            "val_perplexity": jnp.exp(val_loss),
            "entropy_layer0": entropies[:, 0].mean(),
            "entropy": entropies.mean(),
            "attention_maps": maps[:, 0],  # type: ignore[index]  # an array (flax's apply)
        }  # (layers, bptt, bptt)

    shapes = jax.eval_shape(init, jax.random.key(0), None)

    def learning_rates(hp: Mapping[str, jax.Array]) -> PyTree:
        lr, ffn = hp["optim.lr_z"], hp["optim.lr_z"] * hp["optim.lr_y_over_lr_z"]
        return jax.tree_util.tree_map_with_path(
            lambda path, _: ffn if any(getattr(k, "key", None) == "ffn" for k in path) else lr,
            shapes,
        )

    # On the CPU one run at a time on each device: a step is already three large decoder
    # matmuls, and vmapping runs only multiplies the temporaries (docs/performance.md).
    # Off the CPU, as many runs as fit in the device's memory (landscape/engine/backend.py).
    return training.Problem(
        init=init,
        loss=loss,
        learning_rates=learning_rates,
        snapshot=snapshot,
        loss_takes_step=True,
        runs_per_group=1,
        run_bytes=_run_bytes(config_lib.flatten(cfg), corpus.vocab_size),
    )


# ----------------------------------------------------------------------------- run


def run(
    cfg: ml_collections.ConfigDict,
    workdir: records.Workdir,
    progress: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """Train every structural cell (e.g. each depth) as one program of lrs x seeds; records,
    figures and the claims of `cfg.claims`."""
    cells = config_lib.structural_cells(cfg, TRACED)
    corpus = load(config_lib.with_fields(cfg, cells[0]))
    data = describe_data(cfg, corpus)
    if progress:
        progress(
            f"text: {data['path']}: trained on {data['train_split']} "
            f"({data['train_tokens']} tokens, {data['chunks_per_epoch']} chunks an epoch, "
            f"{data['epochs']:.2f} epochs), evaluated on {data['eval_split']} "
            f"({data['eval_tokens']} tokens, {data['eval_chunks']} chunks a snapshot); "
            f"vocabulary {data['vocab_size']} types ({data['eval_unk_fraction']:.1%} of "
            f"evaluation tokens are <unk>)"
        )
    grid = sweeps.Grid.make(
        config_lib.traced_axes(cfg, TRACED), np.arange(cfg.seed, cfg.seed + cfg.num_seeds)
    )
    groups: list[wikitext_claims.Group] = []
    for i, fields in enumerate(cells):
        cell = config_lib.with_fields(cfg, fields)
        corpus = load(cell)
        problem = make_problem(cell, corpus)
        if progress:
            prec = precision.of(cell.train.dtype, cell.model.dtype)
            progress(
                (
                    "structural cell " + ", ".join(f"{k}={v}" for k, v in fields.items()) + "\n"
                    if fields
                    else ""
                )
                + f"model: TextTransformer, {prec.name}\n"
                + params_table(problem.init(jax.random.key(0), {}))
            )
        result = sweeps.run_cell(
            problem, cell, TRACED, grid, fields=fields, workdir=workdir, progress=progress
        )
        groups.append((fields, result))
        workdir.save_arrays(**result.arrays(engine_experiment.cell_prefix(i, len(cells))))
    unigram = text.unigram_cross_entropy(corpus)
    workdir.save_table("final_by_run", wikitext_claims.final_rows(groups, unigram))
    figures = [
        str(p)
        for p in (
            wikitext_claims.plot_attention_maps(cfg, groups, workdir.figure_path("attention_maps")),
            wikitext_claims.plot_entropy_curves(
                groups, unigram, workdir.figure_path("entropy_curves")
            ),
        )
    ]
    if "optim.lr_z" in config_lib.flatten(cfg.sweep):
        figures.append(
            str(
                wikitext_claims.plot_entropy_vs_lr(
                    groups, unigram, workdir.figure_path("entropy_vs_lr")
                )
            )
        )
    claims = records.evaluated(
        cfg.claims, lambda: wikitext_claims.CLAIMS[cfg.claims](cfg, groups, unigram)
    )
    timing = training.run_timing([result for _, result in groups])
    if progress:
        progress(
            f"{timing['runs']} runs: compile {timing['compile_seconds']:.1f} s, "
            f"run {timing['run_seconds']:.1f} s"
        )
    return workdir.finish(
        claims,
        progress,
        timing=timing,
        figures=figures,
        data=dict(data, unigram_cross_entropy=unigram),
    )


def describe_data(cfg: ml_collections.ConfigDict, corpus: text.Corpus) -> dict[str, Any]:
    """What the run trained and evaluated on, for the progress line and summary.json."""
    per_epoch = text.num_chunks(corpus.train.shape[0], cfg.text.bptt)
    return dict(
        path=corpus.path,
        train_split=corpus.train_split,
        eval_split=corpus.eval_split,
        vocab_size=corpus.vocab_size,
        train_tokens=corpus.train_tokens,
        eval_tokens=corpus.eval_tokens,
        chunks_per_epoch=per_epoch,
        epochs=cfg.train.num_steps / per_epoch,
        eval_chunks=len(eval_chunk_indices(cfg, corpus)),
        eval_unk_fraction=corpus.unk_fraction("eval"),
    )
