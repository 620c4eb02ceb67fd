"""Scan & Snap on real text (Figs. 7, 10; notes/scan_snap.md §2.5, §3.7, §5.7, §5.10).

`experiment = "wikitext"`: `model.TextTransformer` trained with plain SGD on a WikiText id stream
(`text.py`) inside the compiled run, with its own learning rate for the FFNs; logs the validation
loss, attention entropies and maps; claims `fig7` and `fig10`. Details: docs/design/scan_snap.md.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import memory, plotting, precision, records, sweeps, training
from landscape.point import params_table
from landscape.scan_snap import model as model_lib
from landscape.scan_snap import text
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
FREEZE_SHARE = 0.25  # fig7: the last third's entropy range is under this share of its fall
FALL_SHARE = 0.9  # fig7: the final entropy is under this share of the initial one
Group = tuple[dict[str, Any], training.RunResult]  # a structural cell's fields and its runs
_NOT_CONSTANT = "scheduled (NOT constant: the claim is about a constant lr)"


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
        cfg.claims in CLAIM_SETS + ("none",),
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


_BASELINE_BYTES = 6e8


def cell_bytes(v: dict[str, Any]) -> tuple[float, str]:
    """(bytes, what) of one program: per run, the parameters with their gradient and update,
    a step's activations (B x bptt positions x the vocabulary, logits and their gradient, and
    each layer's B x bptt x (4 width + hidden) and attention), one evaluation chunk's logits."""
    corpus = text.load(
        v["text.path"],
        train_split=v["text.train_split"],
        eval_split=v["text.eval_split"],
        batch_size=v["train.batch_size"],
        eval_batch_size=v["text.eval_batch_size"],
    )
    V, d, h, L = (
        corpus.vocab_size,
        v["transformer.width"],
        v["transformer.hidden"],
        v["transformer.num_layers"],
    )
    B, T = v["train.batch_size"], v["text.bptt"]
    runs = memory.traced_runs(v, TRACED)
    per_run = _run_bytes(v, V)
    params = 2 * V * d + V + L * (4 * d * d + 2 * d * h + 10 * d)
    return _BASELINE_BYTES + runs * per_run, (
        f"{runs} run(s) at once x a vocabulary of {V} types: {params} parameters, "
        f"{B} x {T} positions of logits"
    )


def _run_bytes(v: dict[str, Any], V: int) -> float:
    """One run's bytes (`cell_bytes`) from a flat config and the vocabulary size V."""
    d, h, L = v["transformer.width"], v["transformer.hidden"], v["transformer.num_layers"]
    B, T = v["train.batch_size"], v["text.bptt"]
    params = 2 * V * d + V + L * (4 * d * d + 2 * d * h + 10 * d)
    step = 4 * params + 3 * B * T * V + L * B * T * (6 * d + 2 * h + 3 * T)
    evaluation = 2 * v["text.eval_batch_size"] * T * V
    return float(np.dtype(v["train.dtype"]).itemsize * (step + evaluation))


MEMORY_FIELDS = ("train.batch_size", "num_seeds", "text.bptt", "transformer.width")


# ----------------------------------------------------------------------------- the problem


def model_of(cfg: ml_collections.ConfigDict, vocab_size: int) -> model_lib.TextTransformer:
    prec = precision.of(cfg.train.dtype, cfg.model.dtype)
    m = cfg.transformer
    return model_lib.TextTransformer(
        vocab_size,
        width=m.width,
        hidden=m.hidden,
        num_layers=m.num_layers,
        dropout=m.dropout,
        dtype=prec.dtype,
        param_dtype=prec.param_dtype,
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
    # matmuls, and vmapping 25 runs only multiplies the temporaries (2 CPU cores, Fig. 10's 25
    # runs x 40 steps: 230 ms a run-step vmapped, 149 ms one at a time; 160 ms for a single run).
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
    groups: list[Group] = []
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
        workdir.save_arrays(**result.arrays(f"cell{i}_" if len(cells) > 1 else ""))
    unigram = text.unigram_cross_entropy(corpus)
    workdir.save_table("final_by_run", final_rows(groups, unigram))
    figures = [
        str(p)
        for p in (
            plot_attention_maps(cfg, groups, workdir.figure_path("attention_maps")),
            plot_entropy_curves(groups, unigram, workdir.figure_path("entropy_curves")),
        )
    ]
    if "optim.lr_z" in config_lib.flatten(cfg.sweep):
        figures.append(
            str(plot_entropy_vs_lr(groups, unigram, workdir.figure_path("entropy_vs_lr")))
        )
    claims = records.evaluated(cfg.claims, lambda: CLAIMS[cfg.claims](cfg, groups, unigram))
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


def _layers(fields: Mapping[str, Any]) -> str:
    """ "3 layers" for a depth-sweep cell, "" for a cell without one."""
    n = fields.get("transformer.num_layers")
    return "" if n is None else f"{n} layer{'s' if n > 1 else ''}"


def final_rows(groups: list[Group], unigram: float) -> list[dict[str, Any]]:
    """One row per run: its cell, lr, seed, final entropy, validation loss, whether it stayed
    finite, and whether it learnt (finite and below the unigram loss) (final_by_run.csv)."""
    rows = []
    for fields, result in groups:
        snaps = result.snapshots
        learnt = _learnt(result, unigram)
        for r in range(result.num_runs):
            rows.append(
                dict(
                    fields,
                    lr=float(result.hparams["optim.lr_z"][r]),
                    ffn_lr=float(
                        result.hparams["optim.lr_z"][r] * result.hparams["optim.lr_y_over_lr_z"][r]
                    ),
                    seed=int(result.seeds[r]),
                    entropy_layer0=float(snaps["entropy_layer0"][r, -1]),
                    entropy=float(snaps["entropy"][r, -1]),
                    val_loss=float(snaps["val_loss"][r, -1]),
                    val_perplexity=float(snaps["val_perplexity"][r, -1]),
                    first_nonfinite_step=int(result.first_nonfinite_step[r]),
                    learnt=bool(learnt[r]),
                )
            )
    return rows


# ----------------------------------------------------------------------------- claims


def initial_loss(vocab_size: int, width: int) -> float:
    """E[loss] at initialisation: logits = LN output (norm^2 = width) . decoder column
    U(-0.1, 0.1), so each logit has variance width * 0.01 / 3 and E[logsumexp] =
    ln V + width / 600 for a large vocabulary (the target's logit has mean 0)."""
    return math.log(vocab_size) + width * 0.01 / 6


def _learnt(result: training.RunResult, unigram: float) -> np.ndarray:
    """Per run: finite throughout, and a final validation loss below the unigram model's."""
    loss = result.snapshots["val_loss"][:, -1]
    return (result.first_nonfinite_step < 0) & np.isfinite(loss) & (loss < unigram)


def _sanity(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float, every_run_learns: bool
) -> list[records.Claim]:
    """The initial loss against its closed form; with `every_run_learns` (Fig. 7: one lr per
    depth), that every run ends below the unigram loss (Fig. 10 marks the runs that do not)."""
    out = []
    for fields, result in groups:
        at = f" ({_layers(fields)})" if _layers(fields) else ""
        V = result.final_params["decoder"]["kernel"].shape[-1]
        width = result.final_params["decoder"]["kernel"].shape[-2]
        start = float(np.mean(result.snapshots["val_loss"][:, 0]))
        expected = initial_loss(V, width)
        out.append(
            records.sanity(
                f"validation loss at step 0 = ln V + width/600 = {expected:.3f}{at} (decoder "
                "U(-0.1, 0.1) on a LayerNorm output)",
                start,
                f"within 0.2 of {expected:.3f}",
                abs(start - expected) < 0.2,
                "notes §3.7",
            )
        )
        if not every_run_learns:
            continue
        learnt = _learnt(result, unigram)
        out.append(
            records.sanity(
                f"every run learns{at}: finite, final validation loss below the unigram model's "
                f"{unigram:.3f} (a sparse model, not a broken one)",
                np.round(result.snapshots["val_loss"][:, -1], 3).tolist(),
                f"< {unigram:.3f}",
                bool(learnt.all()),
                "issue 15",
            )
        )
    return out


def claims_fig7(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float
) -> list[records.Claim]:
    """Fig. 7 (notes §5.7): per depth, layer 0's mean attention entropy falls from step 0 and
    freezes over the last third of training while the lr stays constant."""
    out = _sanity(cfg, groups, unigram, every_run_learns=True)
    constant = cfg.optim.schedule == "constant"
    for fields, result in groups:
        at = _layers(fields) or _layers({"transformer.num_layers": cfg.transformer.num_layers})
        steps = result.snapshot_steps
        entropy = result.snapshots["entropy_layer0"]  # (R, S)
        start, end = entropy[:, 0], entropy[:, -1]
        out.append(
            records.claim(
                f"Fig. 7, {at}: layer 0's mean attention entropy falls over training (final below "
                f"{FALL_SHARE:g} x its value at step 0)",
                {"step 0": np.round(start, 3).tolist(), "final": np.round(end, 3).tolist()},
                f"final < {FALL_SHARE:g} x step 0 in every run",
                bool(np.all(end < FALL_SHARE * start)),
                "Fig. 7, notes §5.7",
            )
        )
        last_third = steps >= steps[-1] * 2 / 3
        drift = np.ptp(entropy[:, last_third], axis=1)
        fall = start - end
        fell = end < FALL_SHARE * start
        out.append(
            records.claim(
                f"Fig. 7, {at}: the entropy freezes while the lr is "
                f"{'constant' if constant else _NOT_CONSTANT}"
                f": its range over the last third of training (steps >= {int(steps[-1] * 2 / 3)}) "
                f"is under {FREEZE_SHARE:g} x its fall",
                {"range": np.round(drift, 4).tolist(), "fall": np.round(fall, 3).tolist()},
                f"range < {FREEZE_SHARE:g} x fall, after a fall (final < {FALL_SHARE:g} x step 0), "
                "in every run",
                bool(constant and np.all(fell & (drift < FREEZE_SHARE * fall))),
                "Fig. 7, notes §5.7",
            )
        )
    return out


def entropy_by_lr(result: training.RunResult, unigram: float) -> list[dict[str, Any]]:
    """Per lr (ascending): the final layer-0 entropy's mean and std (ddof 1) over the runs that
    learnt (`_learnt`), and how many runs did not."""
    lrs = result.hparams["optim.lr_z"]
    learnt = _learnt(result, unigram)
    entropy = result.snapshots["entropy_layer0"][:, -1]
    rows = []
    for lr in np.unique(lrs):
        runs = np.isclose(lrs, lr)
        good = entropy[runs & learnt]
        rows.append(
            dict(
                lr=float(lr),
                runs=int(runs.sum()),
                learnt=int(good.size),
                mean=float(good.mean()) if good.size else math.nan,
                std=float(good.std(ddof=1)) if good.size > 1 else math.nan,
                val_loss=float(
                    np.nanmean(np.where(runs & learnt, result.snapshots["val_loss"][:, -1], np.nan))
                )
                if good.size
                else math.nan,
            )
        )
    return rows


def claims_fig10(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float
) -> list[records.Claim]:
    """Fig. 10 (notes §5.10): the final mean attention entropy falls as the (unified) lr rises,
    over the lrs whose runs all learnt; the lrs with failed runs are reported, not dropped."""
    out = _sanity(cfg, groups, unigram, every_run_learns=False)
    for fields, result in groups:
        at = f" ({_layers(fields)})" if _layers(fields) else ""
        rows = entropy_by_lr(result, unigram)
        stable = [r for r in rows if r["learnt"] == r["runs"]]
        failed = {
            r["lr"]: f"{r['runs'] - r['learnt']}/{r['runs']} failed"
            for r in rows
            if r["learnt"] < r["runs"]
        }
        means = [r["mean"] for r in stable]
        measured: dict[str, Any] = {
            f"lr {r['lr']:g}": f"{r['mean']:.3f} +- {r['std']:.3f}" for r in stable
        }
        if failed:
            measured["not learnt (excluded)"] = {f"lr {k:g}": v for k, v in failed.items()}
        out.append(
            records.claim(
                f"Fig. 10{at}: the final mean attention entropy falls as the lr rises (over the "
                f"lrs whose runs all learnt: {[r['lr'] for r in stable]})",
                measured,
                "decreasing in lr, at least 3 stable lrs",
                len(means) >= 3 and bool(np.all(np.diff(means) < 0)),
                "Fig. 10, notes §5.10",
            )
        )
    return out


def _no_claims(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float
) -> list[records.Claim]:
    return []


CLAIMS: dict[
    str, Callable[[ml_collections.ConfigDict, list[Group], float], list[records.Claim]]
] = {
    "fig7": claims_fig7,
    "fig10": claims_fig10,
    "none": _no_claims,
}


# ----------------------------------------------------------------------------- figures


def plot_attention_maps(
    cfg: ml_collections.ConfigDict, groups: list[Group], path: pathlib.Path
) -> pathlib.Path:
    """Fig. 7: layer 0's attention on the fixed evaluation chunk (rows: depth; columns: the
    map steps), first run of each cell; one colour scale."""
    steps_wanted = list(cfg.text.map_steps)
    fig, axes = plotting.subplots(len(groups), len(steps_wanted), width=2.6, height=2.5)
    image = None
    for row, (_, result) in enumerate(groups):
        steps = list(result.snapshot_steps)
        layers = result.snapshots["attention_maps"].shape[2]
        for col, step in enumerate(steps_wanted):
            ax = axes[row, col]
            a = result.snapshots["attention_maps"][0, steps.index(step), 0]
            image = ax.imshow(a, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            h = float(model_lib.attention_entropy(a[None]))
            ax.set_title(
                f"{layers} layer{'s' if layers > 1 else ''}, iter {step}\nentropy {h:.2f}",
                fontsize=8,
            )
            ax.set_xticks([]), ax.set_yticks([])
        axes[row, 0].set_ylabel("query position")
        assert image is not None  # subplots needs a column: map_steps is not empty
        fig.colorbar(image, ax=axes[row, -1], fraction=0.046, pad=0.04)
    for ax in axes[-1]:
        ax.set_xlabel("key position")
    return plotting.save(fig, path)


def plot_entropy_curves(groups: list[Group], unigram: float, path: pathlib.Path) -> pathlib.Path:
    """Layer 0's mean attention entropy and the validation loss against the step, per cell and
    lr (mean over seeds with a min-max band); the unigram loss dashed."""
    fig, axes = plotting.subplots(1, 2, width=4.4, height=3.2)
    for fields, result in groups:
        steps = result.snapshot_steps
        lrs = result.hparams["optim.lr_z"]
        for lr in np.unique(lrs):
            runs = np.isclose(lrs, lr)
            label = (f"{_layers(fields)}, " if _layers(fields) else "") + f"lr {lr:g}"
            plotting.mean_and_band(
                axes[0, 0], steps, result.snapshots["entropy_layer0"][runs], label=label
            )
            plotting.mean_and_band(
                axes[0, 1], steps, result.snapshots["val_loss"][runs], label=label
            )
    axes[0, 1].axhline(unigram, color="gray", linestyle="--", linewidth=1, label="unigram")
    axes[0, 0].set(xlabel="iteration", ylabel="layer-0 attention entropy (nats)")
    axes[0, 1].set(xlabel="iteration", ylabel="validation loss (nats)")
    axes[0, 0].legend(fontsize=7)
    axes[0, 1].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_entropy_vs_lr(groups: list[Group], unigram: float, path: pathlib.Path) -> pathlib.Path:
    """Fig. 10: the final mean attention entropy (mean +- std over the runs that learnt) against
    the lr, every run a faint dot; runs that did not learn (non-finite, or a validation loss
    above the unigram model's) a red x, so no lr is dropped silently. Right: validation loss."""
    fig, axes = plotting.subplots(1, 2, width=4.2, height=3.2)
    grid_lrs: set[float] = set()
    for fields, result in groups:
        rows = entropy_by_lr(result, unigram)
        label = _layers(fields) or "runs that learnt"
        learnt = _learnt(result, unigram)
        lrs = result.hparams["optim.lr_z"]
        grid_lrs.update(float(v) for v in lrs)
        finals = {
            "entropy_layer0": result.snapshots["entropy_layer0"][:, -1],
            "val_loss": result.snapshots["val_loss"][:, -1],
        }
        for ax, key in zip(axes[0], finals, strict=True):
            ax.plot(lrs[learnt], finals[key][learnt], ".", color="gray", alpha=0.5)
            failed = ~learnt & np.isfinite(finals[key])
            if failed.any():
                ax.plot(
                    lrs[failed],
                    finals[key][failed],
                    "x",
                    color="red",
                    label=f"did not learn ({int((~learnt).sum())} runs)",
                )
        stable = [r for r in rows if r["learnt"]]
        axes[0, 0].errorbar(
            [r["lr"] for r in stable],
            [r["mean"] for r in stable],
            yerr=[0 if math.isnan(r["std"]) else r["std"] for r in stable],
            marker="o",
            capsize=3,
            label=label + " (mean +- std)",
        )
        axes[0, 1].plot(
            [r["lr"] for r in stable],
            [r["val_loss"] for r in stable],
            marker="o",
            label=label + " (mean)",
        )
    axes[0, 1].axhline(unigram, color="gray", linestyle="--", linewidth=1, label="unigram")
    ticks = sorted(grid_lrs)
    for ax in axes[0]:
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("learning rate $\\eta$")
        ax.legend(fontsize=7)
    axes[0, 0].set(
        ylabel="final attention entropy, layer 0 (nats)",
        title="Fig. 10: entropy against the learning rate",
    )
    axes[0, 1].set(ylabel="final validation loss (nats)")
    return plotting.save(fig, path)
