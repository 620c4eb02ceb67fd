"""Scan & Snap experiments: configs -> compiled sweeps -> records, figures and checked claims.

`run(config, workdir)` is what `python -m experiments.scan_snap` calls. A config's `sweep` mirrors
the config's nesting and holds lists of values, e.g. `sweep.optim.lr_z = [0.5, 1.0]`. Fields in
`TRACED` (learning rates) are vmapped in one program;
any other field (e.g. `data.num_last`, which changes M) is a structural axis: one compiled program
per value.

This module holds the config schema, the training problem and the runs; `claims.py` the claims
and the theory figures' curves, `figures.py` the figures (`wikitext.py` the WikiText experiment).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import edge_of_stability, memory, precision, records, sweeps, training
from landscape.engine import experiment as engine_experiment
from landscape.engine import track as track_lib
from landscape.engine.experiment import BASELINE_BYTES
from landscape.engine.plotting import draw_tracked
from landscape.point import params_table
from landscape.scan_snap import claims as claims_lib
from landscape.scan_snap import curvature_study, eos, figures, padded, wikitext
from landscape.scan_snap import model as model_lib
from landscape.scan_snap import task as task_lib
from landscape.scan_snap.claims import CLAIMS, Group
from landscape.typing import Progress, PyTree

TRACED = ("optim.lr_z", "optim.lr_y_over_lr_z")
CLAIM_SETS = ("fig4", "fig5", "fig6") + wikitext.CLAIM_SETS + ("curvature", "none")
EXPERIMENTS = ("train", "theory", "wikitext", "curvature", "eos")
TEXT = ("wikitext", "curvature")  # the experiments on real text (wikitext.py)


def default_config() -> ml_collections.ConfigDict:
    """Every field an experiment config may set, with defaults (the Syn-Small values, notes
    §7.4)."""
    c = ml_collections.ConfigDict()
    c.name = "scan_snap"
    c.experiment = "train"  # train (Y/Z model) | theory | wikitext | curvature (on WikiText) | eos
    c.seed = 0  # runs use seeds seed, seed+1, ..., seed+num_seeds-1
    c.num_seeds = 1
    c.data = dict(task_lib.SYN_SMALL)
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
        **track_lib.default_tracking(),  # tracked on the population loss (§3.5)
    )
    c.eval = dict(
        snapshot_attention=True,  # keep c_n (K x M) every log_every steps (arrays.npz)
        plot_steps=[0, 2, 4, 6, 8, 10, -1],  # -1 = final
        plot_classes=2,
        plot_common=10,
        plot_distinct=10,
    )
    c.sweep = ml_collections.ConfigDict()  # e.g. {"optim": {"lr_z": [...]}, "data": {...}}
    c.claims = "none"  # fig4 | fig5 | fig6 | fig7 | fig10 | curvature | none
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
    c.curvature = curvature_study.default_study()  # experiment = "curvature"
    c.eos = edge_of_stability.default_study()  # experiment = "eos" (eos.py)
    return c


SWEEPABLE = (
    "optim.lr_z",
    "optim.lr_y_over_lr_z",
    "data.num_last",
    "data.num_next_per_last",
    "data.seq_len",
    "train.batch_size",
) + wikitext.SWEEPABLE


def _validate_run(cfg: ml_collections.ConfigDict) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims."""
    config_lib.require_text(cfg, "name")
    config_lib.require_choice(cfg, "experiment", EXPERIMENTS)
    config_lib.require_choice(cfg, "claims", CLAIM_SETS)
    config_lib.require_seeds(cfg)
    if cfg.experiment == "curvature":
        curvature_study.validate(cfg)
    edge_of_stability.validate(cfg)
    if cfg.experiment in TEXT:
        return wikitext.validate_run(cfg)
    config_lib.require(
        cfg.claims not in wikitext.CLAIM_SETS,
        "claims",
        cfg.claims,
        f"one of fig4, fig5, fig6, none for experiment = {cfg.experiment!r} "
        f"({cfg.claims} is experiment = 'wikitext')",
    )
    config_lib.require(
        cfg.claims != "curvature",
        "claims",
        cfg.claims,
        f"one of fig4, fig5, fig6, none for experiment = {cfg.experiment!r} "
        "(curvature is experiment = 'curvature')",
    )
    if cfg.experiment == "theory":
        config_lib.require_one_checked_study(cfg, "none")
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


def _validate_cell(cfg: ml_collections.ConfigDict) -> None:
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
    track_lib.validate_tracking(cfg)
    config_lib.require(
        cfg.experiment in ("train", "curvature", "eos") or not cfg.train.track_every,
        "train.track_every",
        cfg.train.track_every,
        "0 for experiment = 'wikitext' (experiment = 'curvature' tracks the text model)",
    )
    if cfg.experiment in TEXT:
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


def _validate_theory(cfg: ml_collections.ConfigDict) -> None:
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


_MEMORY_FIELDS = (
    "train.batch_size",
    "data.seq_len",
    "num_seeds",
    "data.num_distinct_per_next",
    "data.num_common",
    "data.num_last",
    "data.num_next_per_last",
)


def _cell_bytes(v: dict[str, Any]) -> tuple[float, str]:
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
    runs = memory.traced_runs(v, TRACED)
    step = runs * (B * (L * (support + 8) + 8 * M) * size + 10 * M * M * size)
    snapshots = v["train.num_steps"] // v["train.log_every"] + 1
    kept = runs * snapshots * (K * M * 4 * bool(v["eval.snapshot_attention"]) + 16)
    return BASELINE_BYTES + step + kept, (
        f"{runs} run(s) at once x a batch of {B} sequences of {L} tokens over M = {M} ids "
        f"(B x L x {support} support, B x M features, M x M parameters)"
    )


def memory_estimate(cfg: ml_collections.ConfigDict) -> memory.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`; the theory
    figures (closed forms in NumPy) need the baseline only."""
    if cfg.experiment == "theory":
        return memory.MemoryEstimate(BASELINE_BYTES, "the closed forms", "theory.M")
    if cfg.experiment == "curvature":
        return memory.estimate_memory(
            cfg, TRACED, curvature_study.cell_bytes, curvature_study.MEMORY_FIELDS, default_config
        )
    if cfg.experiment in TEXT:
        return memory.estimate_memory(
            cfg, TRACED, wikitext.cell_bytes, wikitext.MEMORY_FIELDS, default_config
        )
    return memory.estimate_memory(cfg, TRACED, _cell_bytes, _MEMORY_FIELDS, default_config)


# validate(cfg): the run's fields, every program's, then the memory estimate; nothing is built
validate = engine_experiment.validator(
    default_config, TRACED, _validate_run, _validate_cell, memory_estimate, sweepable=SWEEPABLE
)


# ----------------------------------------------------------------------------- training problem


def make_task(cfg: ml_collections.ConfigDict) -> task_lib.SequenceClasses:
    return task_lib.sequence_classes(**cfg.data)


def model_of(cfg: ml_collections.ConfigDict, task: task_lib.SequenceClasses) -> model_lib.YZModel:
    """The Y/Z model of a config on its task's ids (model.from_config)."""
    return model_lib.from_config(cfg, task.num_tokens)


def init_params(
    cfg: ml_collections.ConfigDict, task: task_lib.SequenceClasses, key: jax.Array
) -> PyTree:
    return model_lib.init_params(key, task.num_tokens, cfg.model.init, jnp.dtype(cfg.train.dtype))


def make_problem(
    cfg: ml_collections.ConfigDict, task: task_lib.SequenceClasses
) -> training.Problem:
    """The Y/Z model on sampled sequence classes; hparams are the TRACED learning rates."""
    model = model_of(cfg, task)
    batch_size, keep_attention = cfg.train.batch_size, cfg.eval.snapshot_attention

    def loss(
        params: PyTree, key: jax.Array, hparams: Mapping[str, jax.Array]
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        context, query, label, _ = task.sample(key, batch_size)
        value = model.apply(
            {"params": params}, context, query, label, method=model_lib.YZModel.loss
        )
        return value, {}  # type: ignore[return-value]  # flax types apply for mutable too

    def snapshot(params: PyTree, hparams: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        c_KM = task_lib.attention_weights(params["Z"], task)
        out: dict[str, Any] = {
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


def structural_cells(cfg: ml_collections.ConfigDict) -> list[dict[str, Any]]:
    """The product of the sweep's structural (non-traced) axes: one compiled program each."""
    return config_lib.structural_cells(cfg, TRACED)


def train_group(
    cfg: ml_collections.ConfigDict,
    fields: dict[str, Any],
    workdir: records.Workdir | None = None,
    progress: Progress = print,
) -> tuple[task_lib.SequenceClasses, sweeps.Grid, training.RunResult]:
    """Train one structural cell: every traced-sweep value x seed as one sharded program."""
    cell = config_lib.with_fields(cfg, fields)
    task = make_task(cell)
    grid, result = engine_experiment.train_cell(
        cell,
        fields,
        TRACED,
        make_problem(cell, task),
        tracking_loss(cell, task),
        workdir=workdir,
        progress=progress,
    )
    return task, grid, result


def train_cells(
    cfg: ml_collections.ConfigDict,
    cells: list[dict[str, Any]],
    workdir: records.Workdir | None = None,
    progress: Progress = print,
) -> list[tuple[task_lib.SequenceClasses, sweeps.Grid, training.RunResult]]:
    """`train_group` of every structural cell: one program each on the CPU; off it one padded
    program for cells that differ in K and M only (`padded.applies`), the same numbers."""
    if padded.applies(cfg, cells):
        if progress:
            progress(f"one program for {len(cells)} cells, padded to the largest K and M")
        return padded.train_cells(cfg, cells, TRACED, workdir, progress)
    out = []
    for fields in cells:
        if fields and progress:
            progress(engine_experiment.program_line(fields))
        out.append(train_group(cfg, fields, workdir, progress))
    return out


def tracking_loss(
    cfg: ml_collections.ConfigDict, task: task_lib.SequenceClasses
) -> Callable[[PyTree, Any], jax.Array]:
    """The tracked curvature's loss: the population loss (§3.5, the snapshots'), exact."""
    population = task_lib.Population.of(task, jnp.dtype(cfg.train.dtype))
    objective = model_lib.population_objective(model_of(cfg, task))
    return lambda params, hp: objective(params, population)


def _eos_problem(cfg: ml_collections.ConfigDict) -> training.Problem:
    return make_problem(cfg, make_task(cfg))


def _run_train(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress
) -> dict[str, Any]:
    """The training runs: one program per structural cell, then the figures and claims."""
    groups: list[Group] = []
    cells = structural_cells(cfg)
    if progress:
        first = config_lib.with_fields(cfg, cells[0])
        progress(
            f"model: YZModel, {precision.of(cfg.train.dtype, cfg.model.dtype).name}\n"
            + params_table(init_params(first, make_task(first), jax.random.key(cfg.seed)))
        )
    for i, (fields, (task, grid, result)) in enumerate(
        zip(cells, train_cells(cfg, cells, workdir, progress), strict=True)
    ):
        groups.append((fields, task, grid, result))
        prefix = engine_experiment.cell_prefix(i, len(cells))
        workdir.save_arrays(**_arrays(result, task, prefix))
    paths = figures.draw(cfg, groups, workdir)
    paths += draw_tracked(workdir, [g[3] for g in groups], [str(g[0]) for g in groups])
    claims = CLAIMS[cfg.claims](cfg, groups)
    timing = training.run_timing([g[3] for g in groups])
    if progress:
        progress(
            f"{timing['runs']} runs: compile {timing['compile_seconds']:.1f} s, "
            f"run {timing['run_seconds']:.2f} s"
        )
    return workdir.finish(claims, progress, timing=timing, figures=paths)


def _arrays(
    result: training.RunResult, task: task_lib.SequenceClasses, prefix: str
) -> dict[str, np.ndarray]:
    arrays = result.arrays(prefix, complete=True)
    arrays[f"{prefix}class_probs"] = task.class_probs
    arrays[f"{prefix}final_Z_query_rows"] = result.final_params["Z"][:, np.asarray(task.last_token)]
    return arrays


# ----------------------------------------------------------------------------- theory figures


def run_theory(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress = print
) -> dict[str, Any]:
    """Figs. 3, 8, 9 from the closed forms (notes §5.3, §5.8, §5.9), with their claims checked."""
    th = cfg.theory
    t = np.logspace(0, np.log10(th.t_max), 400)
    chis = claims_lib.growth_factors(th, t)
    hs = claims_lib.h_curves(th)
    by_ratio = [claims_lib.B_at_fixed_ratio(th, t, ratio) for ratio in th.fig9_ratios]
    paths = [
        figures.plot_growth_factor(th, t, chis, workdir.figure_path("fig3_growth_factor")),
        figures.plot_h_star_vs_h(th, hs, workdir.figure_path("fig8_h_star_vs_h")),
        figures.plot_B_fixed_ratio(th, t, by_ratio, workdir.figure_path("fig9_B_fixed_ratio")),
    ]
    claims = [
        claims_lib.claim_fig3(th, chis),
        claims_lib.claim_fig8(th, hs),
        claims_lib.claim_fig9(by_ratio),
        claims_lib.claim_lemma9(th),
    ]
    return workdir.finish(claims, progress, figures=[str(p) for p in paths])


def needs_x64(cfg: ml_collections.ConfigDict) -> bool:
    return cfg.experiment == "theory" or cfg.train.dtype == "float64"


run = engine_experiment.runner(
    validate,
    _run_train,
    theory=run_theory,
    wikitext=wikitext.run,
    curvature=curvature_study.run,
    eos=functools.partial(eos.run, make_problem=_eos_problem, traced=TRACED),
)
