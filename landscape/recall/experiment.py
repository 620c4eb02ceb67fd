"""Associative-recall experiments E1-E6 (notes/assoc_recall.md §7.1): configs -> programs ->
records, figures and checked claims.

Two kinds: "flow" (gradient flow on the exact population loss) and "sgd" (the training engine on
sampled batches), each sweep one vmapped program. This module holds the config schema, the
programs and the run; `claims.py` the claims, `figures.py` the figures. See docs/design/recall.md.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from ml_collections import ConfigDict

from landscape.engine import config as config_lib
from landscape.engine import edge_of_stability, gradient_flow, memory, precision, records, training
from landscape.engine import experiment as engine_experiment
from landscape.engine import track as track_lib
from landscape.engine.experiment import BASELINE_BYTES
from landscape.engine.memory import format_bytes
from landscape.engine.plotting import draw_tracked
from landscape.point import params_table
from landscape.recall import curvature_study, eos, flow, theory
from landscape.recall import model as model_lib
from landscape.recall.claims import CLAIMS
from landscape.recall.figures import FIGURES
from landscape.typing import NDArray, Progress, PyTree

FLOW_TRACED = ("init.eps", "init.beta_shape", "init.stage", "init.big")
SGD_TRACED = ("optim.lr", "init.eps")
CLAIM_SETS = (
    "first_jump",
    "ei_tail",
    "later_jumps",
    "stages",
    "fig1",
    "dp_vs_ce",
    "ablations",
    "curvature",
    "none",
)


def default_config() -> ml_collections.ConfigDict:
    """Every field a recall config may set (defaults: the notes' Fig. 1 setting, §5)."""
    c = ml_collections.ConfigDict()
    c.name = "recall"
    c.experiment = "sgd"  # flow | sgd | curvature (both, curvature_study.py) | eos (eos.py)
    c.seed = 0
    c.num_seeds = 1
    c.task = dict(k=4, num_responses=4)
    c.model = dict(
        num_heads=4,
        window=True,
        exact_query=True,
        response_only=True,
        gamma=0.0,
        loss="dp",
        qk="beta",
        scale=1.0,
        dtype="",
    )  # computation dtype ("" = the params'; half = autocast)
    c.init = dict(
        kind="shape",  # shape: beta = eps*shape | first_jump: I_1 | later_jump: I_h
        eps=0.02,
        beta_shape=[1.0, 0.5, 0.25, 0.1],
        w_noise=0.0,  # shape: w(0) = eps * w_noise * N(0, 1)
        stage=2,
        big=6.0,
    )  # later_jump: h and the macroscopic scale c = c1
    c.flow = dict(
        tau_max=250.0,  # saves on tau = eps*t in [0, tau_max] (linear) ...
        num_saves=4000,
        zoom=500.0,
        zoom_saves=5000,  # extra saves within +-zoom time units of the theory's
        # jump time (first_jump / later_jump inits), so jump
        # widths (O(1) time units) are resolved at any eps
        log_time=False,
        t_max=1e12,  # ... or log-spaced t in [1e-2, t_max]
        rtol=1e-10,
        atol=1e-12,
        max_steps=200_000,
    )
    c.optim = training.default_optim_config()
    c.optim.momentum = 0.9
    c.optim.lr = 1.0
    c.train = dict(
        batch_size=64,
        num_steps=3000,
        log_every=10,
        chunk_steps=0,
        sampler="collisions",  # collisions | tokens | population (full-batch GD)
        dtype="float64",
        on_nonfinite="stop",
        **training.default_averaging(),
        **track_lib.default_tracking(),  # tracked on the snapshots' eval_loss (flow.py)
    )
    c.sweep = ml_collections.ConfigDict()
    c.variants = []
    c.curvature = curvature_study.default_study()
    c.eos = edge_of_stability.default_study()  # experiment = "eos" (eos.py)
    c.claims = "none"
    return c


FLOW_CLAIMS = ("first_jump", "ei_tail", "later_jumps", "stages")
SGD_CLAIMS = ("fig1", "dp_vs_ce", "ablations")


def _validate_run(cfg: ConfigDict) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims, and which
    groups a sweep or variant may change (flow runs read no optim / train, SGD runs no flow)."""
    choice = config_lib.require_choice
    config_lib.require_text(cfg, "name")
    choice(cfg, "experiment", ("flow", "sgd", "curvature", "eos"))
    choice(cfg, "claims", CLAIM_SETS)
    config_lib.require_seeds(cfg)
    curvature_study.validate(cfg)
    edge_of_stability.validate(cfg)
    if cfg.experiment in ("curvature", "eos"):
        return
    flow_run = cfg.experiment == "flow"
    config_lib.require(
        cfg.claims not in (SGD_CLAIMS if flow_run else FLOW_CLAIMS),
        "claims",
        cfg.claims,
        "one of "
        + ", ".join(repr(c) for c in (FLOW_CLAIMS if flow_run else SGD_CLAIMS) + ("none",))
        + f" for experiment = {cfg.experiment!r}",
    )
    unused = ("optim", "train") if flow_run else ("flow",)
    changed = list(config_lib.flatten(cfg.get("sweep") or {}))
    for variant in cfg.get("variants") or []:
        changed += list(config_lib.flatten(variant)) if isinstance(variant, dict) else []
    for path in changed:
        config_lib.require(
            path.split(".")[0] not in unused,
            "experiment",
            cfg.experiment,
            f"{'sgd' if flow_run else 'flow'!r} for a sweep or variant over "
            f"{path} ({cfg.experiment} runs do not read it)",
        )


def _validate_cell(cfg: ConfigDict) -> None:
    """Ranges and relations of every field of one program's config."""
    model = _validate_model(cfg)
    _validate_init(cfg)
    _validate_flow_and_training(cfg)
    _validate_experiment_kind(cfg, model)


def _validate_model(cfg: ConfigDict) -> model_lib.RecallModel:
    """task.* and model.* (and train.dtype, which sets the precision); the model they build."""
    r, choice = config_lib.require_number, config_lib.require_choice
    r(cfg, "task.k", low=2, high=6, integer=True)
    r(cfg, "task.num_responses", low=2, integer=True)
    k = cfg.task.k
    config_lib.require(
        cfg.model.num_heads in (k - 1, k),
        "model.num_heads",
        cfg.model.num_heads,
        f"k - 1 or k (task.k = {k})",
    )
    choice(cfg, "model.loss", ("dp", "ce"))
    choice(cfg, "model.qk", ("beta", "full"))
    r(cfg, "model.scale", low=0, low_open=True)
    r(cfg, "model.gamma")
    choice(cfg, "model.dtype", precision.COMPUTE_DTYPES)
    choice(cfg, "train.dtype", ("float32", "float64"))
    try:
        return model_lib.from_config(cfg)
    except (ValueError, TypeError) as error:
        raise config_lib.field_error(error, "model") from None


def _validate_init(cfg: ConfigDict) -> None:
    """init.*: the kind, eps, one beta_shape entry per head, w_noise, stage and big."""
    r, choice = config_lib.require_number, config_lib.require_choice
    H = cfg.model.num_heads
    choice(cfg, "init.kind", ("shape", "first_jump", "later_jump"))
    r(cfg, "init.eps", low=0, low_open=True)
    config_lib.require_numbers(
        cfg, "init.beta_shape", length=H, length_of=f"one per head, model.num_heads = {H}"
    )
    r(cfg, "init.w_noise", low=0)
    r(cfg, "init.stage", low=2, high=H, integer=True)
    r(cfg, "init.big", low=0, low_open=True)


def _validate_flow_and_training(cfg: ConfigDict) -> None:
    """flow.* (the solver and its saves), optim.* and train.*."""
    r, choice = config_lib.require_number, config_lib.require_choice
    r(cfg, "flow.tau_max", low=0, low_open=True)
    r(cfg, "flow.num_saves", low=2, integer=True)
    r(cfg, "flow.zoom", low=0)
    r(cfg, "flow.zoom_saves", low=0, integer=True)
    r(cfg, "flow.t_max", low=1)
    r(cfg, "flow.rtol", low=0, high=1, low_open=True, high_open=True)
    r(cfg, "flow.atol", low=0, high=1, low_open=True, high_open=True)
    r(cfg, "flow.max_steps", low=1, integer=True)
    training.validate_optim(cfg)
    r(cfg, "optim.lr", low=0, low_open=True)
    config_lib.require_training_steps(cfg)
    config_lib.require_schedule(cfg)
    config_lib.require_chunking(cfg)
    choice(cfg, "train.sampler", ("collisions", "tokens", "population"))
    config_lib.require_nonfinite_policy(cfg)
    training.validate_averaging(cfg)
    track_lib.validate_tracking(cfg)


def _validate_experiment_kind(cfg: ConfigDict, model: model_lib.RecallModel) -> None:
    """What a flow run (the closed-form DP loss) and an SGD run (its init and sampler) need (a
    curvature study runs both)."""
    if cfg.experiment in ("flow", "curvature"):
        config_lib.require(
            cfg.train.metrics_at == "current",
            "train.metrics_at",
            cfg.train.metrics_at,
            f"'current' for experiment = {cfg.experiment!r} (gradient "
            "flow's trajectory has no stochastic parameters to average)",
        )
        config_lib.require(
            flow.has_closed_form(model) and cfg.model.loss == "dp",
            "experiment",
            "flow",
            "'sgd' unless the model is the simplified one "
            "(window, exact_query, response_only, qk='beta') with the DP loss: "
            "gradient flow runs on the closed-form population loss",
        )
    if cfg.experiment != "flow":
        config_lib.require(
            cfg.init.kind == "shape",
            "init.kind",
            cfg.init.kind,
            f"'shape' for experiment = {cfg.experiment!r} (the jump inits are gradient flow's)",
        )
        if cfg.train.sampler != "tokens":
            config_lib.require(
                flow.has_closed_form(model),
                "train.sampler",
                cfg.train.sampler,
                "'tokens' unless the model is the simplified "
                "one (the collision sampler and the closed form need A0-A3)",
            )
        config_lib.require(
            cfg.train.sampler != "population" or cfg.model.loss == "dp",
            "train.sampler",
            cfg.train.sampler,
            "'collisions' or 'tokens' for "
            "model.loss = 'ce' (the population CE loss has no closed form)",
        )


def needs_x64(cfg: ConfigDict) -> bool:
    """Always: plateau gradients are ~1e-6 (notes §7.1); flows and SGD run in float64."""
    return True


def _cells(cfg: ConfigDict) -> list[tuple[dict, ConfigDict]]:
    """[(fields, cell config)]: one compiled program per variant x structural sweep value."""
    traced = FLOW_TRACED if cfg.experiment == "flow" else SGD_TRACED
    return [
        (fields, config_lib.with_fields(cfg, fields))
        for fields in config_lib.structural_cells(cfg, traced)
    ]


# ----------------------------------------------------------------------------- memory


_MEMORY_FIELDS = (
    "train.batch_size",
    "flow.num_saves",
    "flow.zoom_saves",
    "num_seeds",
    "task.k",
    "task.num_responses",
    "model.num_heads",
)


def _cell_bytes(v: dict) -> tuple[float, str]:
    """(bytes, what) of one program, float64: a flow keeps every run's parameters and loss at
    every save (the solver's output and its copies; the baseline dominates every shipped flow);
    SGD holds the runs' batches (token sequences: one-hot tokens, layer-1 heads and scores per
    sequence; the collision sampler: k! draws per sequence) forward and backward, and the losses
    on the host."""
    k, R, H = v["task.k"], v["task.num_responses"], v["model.num_heads"]
    perms, vocab = math.factorial(k), k + R
    L = math.factorial(k + 1) + k  # tokens per sequence (task.sequence_length)
    window = k if v["model.window"] else L
    width = (H + 1) * vocab
    params = H + H * window + (width * width if v["model.qk"] != "beta" else 0)
    if v["experiment"] == "flow":
        runs = memory.traced_runs(v, FLOW_TRACED) // v["num_seeds"]
        saves = v["flow.num_saves"]
        if (
            v["flow.zoom"]
            and not v["flow.log_time"]
            and v["init.kind"] in ("first_jump", "later_jump")
        ):
            saves += v["flow.zoom_saves"]
        need = runs * saves * (3 * params + 8) * 8
        return BASELINE_BYTES + need, (
            f"{runs} flow(s) x {saves} saves of {params} parameters and the loss"
        )
    runs = memory.traced_runs(v, SGD_TRACED)
    B, steps = v["train.batch_size"], v["train.num_steps"]
    if v["train.sampler"] == "collisions":
        per_sequence = perms * (H + vocab) * 4
    elif v["train.sampler"] == "tokens":
        per_sequence = L * vocab * (H + 2) + H * L * window + width * L
    else:
        per_sequence, B = 64 * perms * (H + vocab), 1
    need = (
        runs * (4 * B * per_sequence * 8 + 512 * (L * vocab * (H + 2) + H * L * window) * 8)
        + runs * steps * 8 * 2
    )
    return BASELINE_BYTES + need, (
        f"{runs} run(s) x a step on {B} sequences ({format_bytes(4 * per_sequence * 8)} each)"
    )


def memory_estimate(cfg: ConfigDict) -> memory.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`."""
    traced = FLOW_TRACED if cfg.experiment == "flow" else SGD_TRACED
    return memory.estimate_memory(cfg, traced, _cell_bytes, _MEMORY_FIELDS, default_config)


def _traced(cfg: ConfigDict) -> tuple[str, ...]:
    return FLOW_TRACED if cfg.experiment == "flow" else SGD_TRACED


# validate(cfg): the run's fields, every program's, then the memory estimate; nothing is built
validate = engine_experiment.validator(
    default_config, _traced, _validate_run, _validate_cell, memory_estimate
)


# ----------------------------------------------------------------------------- running


def _run_train(cfg: ConfigDict, workdir: records.Workdir, progress: Progress) -> dict[str, Any]:
    """The gradient flow (experiment = "flow") or the SGD runs: one per structural cell."""
    groups, cells = [], _cells(cfg)
    if progress:
        model = model_lib.from_config(cells[0][1])
        params = model.init(jax.random.key(0), jnp.zeros((1, model.seq_len), jnp.int32))["params"]
        progress(
            f"model: RecallModel, {precision.of(cfg.train.dtype, cfg.model.dtype).name}\n"
            + params_table(params)
        )
    for i, (fields, cell) in enumerate(cells):
        if fields and progress:
            progress(engine_experiment.program_line(fields))
        result = (
            run_flow(cell, progress)
            if cfg.experiment == "flow"
            else run_sgd(cell, fields, workdir, progress)
        )
        result["fields"] = fields
        groups.append(result)
        prefix = engine_experiment.cell_prefix(i, len(cells))
        workdir.save_arrays(**{prefix + k: v for k, v in result["arrays"].items()})
        if cfg.experiment == "flow":
            workdir.append_metrics(_flow_rows(result, fields))
    claims = CLAIMS[cfg.claims](cfg, groups)
    figures = [str(p) for p in FIGURES[cfg.experiment](cfg, groups, workdir)]
    figures += draw_tracked(workdir, [g["result"] for g in groups if "result" in g])
    return workdir.finish(
        claims,
        progress,
        figures=figures,
        seconds={k: sum(g["seconds"][k] for g in groups) for k in ("compile", "run")},
    )


def _flow_inits(cfg: ConfigDict) -> tuple[list[dict], PyTree]:
    """The grid of initialisations of a flow config: [{axis: value}], stacked params (R, ...)."""
    axes = config_lib.traced_axes(cfg, FLOW_TRACED)
    grid = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    model = model_lib.from_config(cfg)
    params = []
    for point in grid:
        c = config_lib.with_fields(cfg, point).init
        if c.kind == "first_jump":
            params.append(flow.init_first_jump(model, c.eps))
        elif c.kind == "later_jump":
            params.append(flow.init_later_jump(model, c.eps, c.stage, c.big))
        else:
            key = jax.random.key(cfg.seed) if c.w_noise else None
            params.append(flow.init_shape(model, c.eps, list(c.beta_shape), key, c.w_noise))
    return grid, jax.tree.map(lambda *x: jnp.stack(x), *params)


def run_flow(cfg: ConfigDict, progress: Progress = print) -> dict[str, Any]:
    """Gradient flow from every initialisation of the sweep, as one vmapped program."""
    grid, params0 = _flow_inits(cfg)
    eps = np.array([config_lib.with_fields(cfg, p).init.eps for p in grid])
    f = cfg.flow
    if f.log_time:
        ts = np.concatenate([[0.0], np.logspace(-2, np.log10(f.t_max), f.num_saves - 1)])
        save_times = np.tile(ts, (len(grid), 1))
    else:
        save_times = np.linspace(0.0, f.tau_max, f.num_saves)[None, :] / eps[:, None]
        if f.zoom and cfg.init.kind in ("first_jump", "later_jump"):
            save_times = np.stack(
                [
                    _with_zoom(ts, _predicted_jump(cfg, point), f)
                    for ts, point in zip(save_times, grid, strict=True)
                ]
            )
    settings = gradient_flow.FlowSettings(rtol=f.rtol, atol=f.atol, max_steps=f.max_steps)
    start = time.perf_counter()
    params, loss, ok = flow.population_flow(
        model_lib.from_config(cfg), params0, jnp.asarray(save_times), settings
    )
    seconds = time.perf_counter() - start
    if not ok.all():
        bad = [grid[i] for i in np.flatnonzero(~ok)]
        raise config_lib.ConfigError(
            f"gradient flow stopped early for {bad}: raise flow.max_steps "
            f"(= {f.max_steps}) or lower flow.t_max / flow.tau_max."
        )
    if progress:
        progress(
            f"gradient flow: {len(grid)} runs x {f.num_saves} saves in {seconds:.1f} s "
            "(compile included)"
        )
    arrays = {
        "times": save_times,
        "loss": loss,
        "beta": params["beta"],
        "w": params["w"],
        "eps": eps,
    }
    return dict(
        grid=grid,
        eps=eps,
        times=save_times,
        loss=loss,
        params=params,
        arrays=arrays,
        cfg=cfg,
        seconds={"compile": 0.0, "run": seconds},
    )  # flow time includes compile


def _predicted_jump(cfg: ConfigDict, point: dict[str, Any]) -> float:
    init = config_lib.with_fields(cfg, point).init
    stage = init.stage if init.kind == "later_jump" else 1
    return float(theory.jump_time(cfg.task.k, cfg.task.num_responses, init.eps, stage=stage))


def _with_zoom(ts: NDArray, center: float, f: ConfigDict) -> NDArray:
    """ts plus f.zoom_saves evenly spaced times within +-f.zoom of center (same count per run)."""
    if not np.isfinite(center):  # no jump predicted (stage k): spread the extra saves evenly
        extra = np.linspace(ts[0], ts[-1], f.zoom_saves + 2)[1:-1]
    else:
        extra = np.linspace(max(center - f.zoom, 0.0), min(center + f.zoom, ts[-1]), f.zoom_saves)
    merged = np.sort(np.concatenate([ts, extra]))
    merged[1:] = np.maximum(merged[1:], np.nextafter(merged[:-1], np.inf))  # strictly increasing
    return merged


def _flow_rows(result: Mapping[str, Any], fields: Mapping[str, Any]) -> list[dict]:
    """metrics.jsonl rows: about 200 per run (loss, beta), subsampled from the saves."""
    rows = []
    times, loss, beta = result["times"], result["loss"], result["params"]["beta"]
    step = max(1, times.shape[1] // 200)
    for r, point in enumerate(result["grid"]):
        for s in range(0, times.shape[1], step):
            row = {
                "run": r,
                **fields,
                **{k: v for k, v in point.items()},
                "t": float(times[r, s]),
                "loss": float(loss[r, s]),
            }
            row.update({f"beta_{h + 1}": float(beta[r, s, h]) for h in range(beta.shape[-1])})
            rows.append(row)
    return rows


def run_sgd(
    cfg: ConfigDict,
    fields: Mapping[str, Any],
    workdir: records.Workdir | None,
    progress: Progress = print,
) -> dict[str, Any]:
    """SGD (or full-batch GD) on sampled batches via the training engine; seeds x traced grid."""
    model = model_lib.from_config(cfg)
    problem = sgd_problem_of(cfg)
    evaluation = flow.evaluation_loss(model)
    grid, result = engine_experiment.train_cell(
        cfg,
        fields,
        SGD_TRACED,
        problem,
        lambda params, hp: evaluation(params),
        workdir=workdir,
        progress=progress,
    )
    return dict(
        result=result,
        grid=grid,
        arrays=result.arrays(complete=True),
        cfg=cfg,
        seconds={"compile": result.compile_seconds, "run": result.run_seconds},
    )


def sgd_problem_of(cfg: ConfigDict) -> training.Problem:
    """The training problem of an SGD config (`flow.sgd_problem`, init.beta_shape at init.eps)."""
    model = model_lib.from_config(cfg)
    shape = jnp.asarray(cfg.init.beta_shape, cfg.train.dtype)
    w_noise = cfg.init.w_noise

    def init(key: jax.Array, hp: training.HParams) -> PyTree:
        return flow.init_shape(model, hp["init.eps"], shape, key if w_noise else None, w_noise)

    return flow.sgd_problem(
        model, batch_size=cfg.train.batch_size, sampler=cfg.train.sampler, init_fn=init
    )


run = engine_experiment.runner(
    validate,
    _run_train,
    curvature=functools.partial(curvature_study.run, flow_run=run_flow, sgd_run=run_sgd),
    eos=functools.partial(eos.run, make_problem=sgd_problem_of, traced=SGD_TRACED),
)
