"""Associative-recall experiments E1-E6 (notes/assoc_recall.md §7.1): configs -> programs ->
records, figures and checked claims.

Two kinds of experiment:
  flow  gradient flow on the exact population loss from the theory's initialisations; a sweep
        over init.* (eps, beta shape, stage) is one vmapped program (the same parameter shapes).
  sgd   the training engine on sampled batches (collision vectors or token sequences), a sweep
        over optim.lr / init.eps x seeds vmapped in one program.
`variants` (a list of override dicts) and sweeps over model/task fields compile one program each.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape import config as config_lib
from landscape.config import format_bytes
from landscape import gradient_flow, plotting, precision, records, sweeps, training
from landscape.point import params_table
from landscape.recall import flow, theory
from landscape.recall import model as model_lib

FLOW_TRACED = ("init.eps", "init.beta_shape", "init.stage", "init.big")
SGD_TRACED = ("optim.lr", "init.eps")
CLAIM_SETS = ("first_jump", "ei_tail", "later_jumps", "stages", "fig1", "dp_vs_ce", "ablations",
              "none")


def default_config() -> ml_collections.ConfigDict:
    """Every field a recall config may set (defaults: the notes' Fig. 1 setting, §5)."""
    c = ml_collections.ConfigDict()
    c.name = "recall"
    c.experiment = "sgd"                 # flow | sgd
    c.seed = 0
    c.num_seeds = 1
    c.task = dict(k=4, num_responses=4)
    c.model = dict(num_heads=4, window=True, exact_query=True, response_only=True, gamma=0.0,
                   loss="dp", qk="beta", scale=1.0,
                   dtype="")                 # computation dtype ("" = the params'; half = autocast)
    c.init = dict(
        kind="shape",                    # shape: beta = eps*shape | first_jump: I_1 | later_jump: I_h
        eps=0.02, beta_shape=[1.0, 0.5, 0.25, 0.1],
        w_noise=0.0,                     # shape: w(0) = eps * w_noise * N(0, 1)
        stage=2, big=6.0)                # later_jump: h and the macroscopic scale c = c1
    c.flow = dict(
        tau_max=250.0,                   # saves on tau = eps*t in [0, tau_max] (linear) ...
        num_saves=4000,
        zoom=500.0, zoom_saves=5000,     # extra saves within +-zoom time units of the theory's
                                         # jump time (first_jump / later_jump inits), so jump
                                         # widths (O(1) time units) are resolved at any eps
        log_time=False, t_max=1e12,      # ... or log-spaced t in [1e-2, t_max]
        rtol=1e-10, atol=1e-12, max_steps=200_000)
    c.optim = training.default_optim_config()
    c.optim.momentum = 0.9
    c.optim.lr = 1.0
    c.train = dict(batch_size=64, num_steps=3000, log_every=10, chunk_steps=0,
                   sampler="collisions",  # collisions | tokens | population (full-batch GD)
                   dtype="float64", on_nonfinite="stop", **training.default_averaging())
    c.sweep = ml_collections.ConfigDict()
    c.variants = []
    c.claims = "none"
    return c


FLOW_CLAIMS = ("first_jump", "ei_tail", "later_jumps", "stages")
SGD_CLAIMS = ("fig1", "dp_vs_ce", "ablations")


def validate(cfg) -> None:
    """One clear ConfigError for the first field that is unknown, of the wrong kind, out of range
    or inconsistent with another, in any program of the sweep; nothing is built."""
    config_lib.validate_cells(
        cfg, default_config(), lambda c: FLOW_TRACED if c.experiment == "flow" else SGD_TRACED,
        _validate_cell, before=_validate_run)
    config_lib.check_memory(memory_estimate(cfg))  # before compiling: shape arithmetic


def _validate_run(cfg) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims, and which
    groups a sweep or variant may change (flow runs read no optim / train, SGD runs no flow)."""
    choice = config_lib.require_choice
    config_lib.require_text(cfg, "name")
    choice(cfg, "experiment", ("flow", "sgd"))
    choice(cfg, "claims", CLAIM_SETS)
    config_lib.require_seeds(cfg)
    flow_run = cfg.experiment == "flow"
    config_lib.require(cfg.claims not in (SGD_CLAIMS if flow_run else FLOW_CLAIMS), "claims",
                       cfg.claims, "one of " + ", ".join(repr(c) for c in (
                           FLOW_CLAIMS if flow_run else SGD_CLAIMS) + ("none",))
                       + f" for experiment = {cfg.experiment!r}")
    unused = ("optim", "train") if flow_run else ("flow",)
    changed = list(config_lib.flatten(cfg.get("sweep") or {}))
    for variant in cfg.get("variants") or []:
        changed += list(config_lib.flatten(variant)) if isinstance(variant, dict) else []
    for path in changed:
        config_lib.require(path.split(".")[0] not in unused, "experiment", cfg.experiment,
                           f"{'sgd' if flow_run else 'flow'!r} for a sweep or variant over "
                           f"{path} ({cfg.experiment} runs do not read it)")


def _validate_cell(cfg) -> None:
    """Ranges and relations of every field of one program's config."""
    r, choice = config_lib.require_number, config_lib.require_choice
    r(cfg, "task.k", low=2, high=6, integer=True)
    r(cfg, "task.num_responses", low=2, integer=True)
    k = cfg.task.k
    config_lib.require(cfg.model.num_heads in (k - 1, k), "model.num_heads", cfg.model.num_heads,
                       f"k - 1 or k (task.k = {k})")
    choice(cfg, "model.loss", ("dp", "ce"))
    choice(cfg, "model.qk", ("beta", "full"))
    r(cfg, "model.scale", low=0, low_open=True)
    r(cfg, "model.gamma")
    choice(cfg, "model.dtype", precision.COMPUTE_DTYPES)
    choice(cfg, "train.dtype", ("float32", "float64"))
    try:
        model = model_of(cfg)
    except (ValueError, TypeError) as error:
        raise config_lib.field_error(error, "model") from None
    H = cfg.model.num_heads
    choice(cfg, "init.kind", ("shape", "first_jump", "later_jump"))
    r(cfg, "init.eps", low=0, low_open=True)
    config_lib.require_numbers(cfg, "init.beta_shape", length=H,
                               length_of=f"one per head, model.num_heads = {H}")
    r(cfg, "init.w_noise", low=0)
    r(cfg, "init.stage", low=2, high=H, integer=True)
    r(cfg, "init.big", low=0, low_open=True)
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
    if cfg.experiment == "flow":
        config_lib.require(cfg.train.metrics_at == "current", "train.metrics_at",
                           cfg.train.metrics_at, "'current' for experiment = 'flow' (gradient "
                           "flow's trajectory has no stochastic parameters to average)")
        config_lib.require(flow.has_closed_form(model) and cfg.model.loss == "dp",
                           "experiment", "flow", "'sgd' unless the model is the simplified one "
                           "(window, exact_query, response_only, qk='beta') with the DP loss: "
                           "gradient flow runs on the closed-form population loss")
    else:
        config_lib.require(cfg.init.kind == "shape", "init.kind", cfg.init.kind,
                           "'shape' for experiment = 'sgd' (the jump inits are gradient flow's)")
        if cfg.train.sampler != "tokens":
            config_lib.require(flow.has_closed_form(model), "train.sampler",
                               cfg.train.sampler, "'tokens' unless the model is the simplified "
                               "one (the collision sampler and the closed form need A0-A3)")
        config_lib.require(cfg.train.sampler != "population" or cfg.model.loss == "dp",
                           "train.sampler", cfg.train.sampler, "'collisions' or 'tokens' for "
                           "model.loss = 'ce' (the population CE loss has no closed form)")


def needs_x64(cfg) -> bool:
    """Always: plateau gradients are ~1e-6 (notes §7.1); flows and SGD run in float64."""
    return True


def model_of(cfg) -> model_lib.RecallModel:
    """The model of a config at precision.of(train.dtype, model.dtype); with model.dtype = ""
    the computation runs in the parameters' own dtype (dtype None)."""
    fields = dict(cfg.model)
    prec = precision.of(cfg.train.dtype, fields.pop("dtype"))
    return model_lib.RecallModel(k=cfg.task.k, num_responses=cfg.task.num_responses, **fields,
                                 dtype=prec.dtype if cfg.model.dtype else None,
                                 param_dtype=prec.param_dtype)


def _cells(cfg) -> list[tuple[dict, ml_collections.ConfigDict]]:
    """[(fields, cell config)]: one compiled program per variant x structural sweep value."""
    traced = FLOW_TRACED if cfg.experiment == "flow" else SGD_TRACED
    return [(fields, config_lib.with_fields(cfg, fields))
            for fields in config_lib.structural_cells(cfg, traced)]


# ----------------------------------------------------------------------------- memory


_BASELINE_BYTES = 6e8       # the interpreter, JAX and XLA's compiled programs
_MEMORY_FIELDS = ("train.batch_size", "flow.num_saves", "flow.zoom_saves", "num_seeds",
                  "task.k", "task.num_responses", "model.num_heads")


def _cell_bytes(v: dict) -> tuple[float, str]:
    """(bytes, what) of one program, float64: a flow keeps every run's parameters and loss at
    every save (the solver's output and its copies; measured: a few MB, the baseline dominates
    every shipped flow); SGD holds the
    runs' batches (token sequences: one-hot tokens, layer-1 heads and scores per sequence; the
    collision sampler: k! draws per sequence) forward and backward, and the losses on the host."""
    k, R, H = v["task.k"], v["task.num_responses"], v["model.num_heads"]
    perms, vocab = math.factorial(k), k + R
    L = math.factorial(k + 1) + k               # tokens per sequence (task.sequence_length)
    window = k if v["model.window"] else L
    width = (H + 1) * vocab
    params = H + H * window + (width * width if v["model.qk"] != "beta" else 0)
    if v["experiment"] == "flow":
        runs = config_lib.traced_runs(v, FLOW_TRACED) // v["num_seeds"]
        saves = v["flow.num_saves"]
        if v["flow.zoom"] and not v["flow.log_time"] and v["init.kind"] in ("first_jump",
                                                                            "later_jump"):
            saves += v["flow.zoom_saves"]
        need = runs * saves * (3 * params + 8) * 8     # stages, 20 x 8000 saves: 0.56 GB in all
        return _BASELINE_BYTES + need, (f"{runs} flow(s) x {saves} saves of {params} parameters "
                                        "and the loss")
    runs = config_lib.traced_runs(v, SGD_TRACED)
    B, steps = v["train.batch_size"], v["train.num_steps"]
    if v["train.sampler"] == "collisions":
        per_sequence = perms * (H + vocab) * 4
    elif v["train.sampler"] == "tokens":
        per_sequence = L * vocab * (H + 2) + H * L * window + width * L
    else:
        per_sequence, B = 64 * perms * (H + vocab), 1
    need = runs * (4 * B * per_sequence * 8 + 512 * (L * vocab * (H + 2) + H * L * window)
                   * 8) + runs * steps * 8 * 2
    return _BASELINE_BYTES + need, (f"{runs} run(s) x a step on {B} sequences "
                                    f"({format_bytes(4 * per_sequence * 8)} each)")


def memory_estimate(cfg) -> config_lib.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`."""
    traced = FLOW_TRACED if cfg.experiment == "flow" else SGD_TRACED
    return config_lib.estimate_memory(cfg, traced, _cell_bytes, _MEMORY_FIELDS, default_config)


# ----------------------------------------------------------------------------- running


def run(cfg, workdir: records.Workdir, progress=print) -> dict[str, Any]:
    """Run `cfg`, write records, figures and claims; return the summary."""
    validate(cfg)
    workdir.write_config(cfg)
    groups, cells = [], _cells(cfg)
    if progress:
        model = model_of(cells[0][1])
        params = model.init(jax.random.key(0), jnp.zeros((1, model.seq_len), jnp.int32))["params"]
        progress(f"model: RecallModel, {precision.of(cfg.train.dtype, cfg.model.dtype).name}\n"
                 + params_table(params))
    for i, (fields, cell) in enumerate(cells):
        if fields and progress:
            progress("program " + ", ".join(f"{k}={v}" for k, v in fields.items()))
        result = (run_flow(cell, progress) if cfg.experiment == "flow"
                  else run_sgd(cell, fields, workdir, progress))
        result["fields"] = fields
        groups.append(result)
        prefix = f"cell{i}_" if len(cells) > 1 else ""
        workdir.save_arrays(**{prefix + k: v for k, v in result["arrays"].items()})
        if cfg.experiment == "flow":
            workdir.append_metrics(_flow_rows(result, fields))
    claims = CLAIMS[cfg.claims](cfg, groups)
    figures = [str(p) for p in FIGURES[cfg.experiment](cfg, groups, workdir)]
    return workdir.finish(claims, progress, figures=figures,
                          seconds={k: sum(g["seconds"][k] for g in groups)
                                   for k in ("compile", "run")})


def _flow_inits(cfg) -> tuple[list[dict], Any]:
    """The grid of initialisations of a flow config: [{axis: value}], stacked params (R, ...)."""
    axes = config_lib.traced_axes(cfg, FLOW_TRACED)
    grid = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    model = model_of(cfg)
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


def run_flow(cfg, progress=print) -> dict[str, Any]:
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
            save_times = np.stack([_with_zoom(ts, _predicted_jump(cfg, point), f)
                                   for ts, point in zip(save_times, grid)])
    settings = gradient_flow.FlowSettings(rtol=f.rtol, atol=f.atol, max_steps=f.max_steps)
    start = time.perf_counter()
    params, loss, ok = flow.population_flow(model_of(cfg), params0, jnp.asarray(save_times),
                                            settings)
    seconds = time.perf_counter() - start
    if not ok.all():
        bad = [grid[i] for i in np.flatnonzero(~ok)]
        raise config_lib.ConfigError(f"gradient flow stopped early for {bad}: raise flow.max_steps "
                           f"(= {f.max_steps}) or lower flow.t_max / flow.tau_max.")
    if progress:
        progress(f"gradient flow: {len(grid)} runs x {f.num_saves} saves in {seconds:.1f} s "
                 "(compile included)")
    arrays = {"times": save_times, "loss": loss, "beta": params["beta"], "w": params["w"],
              "eps": eps}
    return dict(grid=grid, eps=eps, times=save_times, loss=loss, params=params, arrays=arrays,
                cfg=cfg, seconds={"compile": 0.0, "run": seconds})  # flow time includes compile


def _predicted_jump(cfg, point) -> float:
    init = config_lib.with_fields(cfg, point).init
    stage = init.stage if init.kind == "later_jump" else 1
    return theory.jump_time(cfg.task.k, cfg.task.num_responses, init.eps, stage=stage)


def _with_zoom(ts: np.ndarray, center: float, f) -> np.ndarray:
    """ts plus f.zoom_saves evenly spaced times within +-f.zoom of center (same count per run)."""
    if not np.isfinite(center):  # no jump predicted (stage k): spread the extra saves evenly
        extra = np.linspace(ts[0], ts[-1], f.zoom_saves + 2)[1:-1]
    else:
        extra = np.linspace(max(center - f.zoom, 0.0), min(center + f.zoom, ts[-1]),
                            f.zoom_saves)
    merged = np.sort(np.concatenate([ts, extra]))
    merged[1:] = np.maximum(merged[1:], np.nextafter(merged[:-1], np.inf))  # strictly increasing
    return merged


def _flow_rows(result, fields) -> list[dict]:
    """metrics.jsonl rows: about 200 per run (loss, beta), subsampled from the saves."""
    rows = []
    times, loss, beta = result["times"], result["loss"], result["params"]["beta"]
    step = max(1, times.shape[1] // 200)
    for r, point in enumerate(result["grid"]):
        for s in range(0, times.shape[1], step):
            row = {"run": r, **fields, **{k: v for k, v in point.items()},
                   "t": float(times[r, s]), "loss": float(loss[r, s])}
            row.update({f"beta_{h + 1}": float(beta[r, s, h]) for h in range(beta.shape[-1])})
            rows.append(row)
    return rows


def run_sgd(cfg, fields, workdir, progress=print) -> dict[str, Any]:
    """SGD (or full-batch GD) on sampled batches via the training engine; seeds x traced grid."""
    model = model_of(cfg)
    shape = jnp.asarray(cfg.init.beta_shape)
    w_noise = cfg.init.w_noise

    def init(key, hp):
        return flow.init_shape(model, hp["init.eps"], shape, key if w_noise else None, w_noise)

    problem = flow.sgd_problem(model, batch_size=cfg.train.batch_size, sampler=cfg.train.sampler,
                               init_fn=init)
    grid = sweeps.Grid.make(config_lib.traced_axes(cfg, SGD_TRACED),
                            np.arange(cfg.seed, cfg.seed + cfg.num_seeds))
    result = sweeps.run(problem, cfg.optim, {"optim.lr": cfg.optim.lr, "init.eps": cfg.init.eps},
                        grid, dtype=np.dtype(cfg.train.dtype), progress=progress,
                        workdir=workdir, record_tags=dict(fields), **sweeps.train_options(cfg))
    arrays = {"losses": result.losses, "seeds": result.seeds,
              "snapshot_steps": result.snapshot_steps,
              **{k.replace(".", "_"): v for k, v in result.hparams.items()},
              **{f"snapshot_{k}": v for k, v in result.snapshots.items()}}
    return dict(result=result, grid=grid, arrays=arrays, cfg=cfg,
                seconds={"compile": result.compile_seconds, "run": result.run_seconds})


# ----------------------------------------------------------------------------- claims


# notes §4.4: eps * T_mid of the first jump (k = |R| = 4) measured by the notes' author with GF
NOTES_FIRST_JUMP = {0.2: 140.3, 0.1: 150.4, 0.05: 156.3, 0.02: 160.5, 0.01: 162.1,
                    0.005: 163.1, 0.002: 163.7, 0.001: 163.9}


def _levels(cfg):
    return theory.plateau_levels(cfg.task.k, cfg.task.num_responses)


def claims_first_jump(cfg, groups) -> list[records.Claim]:
    """E1 (notes §4.1, §4.4; checks C4, C5, C7, C8, C9) from I_1."""
    g, = groups
    k, nr = cfg.task.k, cfg.task.num_responses
    L = _levels(cfg)
    eps, times, loss = g["eps"], g["times"], g["loss"]
    T = flow.jump_times(times, loss, L[:2])[:, 0]
    eps_T = eps * T
    theory_eps_T = eps * theory.jump_time(k, nr, eps)
    out = []
    notes = {e: NOTES_FIRST_JUMP[e] for e in eps if e in NOTES_FIRST_JUMP and (k, nr) == (4, 4)}
    if notes:
        measured = {e: float(eps_T[list(eps).index(e)]) for e in notes}
        out.append(records.claim("eps*T_mid of the first jump matches the notes' GF values",
                          measured, notes, all(abs(measured[e] - notes[e]) < 0.3 for e in notes),
                          "notes §4.4 (C8)"))
    order = np.argsort(-eps)
    out.append(records.claim(f"eps*T_mid rises towards pi k k!/(2A sqrt(2(k-1)/k)) = "
                      f"{theory_eps_T[0]:.2f} as eps -> 0 (the plateau lasts ~1/eps, not log 1/eps)",
                      eps_T[order].round(2).tolist(), f"increasing, within 0.5% at eps = "
                      f"{eps.min():g} (at least two eps)", len(eps) > 1 and
                      bool(np.all(np.diff(eps_T[order]) > 0)) and
                      abs(eps_T[order][-1] / theory_eps_T[0] - 1) < 0.005, "notes §4.4 (C8)"))
    drop = L[0] - L[1]
    t10, t90 = flow.crossing_times(times, loss, [L[0] - 0.1 * drop, L[0] - 0.9 * drop]).T
    width = t90 - t10
    if (k, nr) == (4, 4):
        out.append(records.claim("the jump (10% -> 90% of the drop) lasts ~36.1 time units for every eps",
                          width.round(2).tolist(), "36.1 +- 1", np.all(np.abs(width - 36.1) < 1.0),
                          "notes §4.4 (C9)"))
    w, beta = g["params"]["w"], g["params"]["beta"]
    alpha = flow.focus_logit(w)[..., 0]
    conserved = theory.conserved_quantity(alpha, beta[..., 0], k)
    drift = float(np.abs(conserved - conserved[:, :1]).max())
    out.append(records.claim("f(alpha_1) - beta_1^2/4 is conserved along the flow (Thm 3.1(d), '+' sign)",
                      drift, "<= 1e-8", drift <= 1e-8, "notes §4.1 (C5)"))
    others = max(float(np.abs(w[:, :, 1:]).max()), float(np.abs(beta[:, :, 1:]).max()))
    spread = float(np.ptp(w[:, :, 0, 1:], axis=-1).max())
    on_line = float(np.abs(w[:, :, 0] - alpha[..., None] * (np.eye(k)[0] - 1 / k)).max())
    out.append(records.claim("the flow stays on M_1: other heads exactly 0, w^1 = alpha (e_1 - 1/k)",
                      {"other heads": others, "spread of w^1_{i!=1}": spread,
                       "off the line": on_line}, "all <= 1e-12",
                      np.max([others, spread, on_line]) <= 1e-12, "notes §4.1 (C4)"))
    final = loss[:, -1]
    out.append(records.claim(f"plateaus: L(0) = L_0 = {L[0]:.5f}, then the loss settles on L_1 = "
                      f"{L[1]:.5f}", {"L(0)": float(np.abs(loss[:, 0] - L[0]).max()),
                                       "L(end) - L_1": float((final - L[1]).max())},
                      "|L(0) - L_0| <= 1e-12, 0 < L(end) - L_1 < 0.01",
                      np.abs(loss[:, 0] - L[0]).max() <= 1e-12 and
                      np.all((final > L[1]) & (final - L[1] < 0.01)), "notes §3 (C7)"))
    return out


def claims_ei_tail(cfg, groups) -> list[records.Claim]:
    """E1 tail (notes §4.4 regime 2, C10): e^alpha ~ k^2/(4(k-1)) ln t, t ln t (L - L_1) -> 1/4."""
    g, = groups
    k, L = cfg.task.k, _levels(cfg)
    tail = g["times"][0] >= 1e5
    if tail.sum() < 2:
        missing = f"not measured: {int(tail.sum())} saves at t >= 1e5 (raise flow.t_max)"
        return [records.claim("after the jump e^alpha grows linearly in ln t with slope "
                              "k^2/(4(k-1))", missing, f"{k ** 2 / (4 * (k - 1)):.4f} within 3%",
                              False, "notes §4.4 (C10)"),
                records.claim("t ln t (L - L_1) approaches 1/(4c) = 0.25 from below", missing,
                              "within [0.20, 0.25]", False, "notes §4.4 (C10)")]
    t, loss = g["times"][0][tail], g["loss"][0][tail]
    alpha = flow.focus_logit(g["params"]["w"])[0, tail, 0]
    slope = np.polyfit(np.log(t), np.exp(alpha), 1)[0]
    predicted = k ** 2 / (4 * (k - 1))
    product = t * np.log(t) * (loss - L[1])
    return [
        records.claim("after the jump e^alpha grows linearly in ln t with slope k^2/(4(k-1))",
               float(slope), f"{predicted:.4f} within 3%", abs(slope / predicted - 1) < 0.03,
               "notes §4.4 (C10)"),
        records.claim("t ln t (L - L_1) approaches 1/(4c) = 0.25 from below",
               [float(product.min()), float(product.max())], "within [0.20, 0.25]",
               product.min() > 0.2 and product.max() < 0.25, "notes §4.4 (C10)"),
    ]


def claims_later_jumps(cfg, groups) -> list[records.Claim]:
    """E2 (Prop. A.2 with the notes' k/k' correction, §4.5; C11) from I_h."""
    g, = groups
    k, nr = cfg.task.k, cfg.task.num_responses
    L = _levels(cfg)
    out = []
    for r, point in enumerate(g["grid"]):
        c = config_lib.with_fields(cfg, point).init
        beta = g["params"]["beta"][r]
        T = np.inf
        if c.stage < k:
            T = flow.jump_times(g["times"][r:r + 1], g["loss"][r:r + 1],
                                L[c.stage - 1:c.stage + 1])[0, 0]
            predicted = c.eps * theory.jump_time(k, nr, c.eps, stage=c.stage)
            out.append(records.claim(f"stage {c.stage}: eps*T_{c.stage} matches pi k k'!/(2cA sqrt(2(k'-1)"
                              f"/k')) (k' = k - h + 1)", float(c.eps * T), f"{predicted:.2f} within "
                              "0.5%", abs(c.eps * T / predicted - 1) < 0.005, "notes §4.5 (C11)"))
        else:
            moved = float(np.abs(beta[:, -1]).max())
            out.append(records.claim(f"stage {c.stage} = k: no jump (the loss is already ~0) and beta_k "
                              "stays O(eps)", {"max loss": float(g["loss"][r].max()),
                                               "max beta_k / eps": moved / c.eps},
                              "loss < 1e-3, beta_k/eps < 2",
                              g["loss"][r].max() < 1e-3 and moved / c.eps < 2, "notes §4.5"))
        # T = inf at stage k (no jump: the whole run); NaN where no jump was found
        held = beta[g["times"][r] < T][:, :c.stage - 1]
        drift = float(np.abs(held - c.big).max()) if held.size else math.nan
        out.append(records.claim(f"stage {c.stage}: the macroscopic heads (beta = c = 6) stay put until "
                          "the jump", drift if held.size else
                          "not measured: " + ("no jump found" if np.isnan(T)
                                              else "no macroscopic head or no save before the jump"),
                          "<= 1e-10 (notes: < 2e-12)", drift <= 1e-10, "notes §4.5 (a)"))
    return out


def claims_stages(cfg, groups) -> list[records.Claim]:
    """E3 (notes §4.7-4.8; C12, C13): order follows beta(0), jump times -> the recursion."""
    g, = groups
    k, nr = cfg.task.k, cfg.task.num_responses
    L = _levels(cfg)
    out = []
    shapes = sorted({tuple(config_lib.with_fields(cfg, p).init.beta_shape) for p in g["grid"]})
    eps_min = g["eps"].min()
    limit_taus = {}
    for shape in shapes:
        runs = [r for r, p in enumerate(g["grid"])
                if tuple(config_lib.with_fields(cfg, p).init.beta_shape) == shape]
        smallest = min(runs, key=lambda r: g["eps"][r])
        prediction = theory.vanishing_init_jumps(np.asarray(shape), k, nr)
        tau = g["eps"][smallest] * flow.jump_times(g["times"][smallest:smallest + 1],
                                                  g["loss"][smallest:smallest + 1], L)[0]
        limit_taus[shape] = tau
        beta = g["params"]["beta"][smallest:smallest + 1]
        order = flow.activation_order(g["times"][smallest:smallest + 1], beta, threshold=1.0)[0]
        expected = [int(h) for h in np.argsort(-np.asarray(shape), kind="stable")[:k - 1]]
        out.append(records.claim(f"beta(0) = {eps_min:g} x {list(shape)}: heads activate in decreasing "
                          "order of beta(0); the last head never does",
                          [h + 1 for h in order], [h + 1 for h in expected], order == expected,
                          "notes §4.7 (C12)"))
        out.append(records.claim(f"beta(0) = {eps_min:g} x {list(shape)}: jump times eps*T_m match the "
                          "vanishing-init recursion", tau.round(2).tolist(),
                          f"{np.round(prediction['taus'], 2).tolist()} within 0.3%",
                          np.allclose(tau, prediction["taus"], rtol=3e-3), "notes §4.8 (C13)"))
        if len(runs) > 2:
            steps = np.asarray(prediction["taus"])
            distance = []
            for r in sorted(runs, key=lambda r: -g["eps"][r]):
                tau_r = g["eps"][r] * g["times"][r]
                step_fn = L[np.searchsorted(steps, tau_r, side="right")]
                distance.append(float(np.trapezoid(np.abs(g["loss"][r] - step_fn), tau_r)))
            out.append(records.claim(f"{list(shape)}: L against eps*t collapses onto the predicted step "
                              "function as eps -> 0 (L1 distance in tau)",
                              np.round(distance, 3).tolist(), "decreasing with eps",
                              bool(np.all(np.diff(distance) < 0)), "notes §4.8 (C13)"))
    by_sorted = {}
    for shape, tau in limit_taus.items():
        by_sorted.setdefault(tuple(sorted(shape)), []).append(tau)
    for same in by_sorted.values():
        if len(same) > 1:
            spread = float(np.ptp(np.stack(same), axis=0).max())
            out.append(records.claim("permuting beta(0) permutes the heads but leaves the jump times "
                              "unchanged", spread, "spread <= 1e-6 in tau", spread <= 1e-6,
                              "notes §4.7 (C12)"))
    return out


def _longest_run(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True in a 1-D mask; length 0 if none."""
    best, best_start, start = 0, 0, 0
    for i, v in enumerate(list(mask) + [False]):
        if not v:
            if i - start > best:
                best, best_start = i - start, start
            start = i + 1
    return best_start, best


def _stagewise(loss_RS: np.ndarray, levels: np.ndarray, tol: float) -> np.ndarray:
    """(R, k-1) dwell fractions on the intermediate plateaus L_0..L_{k-2}."""
    return np.array([[_longest_run(np.abs(l - level) < tol)[1] / len(l) for level in levels[:-1]]
                     for l in loss_RS])


def _label(group, default: str) -> str:
    """The overrides that define a program, e.g. 'model.loss=ce, optim.lr=0.3'."""
    return ", ".join(f"{k}={v}" for k, v in group["fields"].items()) or default


def claims_fig1(cfg, groups) -> list[records.Claim]:
    """E4 (Fig. 1, notes §5): SGD with momentum shows the plateaus, the order and the time map."""
    out = []
    for g in groups:
        c, res = g["cfg"], g["result"]
        label = _label(g, "SGD")
        L = _levels(c)
        loss = res.snapshots["eval_loss"]                        # (R, S) exact population loss
        dwell = _stagewise(loss, L, 0.01)
        out.append(records.claim(f"{label}: the population loss rests on L_0..L_{c.task.k - 2} "
                          f"({np.round(L[:-1], 4).tolist()}) and ends below 0.01",
                          {"dwell fraction (min over runs)": dwell.min(axis=0).round(3).tolist(),
                           "final": float(loss[:, -1].max())},
                          ">= 0.03 of the run on each, final < 0.01",
                          dwell.min() >= 0.03 and loss[:, -1].max() < 0.01, "Fig. 1, notes §5"))
        beta = res.snapshots["beta"]
        shape = np.asarray(c.init.beta_shape)
        expected = [int(h) for h in np.argsort(-shape, kind="stable")[:c.task.k - 1]]
        orders = flow.activation_order(res.snapshot_steps, beta, threshold=1.0)
        last = int(np.argmin(shape))
        out.append(records.claim(f"{label}: heads activate in decreasing order of beta(0); the smallest "
                          "stays O(eps)", {"orders": [[h + 1 for h in o] for o in orders],
                                           "max final |beta| of the last head":
                                           float(np.abs(beta[:, -1, last]).max())},
                          {"order": [h + 1 for h in expected], "last head": "< 0.1"},
                          all(o == expected for o in orders) and
                          np.abs(beta[:, -1, last]).max() < 0.1, "Fig. 1, notes §4.6-4.7"))
        w_sum = res.snapshots["w_sum"]
        drift = float(np.abs(w_sum - w_sum[:, :1]).max())
        if c.optim.name == "sgd" and not c.optim.weight_decay:
            out.append(records.sanity(f"{label}: 1^T w^h is conserved under SGD with momentum",
                                      drift, "<= 1e-10", drift <= 1e-10, "notes §4.1 (C3)"))
        if c.model.loss == "dp" and flow.has_closed_form(model_of(c)):
            out.append(_gf_time_map_claim(c, res, label))
    return out


def _gf_time_map_claim(c, res, label):
    """SGD jump steps against gradient flow from the same init, t = lr * steps / (1 - mu)."""
    model = model_of(c)
    eps = float(res.hparams["init.eps"][0])
    params0 = flow.init_shape(model, eps, list(c.init.beta_shape))
    t_max = 1.5 * c.optim.lr * c.train.num_steps / (1 - c.optim.momentum)
    ts = jnp.linspace(0.0, t_max, 6000)[None]
    params, loss, ok = flow.population_flow(model, jax.tree.map(lambda x: x[None], params0), ts)
    L = _levels(c)
    per_step = c.optim.lr / (1 - c.optim.momentum)
    predicted = flow.jump_times(np.asarray(ts), loss, L)[0] / per_step
    measured = flow.jump_times(np.tile(res.snapshot_steps, (res.num_runs, 1)),
                               res.snapshots["eval_loss"], L)
    ratio = measured / predicted
    return records.claim(f"{label}: SGD jump steps match gradient flow with t = lr * steps / (1 - mu)",
                  {"predicted steps": predicted.round(0).tolist(),
                   "measured/predicted (min, max)": [float(np.nanmin(ratio)),
                                                     float(np.nanmax(ratio))]},
                  "ratio in [0.85, 1.3] (notes C16: ~10-20% late at lr 1, mu 0.9)",
                  np.all((ratio > 0.85) & (ratio < 1.3)), "notes C16")


def claims_dp_vs_ce(cfg, groups) -> list[records.Claim]:
    """E5 (notes §3, C15): DP and CE give the same stages in the same order."""
    out = claims_fig1(cfg, groups)
    orders = []
    for g in groups:
        res = g["result"]
        orders.append(flow.activation_order(res.snapshot_steps, res.snapshots["beta"], 1.0))
    losses = {g["cfg"].model.loss for g in groups}
    # the same order of all k - 1 heads in every run: runs where no head (or not every one)
    # activates show no order
    full = all(len(o) == g["cfg"].task.k - 1 for g, run in zip(groups, orders) for o in run)
    same = full and all(o == orders[0][0] for run in orders for o in run)
    measured = [[[h + 1 for h in o] for o in run] for run in orders]
    if not {"dp", "ce"} <= losses:
        measured = f"not measured: losses {sorted(losses)} (DP and CE both needed)"
    out.append(records.claim("DP and CE activate the heads in the same order", measured,
                      "identical, all k - 1 heads", same and {"dp", "ce"} <= losses,
                      "notes §3, C15"))
    return out


def claims_ablations(cfg, groups) -> list[records.Claim]:
    """E6 (notes §2.4 table): which simplifications the stage-wise picture needs."""
    out = []
    for g in groups:
        c, res = g["cfg"], g["result"]
        label = _label(g, "simplified model")
        L = _levels(c)
        dwell = _stagewise(res.snapshots["eval_loss"], L, 0.03)
        # k = 2 has no plateau after L_0: the stage-wise picture cannot be seen either way
        stagewise = bool((dwell[:, 1:] >= 0.03).all()) if L.size > 2 else None
        naive_v = not c.model.response_only
        expected = "not stage-wise" if naive_v else "stage-wise"
        ok = stagewise is not None and (
            (not stagewise) if naive_v else
            stagewise and res.snapshots["eval_loss"][:, -1].max() < 0.05)
        out.append(records.claim(f"{label}: {expected}", {"dwell on L_1..": dwell[:, 1:].round(3).tolist(),
                                                    "final loss": float(res.snapshots[
                                                        "eval_loss"][:, -1].max())},
                          expected, ok, "notes §2.4 table"))
    return out


CLAIMS = {"first_jump": claims_first_jump, "ei_tail": claims_ei_tail,
          "later_jumps": claims_later_jumps, "stages": claims_stages, "fig1": claims_fig1,
          "dp_vs_ce": claims_dp_vs_ce, "ablations": claims_ablations,
          "none": lambda cfg, groups: []}


# ----------------------------------------------------------------------------- figures


def figures_flow(cfg, groups, workdir):
    if cfg.claims == "stages":
        return [_plot_stages(cfg, g, workdir, i) for i, g in enumerate(groups)]
    paths = []
    for i, g in enumerate(groups):
        L = _levels(g["cfg"])
        fig, axes = plotting.subplots(1, 2, width=4.6, height=3.3)
        ax_loss, ax_beta = axes[0]
        log_time = g["cfg"].flow.log_time
        for r, point in enumerate(g["grid"]):
            x = g["times"][r] if log_time else g["eps"][r] * g["times"][r]
            label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in point.items())
            line, = ax_loss.plot(x, g["loss"][r], label=label, linewidth=1.2)
            if r == int(np.argmin(g["eps"])) or len(g["grid"]) <= 4:
                for h in range(g["params"]["beta"].shape[-1]):
                    ax_beta.plot(x, g["params"]["beta"][r, :, h], color=line.get_color(),
                                 alpha=1.0 - 0.2 * h, linewidth=1)
        for level in L:
            ax_loss.axhline(level, color="gray", linestyle=":", linewidth=0.8)
        xlabel = "t" if log_time else r"$\varepsilon t$"
        for ax in (ax_loss, ax_beta):
            ax.set_xlabel(xlabel)
            if log_time:
                ax.set_xscale("log")
        ax_loss.set(ylabel="population loss", title="loss (dotted: plateau levels $L_m$)")
        ax_beta.set(ylabel=r"$\beta_h$", title=r"$\beta_h(t)$")
        if 1 < len(g["grid"]) <= 10:
            ax_loss.legend(fontsize=6)
        paths.append(plotting.save(fig, workdir.figure_path(f"flow{i}")))
        if cfg.claims == "first_jump":
            paths.append(_plot_first_jump_scaling(cfg, g, workdir))
    return paths


def _plot_stages(cfg, g, workdir, index):
    """E3: per beta(0) shape, L against eps*t for every eps (colour) with the eps -> 0 step
    function of the recursion (dashed), and beta_h at the smallest eps."""
    L = _levels(cfg)
    shapes = []
    for point in g["grid"]:
        shape = tuple(config_lib.with_fields(cfg, point).init.beta_shape)
        if shape not in shapes:
            shapes.append(shape)
    eps_values = sorted(set(g["eps"]), reverse=True)
    colors = plotting.plt.cm.viridis(np.linspace(0, 0.9, len(eps_values)))
    fig, axes = plotting.subplots(2, len(shapes), width=3.0, height=2.5, sharex=True)
    for j, shape in enumerate(shapes):
        runs = [r for r, p in enumerate(g["grid"])
                if tuple(config_lib.with_fields(cfg, p).init.beta_shape) == shape]
        for r in runs:
            color = colors[eps_values.index(g["eps"][r])]
            axes[0, j].plot(g["eps"][r] * g["times"][r], g["loss"][r], color=color,
                            linewidth=1.2, label=f"eps={g['eps'][r]:g}")
        taus = theory.vanishing_init_jumps(np.asarray(shape), cfg.task.k,
                                           cfg.task.num_responses)["taus"]
        x = np.linspace(0, cfg.flow.tau_max, 3000)
        axes[0, j].plot(x, L[np.searchsorted(taus, x, side="right")], "k--", linewidth=1,
                        label="eps -> 0 limit")
        axes[0, j].set_title(f"beta(0) = eps x {list(shape)}", fontsize=8)
        smallest = min(runs, key=lambda r: g["eps"][r])
        for h in range(g["params"]["beta"].shape[-1]):
            axes[1, j].plot(g["eps"][smallest] * g["times"][smallest],
                            g["params"]["beta"][smallest, :, h], label=f"head {h + 1}")
        axes[1, j].set_xlabel(r"$\varepsilon t$")
    axes[0, 0].set_ylabel("population loss")
    axes[1, 0].set_ylabel(rf"$\beta_h$ at eps = {min(eps_values):g}")
    axes[0, -1].legend(fontsize=6)
    axes[1, -1].legend(fontsize=6)
    return plotting.save(fig, workdir.figure_path(f"stages{index}"))


def _plot_first_jump_scaling(cfg, g, workdir):
    k, nr = cfg.task.k, cfg.task.num_responses
    L = _levels(cfg)
    eps = g["eps"]
    eps_T = eps * flow.jump_times(g["times"], g["loss"], L[:2])[:, 0]
    fig, axes = plotting.subplots(1, 1, width=4.2, height=3.2)
    ax = axes[0, 0]
    ax.plot(eps, eps_T, "o-", label="gradient flow")
    ax.axhline(eps[0] * theory.jump_time(k, nr, eps[0]), color="k", linestyle="--",
               label=r"$\pi k\,k!/(2A\sqrt{2(k-1)/k})$")
    ax.set(xscale="log", xlabel=r"$\varepsilon$", ylabel=r"$\varepsilon\,T_{mid}$",
           title="first plateau length ~ 1/eps")
    ax.legend(fontsize=7)
    return plotting.save(fig, workdir.figure_path("first_jump_scaling"))


def figures_sgd(cfg, groups, workdir):
    """Fig. 1: loss and beta over training; layer-1 attention at a step inside each plateau."""
    paths = []
    for i, g in enumerate(groups):
        c, res = g["cfg"], g["result"]
        L = _levels(c)
        steps = res.snapshot_steps
        fig, axes = plotting.subplots(1, 2, width=4.4, height=3.2)
        for level in L:
            axes[0, 0].axhline(level, color="gray", linestyle=":", linewidth=0.8)
        axes[0, 0].plot(steps, res.snapshots["eval_loss"].T, linewidth=1)
        axes[0, 0].set(xlabel="step", ylabel="population loss", title="loss (dotted: $L_m$)")
        beta = res.snapshots["beta"][0]
        for h in range(beta.shape[-1]):
            axes[0, 1].plot(steps, beta[:, h], label=f"$\\beta_{h + 1}$")
        axes[0, 1].set(xlabel="step", ylabel=r"$\beta_h$", title="second-layer scales (seed 0)")
        axes[0, 1].legend(fontsize=7)
        paths.append(plotting.save(fig, workdir.figure_path(f"fig1_loss_beta{i}")))

        loss0 = res.snapshots["eval_loss"][0]
        runs = [_longest_run(np.abs(loss0 - level) < 0.01) for level in L]
        picks = [start + length // 2 for start, length in runs if length]
        fig, axes = plotting.subplots(1, len(picks), width=2.6, height=2.4)
        for ax, p in zip(axes[0], picks):
            attention = res.snapshots["attention"][0, p]
            plotting.heatmap(ax, attention, row_labels=[f"head {h + 1}" for h in
                                                        range(attention.shape[0])],
                             col_labels=[str(o + 1) for o in range(attention.shape[1])],
                             title=f"step {steps[p]} (L = {loss0[p]:.3f})", vmin=0, vmax=1,
                             colorbar=ax is axes[0, -1])
            ax.set_xlabel("offset")
        paths.append(plotting.save(fig, workdir.figure_path(f"fig1_attention{i}")))
    return paths


FIGURES = {"flow": figures_flow, "sgd": figures_sgd}
