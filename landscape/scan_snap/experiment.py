"""Scan & Snap experiments: configs -> compiled sweeps -> records, figures and checked claims.

`run(config, workdir)` is what `python -m experiments.scan_snap` calls. A config's `sweep` mirrors
the config's nesting and holds lists of values, e.g. `sweep.optim.lr_z = [0.5, 1.0]`. Fields in
`TRACED` (learning rates) are vmapped in one program;
any other field (e.g. `data.num_last`, which changes M) is a structural axis: one compiled program
per value.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape import config as config_lib
from landscape import plotting, precision, records, sweeps, training
from landscape.point import params_table
from landscape.scan_snap import model as model_lib
from landscape.scan_snap import task as task_lib
from landscape.scan_snap import theory, wikitext

TRACED = ("optim.lr_z", "optim.lr_y_over_lr_z")
CLAIM_SETS = ("fig4", "fig5", "fig6") + wikitext.CLAIM_SETS + ("none",)
EXPERIMENTS = ("train", "theory", "wikitext")


def default_config() -> ml_collections.ConfigDict:
    """Every field an experiment config may set, with defaults (the Syn-Small values, notes §7.4)."""
    c = ml_collections.ConfigDict()
    c.name = "scan_snap"
    c.experiment = "train"  # train (Y/Z model) | theory | wikitext (wikitext.py)
    c.seed = 0  # runs use seeds seed, seed+1, ..., seed+num_seeds-1
    c.num_seeds = 1
    c.data = dict(
        num_last=2,
        num_next_per_last=1,
        num_common=10,
        num_common_per_last=0,
        num_distinct_per_next=10,
        common_unnormalized_prob=1.0,
        distinct_unnormalized_min=0.1,
        distinct_unnormalized_max=1.0,
        seq_len=128,
    )
    c.model = dict(
        attend_to_query=False, normalize=True, residual=False, init="zeros", dtype=""
    )  # computation dtype ("" = train.dtype; half = autocast)
    c.optim = training.default_optim_config()
    c.optim.lr_z = 1.0  # eta_Z
    c.optim.lr_y_over_lr_z = 1.0  # eta_Y / eta_Z
    c.train = dict(
        batch_size=128,
        num_steps=100,
        dtype="float32",
        log_every=2,
        chunk_steps=0,
        on_nonfinite="stop",
        **training.default_averaging(),
    )
    c.eval = dict(
        snapshot_attention=True,  # keep c_n (K x M) every log_every steps (arrays.npz)
        plot_steps=[0, 2, 4, 6, 8, 10, -1],  # -1 = final
        plot_classes=2,
        plot_common=10,
        plot_distinct=10,
    )
    c.sweep = ml_collections.ConfigDict()  # e.g. {"optim": {"lr_z": [...]}, "data": {...}}
    c.claims = "none"  # fig4 | fig5 | fig6 | fig7 | fig10 | none
    c.theory = dict(
        M=1000,
        K=10,
        rho0=1.0,
        fig3_eta_z=0.5,
        fig3_eta_y=[0.1, 0.2, 0.5, 1.0, 2.0],
        fig8_eta_y=[0.1, 0.5, 1.0],
        fig8_steps=2000,
        fig9_ratios=[1.0, 2.0, 5.0],
        fig9_eta_z=[0.1, 0.5, 1.0],
        t_max=1e5,
    )
    c.update(wikitext.default_fields())  # experiment = "wikitext": text, transformer
    return c


SWEEPABLE = (
    "optim.lr_z",
    "optim.lr_y_over_lr_z",
    "data.num_last",
    "data.num_next_per_last",
    "data.seq_len",
    "train.batch_size",
) + wikitext.SWEEPABLE


def validate(cfg: ml_collections.ConfigDict) -> None:
    """One clear ConfigError for the first field that is unknown, of the wrong kind, out of range
    or inconsistent with another, in any program of the sweep; nothing is built."""
    config_lib.validate_cells(
        cfg, default_config(), TRACED, _validate_cell, sweepable=SWEEPABLE, before=_validate_run
    )
    config_lib.check_memory(memory_estimate(cfg))  # before compiling: shape arithmetic


def _validate_run(cfg) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims."""
    config_lib.require_text(cfg, "name")
    config_lib.require_choice(cfg, "experiment", EXPERIMENTS)
    config_lib.require_choice(cfg, "claims", CLAIM_SETS)
    config_lib.require_seeds(cfg)
    if cfg.experiment == "wikitext":
        return wikitext.validate_run(cfg)
    config_lib.require(
        cfg.claims not in wikitext.CLAIM_SETS,
        "claims",
        cfg.claims,
        f"one of fig4, fig5, fig6, none for experiment = {cfg.experiment!r} "
        f"({cfg.claims} is experiment = 'wikitext')",
    )
    if cfg.experiment == "theory":
        config_lib.require_empty_sweep(cfg, "experiment = 'theory'")
        config_lib.require(
            cfg.claims == "none",
            "claims",
            cfg.claims,
            "'none' for experiment = 'theory' (its claims are always checked)",
        )
        return
    axes = config_lib.flatten(cfg.sweep)
    structural = [a for a in axes if a not in TRACED]
    if cfg.claims in ("fig4", "fig5"):
        config_lib.require(
            not structural,
            "claims",
            cfg.claims,
            f"'none' or 'fig6' when the sweep has structural axes "
            f"({', '.join(structural)}): the {cfg.claims} claims read one program",
        )
        config_lib.require(
            cfg.eval.snapshot_attention,
            "eval.snapshot_attention",
            False,
            f"True for claims = {cfg.claims!r} (its claims read the attention)",
        )
    if cfg.claims == "fig6":
        for axis in TRACED:
            config_lib.require(
                axis in axes,
                "claims",
                cfg.claims,
                f"'none' unless the sweep has an axis {axis} (the fig6 table is "
                "entropy over optim.lr_z x optim.lr_y_over_lr_z)",
            )


def _validate_cell(cfg) -> None:
    """Ranges and relations of every field of one program's config."""
    r = config_lib.require_number
    _validate_theory(cfg)
    config_lib.require_choice(cfg, "model.dtype", precision.COMPUTE_DTYPES)
    training.validate_optim(cfg)
    r(cfg, "optim.lr_z", low=0, low_open=True)
    r(cfg, "optim.lr_y_over_lr_z", low=0, low_open=True)
    config_lib.require_training_steps(cfg)
    config_lib.require_schedule(cfg)
    config_lib.require_chunking(cfg)
    config_lib.require_choice(cfg, "train.dtype", ("float32", "float64"))
    config_lib.require_nonfinite_policy(cfg)
    training.validate_averaging(cfg)
    if cfg.experiment == "wikitext":
        return wikitext.validate_cell(cfg)
    for f in ("num_last", "num_next_per_last", "num_distinct_per_next"):
        r(cfg, f"data.{f}", low=1, integer=True)
    for f in ("num_common", "num_common_per_last"):
        r(cfg, f"data.{f}", low=0, integer=True)
    r(cfg, "data.common_unnormalized_prob", low=0, low_open=True)
    r(cfg, "data.distinct_unnormalized_min", low=0, low_open=True)
    r(cfg, "data.distinct_unnormalized_max", low=cfg.data.distinct_unnormalized_min)
    r(cfg, "data.seq_len", low=2, integer=True)
    config_lib.require_choice(cfg, "model.init", model_lib.INITS)
    e, n = cfg.eval, cfg.train.num_steps
    steps = list(e.plot_steps)
    config_lib.require(
        all(s == -1 or 0 <= s <= n for s in steps),
        "eval.plot_steps",
        steps,
        f"a list of steps in [0, train.num_steps = {n}] or -1 (the final step)",
    )
    config_lib.require(
        not e.snapshot_attention or any(s == -1 or s % cfg.train.log_every == 0 for s in steps),
        "eval.plot_steps",
        steps,
        f"a list with -1 (the final step) or a multiple of train.log_every = "
        f"{cfg.train.log_every}: the attention is kept every log_every steps",
    )
    r(cfg, "eval.plot_classes", low=1, integer=True)
    r(cfg, "eval.plot_common", low=0, integer=True)
    r(cfg, "eval.plot_distinct", low=0, integer=True)
    config_lib.require(
        e.plot_common + e.plot_distinct > 0,
        "eval.plot_distinct",
        e.plot_distinct,
        "> 0 when eval.plot_common = 0 (a plot needs a token)",
    )


def _validate_theory(cfg):
    r = config_lib.require_number
    r(cfg, "theory.M", low=3, integer=True)
    r(cfg, "theory.K", low=1, high=cfg.theory.M, integer=True)
    r(cfg, "theory.rho0", low=0, low_open=True)
    r(cfg, "theory.fig3_eta_z", low=0, low_open=True)
    r(cfg, "theory.fig8_steps", low=1, integer=True)
    r(cfg, "theory.t_max", low=1)
    for field in ("fig3_eta_y", "fig8_eta_y", "fig9_ratios", "fig9_eta_z"):
        config_lib.require_numbers(cfg, f"theory.{field}", low=0, low_open=True)


# ----------------------------------------------------------------------------- memory


_BASELINE_BYTES = 6e8  # the interpreter, JAX and XLA's compiled programs
_MEMORY_FIELDS = (
    "train.batch_size",
    "data.seq_len",
    "num_seeds",
    "data.num_distinct_per_next",
    "data.num_common",
    "data.num_last",
    "data.num_next_per_last",
)


def _cell_bytes(v: dict) -> tuple[float, str]:
    """(bytes, what) of one program: every run vmapped at once, each with its batch's sampler
    (B x L x the class support, compared against the CDF) and forward / backward (B x L, B x M),
    its Y, Z (M x M) with gradients and momentum; the attention snapshots kept on the host."""
    K = v["data.num_last"] * v["data.num_next_per_last"]
    support = v["data.num_common"] + v["data.num_common_per_last"] + v["data.num_distinct_per_next"]
    M = (
        v["data.num_common"]
        + v["data.num_last"] * v["data.num_common_per_last"]
        + K * v["data.num_distinct_per_next"]
        + v["data.num_last"]
        + K
    )
    B, L = v["train.batch_size"], v["data.seq_len"]
    size = np.dtype(v["train.dtype"]).itemsize
    runs = config_lib.traced_runs(v, TRACED)
    step = runs * (B * (L * (support + 8) + 8 * M) * size + 10 * M * M * size)
    snapshots = v["train.num_steps"] // v["train.log_every"] + 1
    kept = runs * snapshots * (K * M * 4 * bool(v["eval.snapshot_attention"]) + 16)
    return _BASELINE_BYTES + step + kept, (
        f"{runs} run(s) at once x a batch of {B} sequences of {L} tokens over M = {M} ids "
        f"(B x L x {support} support, B x M features, M x M parameters)"
    )


def memory_estimate(cfg) -> config_lib.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`; the theory
    figures (closed forms in NumPy) need the baseline only."""
    if cfg.experiment == "theory":
        return config_lib.MemoryEstimate(_BASELINE_BYTES, "the closed forms", "theory.M")
    if cfg.experiment == "wikitext":
        return config_lib.estimate_memory(
            cfg, TRACED, wikitext.cell_bytes, wikitext.MEMORY_FIELDS, default_config
        )
    return config_lib.estimate_memory(cfg, TRACED, _cell_bytes, _MEMORY_FIELDS, default_config)


# ----------------------------------------------------------------------------- training problem


def make_task(cfg) -> task_lib.SequenceClasses:
    return task_lib.sequence_classes(**cfg.data)


def model_of(cfg, task: task_lib.SequenceClasses) -> model_lib.YZModel:
    """The Y/Z model of a config, at precision.of(train.dtype, model.dtype)."""
    prec = precision.of(cfg.train.dtype, cfg.model.dtype)
    return model_lib.YZModel(
        task.num_tokens,
        attend_to_query=cfg.model.attend_to_query,
        residual=cfg.model.residual,
        normalize=cfg.model.normalize,
        initializer=cfg.model.init,
        dtype=prec.dtype,
        param_dtype=prec.param_dtype,
    )


def init_params(cfg, task: task_lib.SequenceClasses, key):
    return model_lib.init_params(key, task.num_tokens, cfg.model.init, jnp.dtype(cfg.train.dtype))


def make_problem(cfg, task: task_lib.SequenceClasses) -> training.Problem:
    """The Y/Z model on sampled sequence classes; hparams are the TRACED learning rates."""
    model = model_of(cfg, task)
    batch_size, keep_attention = cfg.train.batch_size, cfg.eval.snapshot_attention

    def loss(params, key, hparams):
        context, query, label, _ = task.sample(key, batch_size)
        return model.apply(
            {"params": params}, context, query, label, method=model_lib.YZModel.loss
        ), {}

    def snapshot(params, hparams):
        c_KM = task_lib.attention_weights(params["Z"], task)
        out = {
            "distinct_entropy": task_lib.distinct_entropy(c_KM, task).mean(),
            "population_loss": model.apply(
                {"params": params}, task, method=model_lib.YZModel.population_loss
            ),
        }
        if keep_attention:
            out["attention"] = c_KM
        return out

    return training.Problem(
        init=lambda key, hparams: init_params(cfg, task, key),
        loss=loss,
        learning_rates=lambda hp: {
            "Y": hp["optim.lr_z"] * hp["optim.lr_y_over_lr_z"],
            "Z": hp["optim.lr_z"],
        },
        snapshot=snapshot,
    )


def structural_cells(cfg) -> list[dict[str, Any]]:
    """The product of the sweep's structural (non-traced) axes: one compiled program each."""
    return config_lib.structural_cells(cfg, TRACED)


def train_group(cfg, fields: dict[str, Any], workdir=None, progress=print):
    """Train one structural cell: every traced-sweep value x seed as one sharded program."""
    cell_cfg = config_lib.with_fields(cfg, fields)
    task = make_task(cell_cfg)
    grid = sweeps.Grid.make(
        config_lib.traced_axes(cfg, TRACED), np.arange(cfg.seed, cfg.seed + cfg.num_seeds)
    )
    base = {k: config_lib.get(cfg, k) for k in TRACED}
    result = sweeps.run(
        make_problem(cell_cfg, task),
        cell_cfg.optim,
        base,
        grid,
        dtype=np.dtype(cfg.train.dtype),
        progress=progress,
        workdir=workdir,
        record_tags=fields,
        **sweeps.train_options(cfg),
    )
    return task, grid, result


def run(cfg, workdir: records.Workdir, progress=print) -> dict[str, Any]:
    """Run the experiment of `cfg`, write its records, figures and summary; return the summary."""
    validate(cfg)
    workdir.write_config(cfg)
    if cfg.experiment == "theory":
        return run_theory(cfg, workdir, progress)
    if cfg.experiment == "wikitext":
        return wikitext.run(cfg, workdir, progress)
    groups, cells = [], structural_cells(cfg)
    if progress:
        first = config_lib.with_fields(cfg, cells[0])
        progress(
            f"model: YZModel, {precision.of(cfg.train.dtype, cfg.model.dtype).name}\n"
            + params_table(init_params(first, make_task(first), jax.random.key(cfg.seed)))
        )
    for i, fields in enumerate(cells):
        if fields and progress:
            progress("structural cell " + ", ".join(f"{k}={v}" for k, v in fields.items()))
        task, grid, result = train_group(cfg, fields, workdir, progress)
        groups.append((fields, task, grid, result))
        prefix = f"cell{i}_" if len(cells) > 1 else ""
        workdir.save_arrays(**_arrays(result, task, prefix))
    figures = _figures(cfg, groups, workdir)
    claims = CLAIMS[cfg.claims](cfg, groups)
    timing = training.run_timing([g[3] for g in groups])
    if progress:
        progress(
            f"{timing['runs']} runs: compile {timing['compile_seconds']:.1f} s, "
            f"run {timing['run_seconds']:.2f} s"
        )
    return workdir.finish(claims, progress, timing=timing, figures=figures)


def _arrays(result: training.RunResult, task, prefix: str) -> dict[str, np.ndarray]:
    arrays = result.arrays(prefix)
    arrays[f"{prefix}class_probs"] = task.class_probs
    arrays[f"{prefix}final_Z_query_rows"] = result.final_params["Z"][:, np.asarray(task.last_token)]
    return arrays


# ----------------------------------------------------------------------------- claims


def _cells(grid, result):
    """[(traced values dict, run indices)] for each traced-sweep cell (seeds pooled)."""
    hp = {k: np.asarray(v) for k, v in result.hparams.items()}
    keys = sorted({tuple(float(hp[k][r]) for k in TRACED) for r in range(result.num_runs)})
    return [
        (
            dict(zip(TRACED, key)),
            np.flatnonzero(np.all([np.isclose(hp[k], v) for k, v in zip(TRACED, key)], axis=0)),
        )
        for key in keys
    ]


def _first_below(losses: np.ndarray, threshold: float) -> np.ndarray:
    """Per run, the first step whose batch loss is below `threshold`; inf for a run that never
    gets there (a NaN loss is never below)."""
    below = losses < threshold
    return np.where(below.any(axis=1), below.argmax(axis=1), np.inf)


def _steps_or_never(first: np.ndarray) -> list:
    return [int(s) if np.isfinite(s) else "never" for s in first]


def _missing(statement: str, what: str, expected: Any, source: str) -> records.Claim:
    """A claim whose inputs the run lacks: reported NOT reproduced, saying what is missing."""
    return records.claim(statement, f"not measured: {what}", expected, False, source)


def claims_fig4(cfg, groups) -> list[records.Claim]:
    """Notes §7.4 acceptance for Syn-Small (Fig. 4 left: ratio 1; right: ratio 10)."""
    ((_, task, grid, result),) = groups
    out = []
    src = "notes §7.4"
    ln_m = math.log(task.num_tokens)
    start = float(np.abs(result.losses[:, 0] - ln_m).max())
    out.append(
        records.sanity(
            f"loss at step 0 equals ln M = {ln_m:.4f} (softmax over all M ids)",
            start,
            "< 1e-4",
            start < 1e-4,
            src,
        )
    )
    by_ratio = {
        cell["optim.lr_y_over_lr_z"]: runs
        for cell, runs in _cells(grid, result)
        if np.isclose(cell["optim.lr_z"], 1.0)
    }
    attention = result.snapshots["attention"][:, -1]  # (R, K, M) final c_n
    entropy = result.snapshots["distinct_entropy"][:, -1]  # (R,)
    distinct = task.is_distinct[0]
    common = task.is_common
    if 1.0 not in by_ratio and 10.0 not in by_ratio:
        out.append(
            _missing(
                "Fig. 4: runs at eta_Z = 1 with eta_Y / eta_Z = 1 or 10",
                f"no such cell (ratios at eta_Z = 1: {sorted(by_ratio)})",
                "ratio 1 (left) and/or 10 (right) at eta_Z = 1",
                src,
            )
        )
    if 1.0 in by_ratio:
        runs = by_ratio[1.0]
        loss = result.losses[runs]
        statement = "eta_Y = eta_Z = 1: batch loss < 0.05 at step 10 and < 1e-3 at step 30"
        if loss.shape[1] > 30:
            out.append(
                records.claim(
                    statement,
                    [float(loss[:, 10].max()), float(loss[:, 30].max())],
                    "[< 0.05, < 1e-3]",
                    loss[:, 10].max() < 0.05 and loss[:, 30].max() < 1e-3,
                    src,
                )
            )
        else:
            out.append(
                _missing(statement, f"the run has {loss.shape[1]} steps", "[< 0.05, < 1e-3]", src)
            )
        c0 = attention[runs, 0]  # class 0, (runs, M)
        statement = "final c_0: every common token < 0.05 (common tokens suppressed, Thm 2)"
        if common.any():
            out.append(
                records.claim(
                    statement, float(c0[:, common].max()), "< 0.05", c0[:, common].max() < 0.05, src
                )
            )
        else:
            out.append(_missing(statement, "the task has no common token", "< 0.05", src))
        statement = "final c_0 on distinct tokens 10..19 increases with P(l|n) (scan, Thm 3)"
        if distinct.sum() > 1:
            steps = np.diff(c0[:, distinct], axis=1)
            out.append(
                records.claim(
                    statement,
                    float(steps.min()),
                    ">= -1e-3 (ties within 1e-3)",
                    steps.min() >= -1e-3,
                    src,
                )
            )
        else:
            out.append(
                _missing(
                    statement, "fewer than 2 distinct tokens", ">= -1e-3 (ties within 1e-3)", src
                )
            )
        top = c0[:, np.flatnonzero(distinct)[-1]]
        out.append(
            records.claim(
                "final c_0 of the most frequent distinct token > 0.14",
                float(top.min()),
                "> 0.14",
                top.min() > 0.14,
                src,
            )
        )
        out.append(
            records.claim(
                "distinct entropy of final c (mean over classes) < 2.0 (init 2.151)",
                float(entropy[runs].max()),
                "< 2.0",
                entropy[runs].max() < 2.0,
                src,
            )
        )
        if cfg.optim.name == "sgd" and cfg.model.init == "zeros":
            rows = max(float(np.abs(result.final_params[p][runs].sum(-1)).max()) for p in "YZ")
            rows = (
                rows
                if all(np.isfinite(result.final_params[p][runs]).all() for p in "YZ")
                else math.nan
            )
            out.append(
                records.sanity(
                    "row sums of Y and Z stay 0 from zero init under SGD (Lemma 1 invariant)",
                    rows,
                    "< 1e-4",
                    rows < 1e-4,
                    "notes §3.3, T2",
                )
            )
    if 1.0 in by_ratio and 10.0 in by_ratio:
        left, right = by_ratio[1.0], by_ratio[10.0]
        out.append(
            records.claim(
                "eta_Y = 10: higher distinct entropy than eta_Y = 1 (denser attention)",
                {"eta_Y=1": float(entropy[left].mean()), "eta_Y=10": float(entropy[right].mean())},
                "eta_Y=10 > eta_Y=1 (notes: 2.08 vs 1.93)",
                entropy[right].min() > entropy[left].max(),
                "Fig. 4, notes §7.4, T12",
            )
        )
        first_left, first_right = (_first_below(result.losses[r], 1e-2) for r in (left, right))
        out.append(
            records.claim(
                "eta_Y = 10 converges faster: first step with batch loss < 1e-2",
                {"eta_Y=1": _steps_or_never(first_left), "eta_Y=10": _steps_or_never(first_right)},
                "eta_Y=10 at <= 5, eta_Y=1 later (notes: 3-4 vs 11)",
                first_right.max() <= 5 and first_right.max() < first_left.min(),
                "Fig. 4, notes §7.4, T12",
            )
        )
    return out


def claims_fig5(cfg, groups) -> list[records.Claim]:
    """Fig. 5: Adam's learning rate steers attention to different distinct tokens (notes §5.5)."""
    ((_, task, grid, result),) = groups
    distinct = np.flatnonzero(task.is_distinct[0])
    final = result.snapshots["attention"][:, -1, 0][:, distinct]  # (R, 10) class 0
    by_lr = {cell["optim.lr_z"]: final[runs].mean(0) for cell, runs in _cells(grid, result)}
    out = []
    statement = (
        "Adam lr 0.5: the most attended distinct token is not the most frequent one; it "
        "lies in tokens 14-16"
    )
    lr_half = next((lr for lr in by_lr if np.isclose(lr, 0.5)), None)
    if lr_half is None:
        out.append(
            _missing(
                statement,
                f"no run at lr 0.5 (lrs {sorted(by_lr)})",
                "14, 15 or 16",
                "Fig. 5, notes §5.5",
            )
        )
    elif not np.isfinite(by_lr[lr_half]).all():
        out.append(
            records.claim(
                statement, "non-finite attention", "14, 15 or 16", False, "Fig. 5, notes §5.5"
            )
        )
    else:
        argmax = int(np.argmax(by_lr[lr_half]))
        out.append(
            records.claim(
                statement,
                int(distinct[argmax]),
                "14, 15 or 16",
                4 <= argmax <= 6,
                "Fig. 5, notes §5.5",
            )
        )
    lrs = sorted(by_lr)
    statement = (
        "different Adam learning rates give different distinct-token patterns (L1 distance "
        "of neighbouring lr's final c_0 on distinct tokens)"
    )
    if len(lrs) > 1:
        gaps = [float(np.abs(by_lr[a] - by_lr[b]).sum()) for a, b in zip(lrs, lrs[1:])]
        out.append(records.claim(statement, gaps, "each > 0.1", min(gaps) > 0.1, "Fig. 5"))
    else:
        out.append(_missing(statement, f"one learning rate only ({lrs})", "each > 0.1", "Fig. 5"))
    Z = result.final_params["Z"]
    rows = float(np.abs(Z.sum(-1)).max()) if np.isfinite(Z).all() else math.nan
    out.append(
        records.sanity(
            "the zero row-sum invariant does not hold under Adam",
            rows,
            "> 1e-3",
            rows > 1e-3,
            "notes §3.3, T2",
        )
    )
    return out


def fig6_table(groups) -> dict[int, dict[str, np.ndarray]]:
    """{K: {"lr_z", "ratio", "mean" (lr_z x ratio), "std" (ddof=1)}} of the final distinct entropy."""
    table = {}
    for _, task, grid, result in groups:
        entropy = grid.unflatten(result.snapshots["distinct_entropy"][:, -1])
        lr_axis = list(grid.axes).index("optim.lr_z")
        entropy = np.moveaxis(entropy, lr_axis, 0)  # (lr_z, ratio, seeds)
        std = entropy.std(axis=-1, ddof=1) if entropy.shape[-1] > 1 else 0 * entropy[..., 0]
        table[task.num_classes] = dict(
            lr_z=grid.axes["optim.lr_z"],
            ratio=grid.axes["optim.lr_y_over_lr_z"],
            mean=entropy.mean(axis=-1),
            std=std,
        )
    return table


def claims_fig6(cfg, groups) -> list[records.Claim]:
    """Fig. 6 structure (notes §5.6, §7.2): entropy vs eta_Z and the ratio eta_Y/eta_Z.

    Needs a K = 2 cell and a K >= 6 cell; a missing cell or sweep value gives a NOT reproduced
    claim saying what is missing."""
    out = []
    src = "Fig. 6, notes §5.6/§7.2"
    table = fig6_table(groups)
    fmt = lambda a: np.round(a, 3).tolist()
    if not any(K >= 6 for K in table):
        out.append(
            _missing(
                "K >= 6: entropy falls with eta_Z; U shape in the ratio",
                f"no cell with K >= 6 (K = {sorted(table)})",
                "a K >= 6 cell",
                src,
            )
        )
    if 2 not in table:
        out.append(
            _missing(
                "K=2: entropy at ratio 10 is above ratio 1 (every eta_Z)",
                f"no cell with K = 2 (K = {sorted(table)})",
                "a K = 2 cell",
                src,
            )
        )
    for K, t in sorted(table.items()):
        mean, ratio, lr = t["mean"], list(t["ratio"]), t["lr_z"]
        if K >= 6:
            statement = f"K={K}: entropy falls strictly with eta_Z at every ratio"
            if len(lr) > 1:
                falls = bool(np.all(np.diff(mean, axis=0) < 0))
                out.append(
                    records.claim(
                        statement, fmt(mean), "decreasing down each column (lr_z rows)", falls, src
                    )
                )
            else:
                out.append(
                    _missing(
                        statement,
                        f"one eta_Z only ({list(lr)})",
                        "decreasing down each column (lr_z rows)",
                        src,
                    )
                )
            statement = (
                f"K={K}, eta_Z >= 1: the minimum over ratios is at ratio 2 and ratio 10 "
                "lies above it (U shape)"
            )
            rows = lr >= 1
            lacking = ([f"eta_Z >= 1 (eta_Z = {list(lr)})"] if not rows.any() else []) + [
                f"ratio {r:g}" for r in (2.0, 10.0) if r not in ratio
            ]
            if lacking:
                out.append(_missing(statement, "no " + ", no ".join(lacking), "all 2.0", src))
            elif not np.isfinite(mean[rows]).all():
                out.append(records.claim(statement, fmt(mean[rows]), "all 2.0", False, src))
            else:
                at_min = [ratio[i] for i in mean[rows].argmin(axis=1)]
                higher = bool(np.all(mean[rows, ratio.index(10.0)] > mean[rows, ratio.index(2.0)]))
                out.append(
                    records.claim(
                        statement, at_min, "all 2.0", all(r == 2.0 for r in at_min) and higher, src
                    )
                )
        if K == 2:
            statement = "K=2: entropy at ratio 10 is above ratio 1 (every eta_Z)"
            if 1.0 in ratio and 10.0 in ratio:
                up = mean[:, ratio.index(10.0)] - mean[:, ratio.index(1.0)]
                out.append(records.claim(statement, fmt(up), "all > 0", bool(np.all(up > 0)), src))
            else:
                out.append(_missing(statement, f"ratios {ratio} lack 1 or 10", "all > 0", src))
    return out


CLAIMS = {
    "fig4": claims_fig4,
    "fig5": claims_fig5,
    "fig6": claims_fig6,
    "none": lambda cfg, groups: [],
}


# ----------------------------------------------------------------------------- figures


def _figures(cfg, groups, workdir) -> list[str]:
    paths = [plot_losses(groups, workdir.figure_path("loss"))]
    if cfg.eval.snapshot_attention and len(groups) == 1:
        paths.append(plot_attention(cfg, *groups[0][1:], workdir.figure_path("attention")))
    if cfg.claims == "fig6" or (
        len(groups) > 1
        and "optim.lr_y_over_lr_z" in config_lib.flatten(cfg.sweep)
        and "optim.lr_z" in config_lib.flatten(cfg.sweep)
    ):
        paths.append(plot_entropy_vs_ratio(groups, workdir.figure_path("entropy_vs_ratio")))
    return [str(p) for p in paths]


def _cell_label(cell: dict[str, float]) -> str:
    return (
        f"$\\eta_Z$={cell['optim.lr_z']:g}, "
        f"$\\eta_Y$={cell['optim.lr_z'] * cell['optim.lr_y_over_lr_z']:g}"
    )


def plot_losses(groups, path):
    fig, axes = plotting.subplots(1, len(groups), width=4.2, height=3.0)
    for ax, (fields, task, grid, result) in zip(axes[0], groups):
        steps = np.arange(result.losses.shape[1])
        for cell, runs in _cells(grid, result):
            plotting.mean_and_band(
                ax,
                steps,
                np.maximum(result.losses[runs], 1e-8),
                label=_cell_label(cell),
                log_y=True,
            )
        ax.set_xlabel("iteration")
        ax.set_ylabel("batch loss")
        ax.set_title(f"K = {task.num_classes}, M = {task.num_tokens}")
        if len(_cells(grid, result)) <= 8:
            ax.legend(fontsize=7)
    return plotting.save(fig, path)


def plot_attention(cfg, task, grid, result, path):
    """Fig. 4/5: c_n over iterations (rows) for common | distinct tokens (columns), first seed."""
    steps = list(result.snapshot_steps)
    rows = [s if s >= 0 else steps[-1] for s in cfg.eval.plot_steps if s in steps or s < 0]
    row_index = [steps.index(s) for s in rows]
    cells = _cells(grid, result)
    classes = min(cfg.eval.plot_classes, task.num_classes)
    fig, axes = plotting.subplots(classes, len(cells), width=4.0, height=2.4)
    vmax = float(result.snapshots["attention"][[runs[0] for _, runs in cells]].max())
    for j, (cell, runs) in enumerate(cells):
        for n in range(classes):
            common = np.flatnonzero(task.is_common)[: cfg.eval.plot_common]
            distinct = np.flatnonzero(task.is_distinct[n])[: cfg.eval.plot_distinct]
            tokens = np.concatenate([common, distinct])
            values = result.snapshots["attention"][runs[0]][row_index][:, n, tokens]
            plotting.heatmap(
                axes[n, j],
                values,
                row_labels=[str(s) if s != steps[-1] else f"final ({s})" for s in rows],
                col_labels=[str(t) for t in tokens],
                separators=[len(common) - 0.5],
                title=f"class {n} (query {task.last_token[n]}) | {_cell_label(cell)}",
                vmin=0.0,
                vmax=vmax,
                colorbar=j == len(cells) - 1,
            )
            axes[n, j].set_xlabel("token (common | distinct)")
            axes[n, j].set_ylabel("iteration")
    return plotting.save(fig, path)


def plot_entropy_vs_ratio(groups, path):
    """Fig. 6: final distinct-token entropy vs eta_Y/eta_Z, one curve per eta_Z, one panel per K."""
    table = fig6_table(groups)
    fig, axes = plotting.subplots(1, len(table), width=3.3, height=3.0)
    for ax, (K, t) in zip(axes[0], sorted(table.items())):
        for i, lr in enumerate(t["lr_z"]):
            ax.errorbar(
                t["ratio"],
                t["mean"][i],
                yerr=t["std"][i],
                marker="o",
                markersize=3,
                capsize=2,
                label=f"$\\eta_Z$={lr:g}",
            )
        ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xticks(t["ratio"], [f"{r:g}" for r in t["ratio"]])
        ax.set_xlabel("$\\eta_Y / \\eta_Z$")
        ax.set_title(f"#last/next tokens = {K // 2 if K > 1 else 1}/{K}")
    axes[0, 0].set_ylabel("entropy of distinct-token attention (nats)")
    axes[0, -1].legend(fontsize=7)
    return plotting.save(fig, path)


# ----------------------------------------------------------------------------- theory figures


def run_theory(cfg, workdir, progress=print) -> dict[str, Any]:
    """Figs. 3, 8, 9 from the closed forms (notes §5.3, §5.8, §5.9), with their claims checked."""
    th = cfg.theory
    M, K, rho0 = th.M, th.K, th.rho0
    t = np.logspace(0, np.log10(th.t_max), 400)
    claims, figures = [], []

    # Fig. 3: chi_up(t) = exp(2 B_exact) at fixed eta_Z for several eta_Y; t0 dotted.
    fig, axes = plotting.subplots(1, 1, width=4.6, height=3.4)
    late = []
    for eta_y in th.fig3_eta_y:
        chi = np.exp(2 * theory.B_exact(M, K, eta_y, th.fig3_eta_z, t, rho0))
        (line,) = axes[0, 0].plot(t, chi, label=f"$\\eta_Y$={eta_y:g}")
        axes[0, 0].axvline(theory.t0(M, K, eta_y), color=line.get_color(), linestyle=":")
        late.append(float(chi[-1]))
    axes[0, 0].set(
        xscale="log",
        yscale="log",
        xlabel="t",
        ylabel="$\\chi_l(t)$ upper bound",
        title=f"Fig. 3: M={M}, K={K}, $\\eta_Z$={th.fig3_eta_z:g}",
    )
    axes[0, 0].legend(fontsize=7)
    figures.append(str(plotting.save(fig, workdir.figure_path("fig3_growth_factor"))))
    order = sorted(th.fig3_eta_y)
    late_sorted = [late[list(th.fig3_eta_y).index(e)] for e in order]
    claims.append(
        records.claim(
            f"Fig. 3: at t = {th.t_max:g} a smaller eta_Y gives a larger growth factor",
            late_sorted,
            "decreasing in eta_Y (at least two eta_Y)",
            len(late_sorted) > 1 and bool(np.all(np.diff(late_sorted) < 0)),
            "Thm 4, notes §4.3/T8",
        )
    )

    # Fig. 8: h*(s) (Eq. 33) vs h(s) (Eq. 45) and the gap bound 2 eta_Y / M (Lemma 7).
    fig, axes = plotting.subplots(1, 2, width=4.0, height=3.2)
    s = np.arange(th.fig8_steps + 1)
    gaps = []
    for eta_y in th.fig8_eta_y:
        h_star, h = theory.h_star(M, eta_y, th.fig8_steps), theory.h_cont(M, eta_y, s)
        (line,) = axes[0, 0].step(s, h_star, where="post", label=f"$h^*$, $\\eta_Y$={eta_y:g}")
        axes[0, 0].plot(s, h, color=line.get_color(), linestyle="--")
        axes[0, 1].plot(s, h_star - h, color=line.get_color())
        axes[0, 1].axhline(2 * eta_y / M, color=line.get_color(), linestyle=":")
        gaps.append((float((h_star - h).min()), float((h_star - h).max()), 2 * eta_y / M))
    axes[0, 0].set(xlabel="s", ylabel="h", title="Fig. 8: $h^*$ (steps) vs $h$ (dashed)")
    axes[0, 1].set(
        xlabel="s",
        ylabel="$h^* - h$",
        yscale="log",
        title="gap and its bound $2\\eta_Y/M$ (dotted)",
    )
    axes[0, 0].legend(fontsize=7)
    figures.append(str(plotting.save(fig, workdir.figure_path("fig8_h_star_vs_h"))))
    claims.append(
        records.claim(
            "Fig. 8 / Lemma 7: 0 <= h*(s) - h(s) <= 2 eta_Y / M",
            [g[:2] for g in gaps],
            "min >= 0 and max <= 2 eta_Y/M",
            all(lo >= 0 and hi <= b for lo, hi, b in gaps),
            "Lemma 7, notes T4",
        )
    )

    # Fig. 9: B_n(t) at fixed ratio for several eta_Z; B_n(t0) is the same dot for each eta_Z.
    ratios = list(th.fig9_ratios)
    fig, axes = plotting.subplots(1, len(ratios), width=3.4, height=3.0)
    spread = []
    for ax, ratio in zip(axes[0], ratios):
        at_t0 = []
        for eta_z in th.fig9_eta_z:
            eta_y = ratio * eta_z
            (line,) = ax.plot(
                t, theory.B_exact(M, K, eta_y, eta_z, t, rho0), label=f"$\\eta_Z$={eta_z:g}"
            )
            t0 = theory.t0(M, K, eta_y)
            at_t0.append(theory.B_exact(M, K, eta_y, eta_z, t0, rho0))
            ax.axvline(t0, color=line.get_color(), linestyle=":")
            ax.plot([t0], [at_t0[-1]], "o", color=line.get_color())
        spread.append(float(np.ptp(at_t0)))
        ax.set(
            xscale="log",
            xlabel="t",
            ylabel="$B_n(t)$",
            title=f"Fig. 9: $\\eta_Y/\\eta_Z$={ratio:g}, $B_n(t_0)$={at_t0[0]:.4f}",
        )
        ax.legend(fontsize=7)
    figures.append(str(plotting.save(fig, workdir.figure_path("fig9_B_fixed_ratio"))))
    claims.append(
        records.claim(
            "Fig. 9: B_n(t0) does not depend on eta_Z at a fixed ratio eta_Y/eta_Z",
            spread,
            "spread < 1e-12 per ratio",
            max(spread) < 1e-12,
            "Thm 4, notes §4.3/T7",
        )
    )
    claims.append(
        records.claim(
            "Lemma 9: the exact crossing e^{Mh} = (M-1)Mh lies within 1% of t0",
            [theory.transition_time_exact(M, K, e) / theory.t0(M, K, e) for e in th.fig3_eta_y],
            "ratio in [0.99, 1.01]",
            all(
                abs(theory.transition_time_exact(M, K, e) / theory.t0(M, K, e) - 1) < 0.01
                for e in th.fig3_eta_y
            ),
            "notes T5",
        )
    )
    return workdir.finish(claims, progress, figures=figures)


def needs_x64(cfg) -> bool:
    return cfg.experiment == "theory" or cfg.train.dtype == "float64"
