"""Attention with Markov experiments (notes/markov.md §8, §11): configs -> compiled sweeps ->
records, figures and checked claims.

experiment = "train": single- or multi-layer transformers (the theory model without LayerNorm, or
the GPT-2 model of the experiments) on fresh Markov sequences; p, q and the learning rate are
traced, so a (p, q) grid x seeds is one program per model variant (tied / untied, depth, family).
experiment = "landscape": exact Hessians at the constructed points against the closed forms.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape import config as config_lib
from landscape.config import format_bytes
from landscape import backend, curvature, plotting, precision, records, sweeps, training
from landscape.point import params_table
from landscape.markov import model as model_lib
from landscape.markov import points, task, theory, trap_study

TRACED = ("chain.p", "chain.q", "optim.lr")
CLAIM_SETS = ("fig1", "fig3", "fig4", "fig5", "appendix_d", "trap", "landscape", "none")


def default_config() -> ml_collections.ConfigDict:
    """Every field a Markov config may set; defaults are the notes' CPU-sized Fig. 3 setting."""
    c = ml_collections.ConfigDict()
    c.name = "markov"
    c.experiment = "train"                # train | landscape
    c.seed = 0
    c.num_seeds = 1
    c.chain = dict(num_states=2, p=0.5, q=0.8, initial="stationary")   # q unused when S > 2
    c.model = dict(family="theory", d=4, seq_len=128, num_layers=1, num_heads=1, mlp_width=0,
                   tied=True, activation="relu", layer_norm=False,      # mlp_width 0 = 4d
                   dtype="")     # computation dtype: "" = train.dtype; float16 / bfloat16 autocast
    c.optim = training.default_optim_config()
    # Table 2 / the authors' OneCycle: AdamW(0.9, 0.95), wd 1e-3 on Linear weights only, 2%
    # linear warm-up from lr/100, cosine to lr/5 (notes §3.3)
    c.optim.update(name="adamw", b1=0.9, b2=0.95, weight_decay=1e-3, schedule="warmup_cosine",
                   initial_lr_fraction=0.01, final_lr_fraction=0.2)
    c.optim.lr = 1e-3
    c.train = dict(batch_size=16, num_steps=1000, log_every=50, warmup_fraction=0.02,
                   targets="hard",        # hard: sampled next tokens (as trained); soft: P[x_n]
                   eval_sequences=64, dtype="float32", on_nonfinite="stop",
                   **training.default_averaging())
    c.sweep = ml_collections.ConfigDict()
    c.sweep_zip = False                   # pair the traced axes instead of their product
    c.variants = []
    c.landscape = dict(points=[[0.5, 0.8], [0.2, 0.3], [0.9, 0.9], [0.3, 0.6]], d=4, seq_len=8,
                       multistate_p=[0.5, 0.85], multistate_states=5, multistate_seq_len=4)
    c.claims = "none"
    return c


def validate(cfg) -> None:
    """One clear ConfigError for the first field that is unknown, of the wrong kind, out of range
    or inconsistent with another, in any program of the sweep; nothing is built."""
    config_lib.validate_cells(cfg, default_config(), TRACED, _validate_cell, before=_validate_run)
    config_lib.check_memory(memory_estimate(cfg))  # before compiling: shape arithmetic


def _validate_run(cfg) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims, sweep_zip."""
    choice = config_lib.require_choice
    config_lib.require_text(cfg, "name")
    choice(cfg, "experiment", ("train", "landscape"))
    choice(cfg, "claims", CLAIM_SETS)
    config_lib.require_seeds(cfg)
    if cfg.experiment == "landscape":
        config_lib.require_empty_sweep(cfg, "experiment = 'landscape'")
        choice(cfg, "claims", ("landscape", "none"))
    else:
        config_lib.require(cfg.claims != "landscape", "claims", cfg.claims,
                           "one of the training claims (or 'none') for experiment = 'train'; "
                           "'landscape' goes with experiment = 'landscape'")
    if cfg.claims == "trap":
        config_lib.require(not any(k in ("chain.p", "chain.q") for k in config_lib.flatten(
            cfg.sweep)), "sweep", cfg.sweep, "without chain.p / chain.q axes "
            "for claims = 'trap' (one chain; the study sweeps depth and precision)")
    if cfg.sweep_zip:
        lengths = {k: len(v) for k, v in config_lib.flatten(cfg.sweep).items()
                   if k in TRACED and isinstance(v, (list, tuple))}
        config_lib.require(len(set(lengths.values())) <= 1, "sweep_zip", True,
                           "False unless the traced sweep axes have equal lengths (they are "
                           "paired): " + ", ".join(f"sweep.{k} has {n}" for k, n in lengths.items()))


def _validate_cell(cfg) -> None:
    """Ranges and relations of every field of one program's config."""
    r, choice = config_lib.require_number, config_lib.require_choice
    r(cfg, "chain.num_states", low=2, integer=True)
    r(cfg, "chain.p", low=0, high=1, low_open=True, high_open=True)
    r(cfg, "chain.q", low=0, high=1, low_open=True, high_open=True)
    choice(cfg, "chain.initial", ("stationary", "uniform"))
    choice(cfg, "model.family", ("theory", "gpt"))
    choice(cfg, "model.activation", ("relu", "gelu"))
    choice(cfg, "train.dtype", ("float32", "float64"))
    choice(cfg, "model.dtype", precision.COMPUTE_DTYPES)
    config_lib.require(cfg.model.dtype != "float64" or cfg.train.dtype == "float64", "model.dtype",
                       cfg.model.dtype, "float64 only with train.dtype = 'float64' (it needs "
                       "64-bit JAX); float16 / bfloat16 for mixed precision")
    r(cfg, "model.d", low=1, integer=True)
    r(cfg, "model.seq_len", low=2, integer=True)
    r(cfg, "model.num_layers", low=1, integer=True)
    r(cfg, "model.num_heads", low=1, high=cfg.model.d, integer=True)
    config_lib.require(cfg.model.d % cfg.model.num_heads == 0, "model.num_heads",
                       cfg.model.num_heads, f"a divisor of model.d = {cfg.model.d} (heads split d)")
    r(cfg, "model.mlp_width", low=0, integer=True)
    config_lib.require(not (cfg.model.family == "theory" and cfg.model.layer_norm),
                       "model.layer_norm", True, "False for the theory model (notes §3.1 has no "
                       "LayerNorm); use model.family = 'gpt' for the GPT-2 blocks")
    try:
        model_of(cfg)
    except (ValueError, TypeError) as error:
        raise config_lib.ConfigError(f"config.model: {error}") from None
    training.validate_optim(cfg)
    r(cfg, "optim.lr", low=0, low_open=True)
    config_lib.require_training_steps(cfg)
    config_lib.require_schedule(cfg, warmup_set_by="train.warmup_fraction")
    r(cfg, "train.warmup_fraction", low=0, high=1)
    r(cfg, "train.eval_sequences", low=1, integer=True)
    choice(cfg, "train.targets", ("hard", "soft"))
    config_lib.require_nonfinite_policy(cfg)
    training.validate_averaging(cfg)
    S = cfg.chain.num_states
    if cfg.claims in ("fig3", "appendix_d", "trap"):
        config_lib.require(S == 2, "chain.num_states", S,
                           f"2 for claims = {cfg.claims!r} (they read the binary chain's f0, f1)")
    if cfg.claims == "appendix_d":
        config_lib.require(cfg.model.family == "theory", "model.family", cfg.model.family,
                           "'theory' for claims = 'appendix_d' (App. D fits the theory model)")
    if cfg.claims == "fig5":
        config_lib.require(S >= 3, "chain.num_states", S,
                           "an integer >= 3 for claims = 'fig5' (the multi-state chain)")
    _validate_landscape(cfg)


def _validate_landscape(cfg) -> None:
    r, ls = config_lib.require_number, cfg.landscape
    pts = ls.points
    config_lib.require(all(isinstance(pt, (list, tuple)) and len(pt) == 2 and
                            all(0 < v < 1 for v in pt) for pt in pts), "landscape.points", pts,
                       "a list of [p, q] points in (0, 1)^2, e.g. [[0.5, 0.8], [0.2, 0.3]]")
    config_lib.require_numbers(cfg, "landscape.multistate_p", low=0, high=1, low_open=True,
                               high_open=True, nonempty=False)
    config_lib.require(len(pts) + len(ls.multistate_p) > 0, "landscape.points", pts,
                       "a non-empty list when landscape.multistate_p is empty (nothing to check)")
    r(cfg, "landscape.d", low=1, integer=True)
    r(cfg, "landscape.seq_len", low=1, integer=True)
    r(cfg, "landscape.multistate_states", low=3, integer=True)
    r(cfg, "landscape.multistate_seq_len", low=1, integer=True)


def needs_x64(cfg) -> bool:
    return cfg.experiment == "landscape" or cfg.train.dtype == "float64"


def model_of(cfg) -> model_lib.MarkovModel:
    """The Flax module of cfg: param_dtype = train.dtype, dtype = model.dtype (or the same)."""
    fields = dict(cfg.model)
    fields["mlp_width"] = fields["mlp_width"] or None
    prec = precision.of(cfg.train.dtype, fields.pop("dtype"))
    return model_lib.MarkovModel(num_states=cfg.chain.num_states, dtype=prec.dtype,
                                 param_dtype=prec.param_dtype, **fields)


# ----------------------------------------------------------------------------- memory


_BASELINE_BYTES = 6e8       # the interpreter, JAX and XLA's compiled programs
_MEMORY_FIELDS = ("train.batch_size", "train.eval_sequences", "num_seeds", "model.seq_len",
                  "model.num_layers", "model.num_heads", "model.d", "landscape.seq_len",
                  "landscape.multistate_seq_len")


def _sequence_floats(N: int, S: int, d: int, layers: int, heads: int, mlp: int) -> int:
    """Activations of one sequence's forward pass: per layer q, k, v, the residual stream, the
    LayerNorms and the MLP's hidden layer, and the attention scores (heads x N x N, with the mask
    and softmax) where they are held whole (model.scores_held_whole); the logits. Longer sequences
    go through the tiled attention, which keeps each row's log-sum-exp only."""
    scores = 3 * heads * N * N if model_lib.scores_held_whole(N) else heads * N
    return layers * (scores + 12 * N * d + 3 * N * (mlp or 4 * d)) + 3 * N * S


def _landscape_bytes(v: dict) -> tuple[float, str]:
    """The dense Hessian (run_landscape): 256 columns at a time of the linearised gradient over
    the exact population (all S^N sequences, at most 2^16; Monte Carlo 256 beyond), float64."""
    worst = (0.0, "")
    for S, N, d in ((2, v["landscape.seq_len"], v["landscape.d"]),
                    (v["landscape.multistate_states"], v["landscape.multistate_seq_len"], 2)):
        sequences = S ** N if S ** N <= points.EXACT_LIMIT else 256
        num_params = S * d + N * d + 11 * d * d + d * S
        columns = min(num_params, 256)
        need = 2 * columns * sequences * _sequence_floats(N, S, d, 1, 1, 0) * 8 \
            + num_params ** 2 * 8 * 3
        worst = max(worst, (need, f"the dense Hessian ({num_params} parameters) over all "
                                  f"{S}^{N} = {S ** N} sequences, {columns} columns at a time"))
    return _BASELINE_BYTES + worst[0], worst[1]


def _cell_bytes(v: dict) -> tuple[float, str]:
    """(bytes, what) of one program: the runs a step holds at once (a group of runs per device,
    `runs_per_group`) x a batch's forward and backward (four times its activations), the
    evaluation sequences' forward, the losses kept on the host and a baseline."""
    if v["experiment"] == "landscape":
        return _landscape_bytes(v)
    B, N, E, steps = (v["train.batch_size"], v["model.seq_len"], v["train.eval_sequences"],
                      v["train.num_steps"])
    size = np.dtype(v["train.dtype"]).itemsize
    floats = _sequence_floats(N, v["chain.num_states"], v["model.d"], v["model.num_layers"],
                              v["model.num_heads"], v["model.mlp_width"])
    runs = config_lib.traced_runs(v, TRACED, zipped=v["sweep_zip"])
    devices = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    group = max(1, _SCORES_PER_GROUP // (B * N * N))
    at_once = min(runs, group * (devices or 1))
    # the backward pass's scores, weights and their gradients, chunk by chunk (tiled attention)
    chunk = 4 * model_lib.chunk_scores(N, v["model.num_heads"])
    step = (at_once * ((4 * B + 2 * E) * floats + chunk) * size
            + 3 * at_once * (B + E) * (N + 1) * 4)
    # the snapshot at step 0 is vmapped over every run at once (training.train), not in groups:
    # one score matrix per sequence and layer where they are held whole (fig4_paper, 245 runs:
    # 1.9 GB peak RSS), else a chunk of them (fig1_paper, 8 layers at N = 512: 0.87 GB)
    held = (v["model.num_layers"] * v["model.num_heads"] * N * N
            if model_lib.scores_held_whole(N) else 0)
    first = runs * (E * (held + 4 * N) + chunk) * size
    kept = runs * steps * 4 * 2
    if first > step:
        return _BASELINE_BYTES + first + kept, (
            f"the first evaluation of all {runs} run(s) at once, {E} sequences of {N} tokens each")
    return _BASELINE_BYTES + step + kept, (
        f"{at_once} of {runs} run(s) at once x (a step on {B} sequences of {N} tokens + the "
        f"evaluation of {E}), {format_bytes(4 * floats * size)} per sequence")


def memory_estimate(cfg) -> config_lib.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`."""
    return config_lib.estimate_memory(cfg, TRACED, _cell_bytes, _MEMORY_FIELDS,
                                      default_config)


# ----------------------------------------------------------------------------- training problem


def _kernel(cfg, hp):
    if cfg.chain.num_states == 2:
        return task.binary_kernel(hp["chain.p"], hp["chain.q"])
    return task.symmetric_kernel(cfg.chain.num_states, hp["chain.p"])


def _init_law(cfg, kernel):
    S = cfg.chain.num_states
    return task.stationary(kernel) if cfg.chain.initial == "stationary" else jnp.ones(S) / S


def _decay_mask(params):
    """Weight decay on Linear weights only (W_*, an untied head), as the authors' AdamW."""
    def decayed(path, _):
        name = jax.tree_util.keystr(path, simple=True, separator="/").split("/")[-1]
        return name.startswith("W_") or name in ("a", "A", "lm_head")
    return jax.tree_util.tree_map_with_path(decayed, params)


def make_problem(cfg) -> training.Problem:
    model = model_of(cfg)
    dtype = jnp.dtype(cfg.train.dtype)
    B, N, E = cfg.train.batch_size, cfg.model.seq_len, cfg.train.eval_sequences
    eval_key = jax.random.key(10_000 + cfg.seed)       # one test set per (p, q): common numbers

    def loss(params, key, hp):
        kernel = _kernel(cfg, hp)
        # the sequential sampler: faster than the associative scan on CPU (notes on task.sample);
        # elsewhere the scan (the same sequences, landscape/backend.py)
        sampler = task.sample_sequential if backend.cpu_tuned() else task.sample
        x = sampler(key, kernel, _init_law(cfg, kernel), B, N + 1)
        x = training.batch_share(x)         # this device's sequences when a run splits its batch
        log_probs = model.apply({"params": params}, x[:, :N])
        if cfg.train.targets == "hard":
            return -jnp.take_along_axis(log_probs, x[:, 1:, None], axis=-1).mean(), {}
        share = x.shape[0]
        return task.population_cross_entropy(log_probs, jnp.full(share, 1.0 / share),
                                             task.soft_targets(x[:, :N], kernel)), {}

    def snapshot(params, hp):
        kernel = _kernel(cfg, hp)
        x = task.sample_sequential(eval_key, kernel, _init_law(cfg, kernel), E, N)
        log_probs = model.apply({"params": params}, x)
        out = {"test_loss": task.population_cross_entropy(
            log_probs, jnp.full(E, 1.0 / E), task.soft_targets(x, kernel))}
        if cfg.chain.num_states == 2:       # mean predicted P(x_{n+1} = 1 | x_n = 0 or 1), Fig. 3/4
            prob_one = jnp.exp(log_probs[..., 1])
            for state in (0, 1):
                mask = x == state
                out[f"f{state}"] = jnp.sum(prob_one * mask) / jnp.maximum(mask.sum(), 1)
        return out

    return training.Problem(
        init=lambda key, hp: jax.tree.map(lambda a: a.astype(dtype),
                                          model_lib.init_params(key, model)),
        loss=loss, learning_rates=lambda hp: hp["optim.lr"], snapshot=snapshot,
        weight_decay_mask=_decay_mask, runs_per_group=runs_per_group(cfg),
        log_grad_zeros=precision.is_half(model.dtype),
        batch_size=B if B * N * N >= _SCORES_TO_SPLIT else None)


# Runs vmapped together hold at most about this many attention scores (~2 MiB), so that a step
# stays in cache; a loop goes over such groups (40 runs at N = 128 on 2 cores: 18 ms per step
# in groups of 2, 21 ms in groups of 4, 29 ms in one vmap).
_SCORES_PER_GROUP = 2 ** 19


# A single run splits its batch over devices (Problem.batch_size) only from this many attention
# scores per step: the split costs ~0.5 ms of cross-device synchronisation per step on CPU
# (2 host devices, one run: N = 1024, 20 ms split vs 30 ms on one device; N = 128, 1.4 vs 0.9 ms).
_SCORES_TO_SPLIT = 2 ** 22


def model_table(cfg) -> str:
    """The model summary: each parameter's name, shape, dtype and count (landscape.params_table),
    and the precision; from the shapes alone (nothing is compiled)."""
    model = model_of(cfg)
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype),
                          jax.eval_shape(functools.partial(model_lib.init_params, model=model),
                                         jax.random.key(0)))
    params = jax.tree.map(lambda a: a.astype(model.param_dtype), params)
    prec = precision.of(cfg.train.dtype, cfg.model.dtype)
    return f"{model.family} model, {prec.name}:\n{params_table(params)}"


def runs_per_group(cfg) -> int:
    """Runs per vmapped group (2 at N = 128): the scores of a run's B sequences of length N,
    with the tiles' masked halves, are fewer than B N^2."""
    B, N = cfg.train.batch_size, cfg.model.seq_len
    return max(1, _SCORES_PER_GROUP // (B * N * N))


def train_group(cfg, fields, workdir=None, progress=print):
    cell = config_lib.with_fields(cfg, fields)
    cell.optim.warmup_steps = int(round(cell.train.warmup_fraction * cell.train.num_steps))
    grid = sweeps.Grid.make(config_lib.traced_axes(cfg, TRACED),
                            np.arange(cfg.seed, cfg.seed + cfg.num_seeds), zipped=cfg.sweep_zip)
    result = sweeps.run_cell(make_problem(cell), cell, TRACED, grid, fields=fields,
                             workdir=workdir, progress=progress)
    return dict(fields=fields, cfg=cell, grid=grid, result=result)


def run(cfg, workdir: records.Workdir, progress=print) -> dict[str, Any]:
    validate(cfg)
    workdir.write_config(cfg)
    if cfg.experiment == "landscape":
        return run_landscape(cfg, workdir, progress)
    groups, cells = [], config_lib.structural_cells(cfg, TRACED)
    for i, fields in enumerate(cells):
        if fields and progress:
            progress("program " + ", ".join(f"{k}={v}" for k, v in fields.items()))
        if progress:
            progress(model_table(config_lib.with_fields(cfg, fields)))
        group = train_group(cfg, fields, workdir, progress)
        groups.append(group)
        res = group["result"]
        prefix = f"cell{i}_" if len(cells) > 1 else ""
        workdir.save_arrays(**{prefix + k: v for k, v in {
            "losses": res.losses, "seeds": res.seeds, "snapshot_steps": res.snapshot_steps,
            **{k.replace(".", "_"): v for k, v in res.hparams.items()},
            **{f"snapshot_{k}": v for k, v in res.snapshots.items()}}.items()})
    claims = CLAIMS[cfg.claims](cfg, groups)
    figures = [str(p) for p in _figures(cfg, groups, workdir)]
    return workdir.finish(
        claims, progress, figures=figures, runs=_run_table(groups),
        seconds={"compile": sum(g["result"].compile_seconds for g in groups),
                 "run": sum(g["result"].run_seconds for g in groups)})


# ----------------------------------------------------------------------------- outcomes per run


def _references(cfg, p, q):
    """(unigram loss, bigram loss) of the chain of a run."""
    S = cfg.chain.num_states
    if S == 2:
        return float(theory.unigram_loss(p, q)), float(theory.entropy_rate(p, q))
    return float(theory.symmetric_unigram_loss(S)), float(theory.symmetric_entropy_rate(S, p))


def outcomes(group) -> list[dict[str, Any]]:
    """Per run: p, q, seed, final test loss, f0, f1, and whether it is stuck at the unigram.

    Stuck (notes §12.7): |L - H(pi)| < I/4 (and |f0 - f1| < 0.02 for S = 2), with I the gap
    between the unigram and bigram losses; escaped: |L - L*| < I/4. Where I < 1e-3 (p + q = 1,
    or p = (S-1)/S: the chain is i.i.d.) no run is stuck and escaped is |L - L*| < 0.01.
    """
    cfg, res = group["cfg"], group["result"]
    rows = []
    for r in range(res.num_runs):
        p, q = float(res.hparams["chain.p"][r]), float(res.hparams["chain.q"][r])
        unigram, bigram = _references(cfg, p, q)
        gap = unigram - bigram
        loss = float(res.snapshots["test_loss"][r, -1])
        row = {"p": p, "q": q, "seed": int(res.seeds[r]), "loss": loss,
               "unigram": unigram, "bigram": bigram}
        flat = True
        if "f0" in res.snapshots:
            row.update(f0=float(res.snapshots["f0"][r, -1]), f1=float(res.snapshots["f1"][r, -1]))
            flat = abs(row["f0"] - row["f1"]) < 0.02
        row["stuck"] = bool(abs(loss - unigram) < gap / 4 and flat) if gap > 1e-3 else False
        row["escaped"] = bool(abs(loss - bigram) < (gap / 4 if gap > 1e-3 else 0.01))
        rows.append(row)
    return rows


def _run_table(groups):
    return [dict(program=", ".join(f"{k}={v}" for k, v in g["fields"].items()) or "base",
                 **row) for g in groups for row in outcomes(g)]


def _label(group):
    fields = group["fields"]
    cfg = group["cfg"]
    fam = "GPT-2 (LN)" if cfg.model.layer_norm else cfg.model.family
    return (f"{fam}, {'tied' if cfg.model.tied else 'untied'}, {cfg.model.num_layers} layer"
            + ("s" if cfg.model.num_layers > 1 else "")
            + (f" ({', '.join(f'{k}={v}' for k, v in fields.items())})" if fields else ""))


# ----------------------------------------------------------------------------- claims


def _at(rows, p, q):
    return [r for r in rows if np.isclose(r["p"], p) and np.isclose(r["q"], q)]


FIG3_POINTS = ((0.5, 0.8), (0.2, 0.3))


def _finite(rows) -> bool:
    return all(np.isfinite(r["loss"]) for r in rows)


def claims_fig3(cfg, groups) -> list[records.Claim]:
    """Fig. 3 (a-d): tied stuck at the unigram for (0.5, 0.8), untied at the bigram; both at the
    bigram for (0.2, 0.3) (notes §8, §11.2)."""
    out = []
    for g in groups:
        rows, label, tied = outcomes(g), _label(g), g["cfg"].model.tied
        for p, q in FIG3_POINTS:
            if not _at(rows, p, q):
                out.append(records.claim(f"{label}, (p, q) = ({p:g}, {q:g}): Fig. 3's point",
                                         "not measured: no run at this (p, q)",
                                         "runs at (0.5, 0.8) and (0.2, 0.3)", False,
                                         "Fig. 3, notes §8"))
        for p, q in sorted({(r["p"], r["q"]) for r in rows}):
            runs = _at(rows, p, q)
            pi1 = p / (p + q)
            measured = {"final loss": [round(r["loss"], 4) for r in runs],
                        "f0": [round(r["f0"], 3) for r in runs],
                        "f1": [round(r["f1"], 3) for r in runs]}
            unigram, bigram = runs[0]["unigram"], runs[0]["bigram"]
            if tied and p + q > 1:
                ok = all(r["stuck"] and abs(r["f0"] - pi1) < 0.01 for r in runs)
                expected = (f"stuck at H(pi) = {unigram:.4f}, f0 = f1 = pi_1 = {pi1:.4f} "
                            "in every run")
            else:
                ok = all(r["escaped"] and abs(r["f0"] - p) < 0.02 and abs(r["f1"] - (1 - q)) < 0.02
                         for r in runs)
                expected = (f"entropy rate {bigram:.4f}, f0 = p = {p:g}, f1 = 1 - q = {1 - q:g} in "
                            "every run")
            out.append(records.claim(f"{label}, (p, q) = ({p:g}, {q:g}): "
                              + ("the unigram trap" if tied and p + q > 1 else "the bigram"),
                              measured, expected, ok, "Fig. 3, notes §8"))
    return out


def claims_fig4(cfg, groups) -> list[records.Claim]:
    """Fig. 4: tied models get stuck only when p + q > 1; untied never (notes §8)."""
    out = []
    for g in groups:
        rows, label = outcomes(g), _label(g)
        cells = sorted({(r["p"], r["q"]) for r in rows})
        stuck = {c: np.mean([r["stuck"] for r in _at(rows, *c)]) for c in cells}
        below = [c for c in cells if sum(c) < 1 - 1e-9]   # p + q = 1: unigram = bigram, skip
        above = [c for c in cells if sum(c) > 1 + 1e-9]
        # a diverged run (non-finite loss) is neither stuck nor escaped: it fails "no stuck run"
        bad = [f"{r['p']:g},{r['q']:g} seed {r['seed']}" for r in rows if not np.isfinite(r["loss"])]
        if g["cfg"].model.tied:
            measured = ({f"{p:g},{q:g}": stuck[(p, q)] for p, q in below if stuck[(p, q)]}
                        or "none stuck") if below else "not measured: no cell with p + q < 1"
            if bad:
                measured = {"stuck": measured, "non-finite loss": bad}
            out.append(records.claim(f"{label}: no stuck run where p + q < 1", measured,
                                     "none stuck", bool(below) and not bad
                                     and all(stuck[c] == 0 for c in below), "Fig. 4"))
            share = float(np.mean([stuck[c] > 0 for c in above])) if above else 0.0
            out.append(records.claim(f"{label}: stuck runs where p + q > 1 (the demarcation along "
                              "p + q = 1)", {"cells with a stuck run": share,
                                             "stuck fraction per cell": {
                                                 f"{p:g},{q:g}": stuck[(p, q)] for p, q in above}}
                              if above else "not measured: no cell with p + q > 1",
                              ">= half of the p + q > 1 cells have stuck runs", share >= 0.5,
                              "Fig. 4"))
        else:
            total = float(np.mean([r["stuck"] for r in rows]))
            out.append(records.claim(f"{label}: no run is stuck anywhere",
                                     {"stuck fraction": total, "non-finite loss": bad} if bad
                                     else total, "0", total == 0 and not bad, "Fig. 4"))
    return out


def claims_fig1(cfg, groups) -> list[records.Claim]:
    """Fig. 1: at (0.5, 0.8) a 1-layer tied model stays at the unigram; depth >= 2 escapes after a
    plateau at H(pi) (notes §8; §11.4 expects each model family to miss one half)."""
    out = []
    for g in groups:
        label = _label(g)
        layers = g["cfg"].model.num_layers
        res = g["result"]
        every = outcomes(g)
        index = [r for r, row in enumerate(every)
                 if np.isclose(row["p"], 0.5) and np.isclose(row["q"], 0.8)]
        rows = [every[r] for r in index]
        if not rows:
            out.append(records.claim(f"{label}, (0.5, 0.8): " + ("trapped" if layers == 1
                                                                  else "escapes"),
                                     "not measured: no run at (p, q) = (0.5, 0.8)",
                                     "runs at (0.5, 0.8)", False, "Fig. 1"))
            continue
        unigram = rows[0]["unigram"]
        if layers == 1:
            ok = all(r["stuck"] for r in rows)
            expected = "stuck at H(pi) in every run"
        else:
            test_loss = res.snapshots["test_loss"][index]
            early = test_loss[:, : max(2, test_loss.shape[1] // 5)]
            plateau = np.abs(early - unigram).min(axis=1) < (unigram - rows[0]["bigram"]) / 4
            ok = all(r["escaped"] for r in rows) and plateau.all()
            expected = "a plateau near H(pi), then the entropy rate, in every run"
        out.append(records.claim(f"{label}, (0.5, 0.8): " + ("trapped" if layers == 1 else "escapes"),
                          {"final loss": [round(r["loss"], 4) for r in rows],
                           "stuck": [r["stuck"] for r in rows]}, expected, ok, "Fig. 1"))
    return out


def claims_fig5(cfg, groups) -> list[records.Claim]:
    """Fig. 5 (S = 5): tied stuck at log 5 for p above the threshold (S-1)/S = 0.8 (the notes'
    derivation, §6.8), the bigram below it; untied always the bigram."""
    out = []
    threshold = theory.multistate_threshold(cfg.chain.num_states)
    for g in groups:
        rows, label, tied = outcomes(g), _label(g), g["cfg"].model.tied
        for p in sorted({r["p"] for r in rows}):
            runs = [r for r in rows if np.isclose(r["p"], p)]
            trapped = tied and p > threshold
            ok = all(r["stuck"] if trapped else r["escaped"] for r in runs)
            out.append(records.claim(f"{label}, S = {cfg.chain.num_states}, p = {p:g}: "
                              + ("trapped at log S" if trapped else "the bigram"),
                              [round(r["loss"], 4) for r in runs],
                              (f"log S = {runs[0]['unigram']:.4f}" if trapped else
                               f"entropy rate {runs[0]['bigram']:.4f}") + " (within I/4)",
                              ok, "Fig. 5 (004), notes §6.8"))
    return out


def claims_appendix_d(cfg, groups) -> list[records.Claim]:
    """App. D: the learned global minimum at (0.2, 0.3), tied, has the rank-one structure, and the
    formula evaluated on the fitted scalars predicts p and 1 - q (notes §6.6)."""
    out = []
    for g in groups:
        res, c = g["result"], g["cfg"]
        for r in range(res.num_runs):
            params = jax.tree.map(lambda x: np.asarray(x[r], np.float64), res.final_params)
            p, q = float(res.hparams["chain.p"][r]), float(res.hparams["chain.q"][r])
            statement = (f"{_label(g)}, seed {int(res.seeds[r])}: e and p_n share one sign "
                         "pattern v, W_1 is rank one, W_2 ~ W_1^T, and the App. D formula gives p "
                         "and 1 - q")
            expected = (f"|cos(e, p_n)| > 0.95, sigma_2/sigma_1(W_1) < 0.1, f(0) ~ {p:g}, "
                        f"f(1) ~ {1 - q:g}")
            if not all(np.isfinite(x).all() for x in jax.tree.leaves(params)):
                out.append(records.claim(statement, "non-finite weights", expected, False,
                                         "App. D, notes §6.6"))
                continue
            fit = fit_appendix_d(params, c)
            probs = 1 / (1 + np.exp(-np.asarray(fit["formula_logits"])))
            out.append(records.claim(
                statement,
                {k: (round(v, 3) if isinstance(v, float) else v) for k, v in fit.items()
                 if k != "formula_logits"} | {"formula f(0), f(1)": np.round(probs[::-1], 3)
                                               .tolist()},
                expected,
                fit["cos_e_p"] > 0.95 and fit["rank_one"] < 0.1 and abs(probs[1] - p) < 0.05
                and abs(probs[0] - (1 - q)) < 0.05, "App. D, notes §6.6"))
    return out


def fit_appendix_d(params, cfg) -> dict[str, Any]:
    """Fit App. D's scalars (e, p, w_1, b, beta) to trained tied theory-model weights."""
    d = cfg.model.d
    r = cfg.model.mlp_width or 4 * d
    e = params["e"]
    v = np.sign(e)
    pos = params["pos"].mean(axis=0)
    block = params["block_0"]
    W1, W2 = block["W_1"], block["W_2"]
    u, s, vt = np.linalg.svd(W1)
    w = np.sign(u[:, 0]) * np.sign(vt[0] @ v)
    w1 = s[0] / np.sqrt(r * d)
    e_scalar, p_scalar = float(e @ v / d), float(pos @ v / d)
    beta = int(np.sum(w > 0))
    logits = theory.appendix_d_logits(e_scalar, p_scalar, w1, float(params["b"]), beta, d, r)
    return {"e": e_scalar, "p": p_scalar, "w1": float(w1), "b": float(params["b"]), "beta": beta,
            "cos_e_p": float(abs(e @ pos) / (np.linalg.norm(e) * np.linalg.norm(pos) + 1e-12)),
            "rank_one": float(s[1] / s[0]),
            "W2_vs_W1T": float(np.linalg.norm(W2 - W1.T) / np.linalg.norm(W1)),
            "formula_logits": [float(x) for x in logits]}


def claims_trap(cfg, groups) -> list[records.Claim]:
    """The trap study (issue 13): trapped fractions per (depth, precision) with intervals."""
    return trap_study.claims(cfg, groups, model_of)


CLAIMS = {"fig1": claims_fig1, "fig3": claims_fig3, "fig4": claims_fig4, "fig5": claims_fig5,
          "appendix_d": claims_appendix_d, "trap": claims_trap, "none": lambda cfg, groups: []}


# ----------------------------------------------------------------------------- landscape


def run_landscape(cfg, workdir, progress=print) -> dict[str, Any]:
    """Exact Hessians at theta_pi (tied and untied) and theta_star for each (p, q), against
    §6.5 (binary) and §6.8 (multi-state); the describe() reports go to hessians.txt."""
    ls = cfg.landscape
    claims, reports = [], []
    for p, q in ls.points:
        for tied in (True, False):
            point = points.theta_pi(p, q, d=ls.d, seq_len=ls.seq_len, tied=tied)
            H = curvature.hessian_at(point)
            reports.append(H.describe())
            focus = H.focus_report()
            predicted = np.sort(point.meta["focus_prediction"])
            ok = np.allclose(focus["eigenvalues"], predicted, atol=1e-10) and focus["outside"] < 1e-10
            verdict = H.verdict()
            expected_verdict = ("local minimum" if tied and p + q > 1 else "saddle")
            claims.append(records.claim(
                f"theta_pi ({'tied' if tied else 'untied'}, p={p:g}, q={q:g}): alpha-block "
                f"eigenvalues and verdict", {"alpha eigenvalues": np.round(focus["eigenvalues"], 6)
                                             .tolist(), "verdict": verdict.split(" (")[0]},
                {"alpha eigenvalues": np.round(predicted, 6).tolist(), "verdict": expected_verdict},
                ok and verdict.startswith(expected_verdict), "Thms 2-3, notes §6.5"))
        star = points.theta_star(p, q, d=ls.d, seq_len=ls.seq_len)
        g = curvature.gradient_at(star)
        claims.append(records.claim(f"theta_star (p={p:g}, q={q:g}): loss = entropy rate, gradient 0",
                             {"loss - L*": star.loss() - star.meta["expected_loss"],
                              "gradient norm": g.norm}, "both < 1e-10",
                             abs(star.loss() - star.meta["expected_loss"]) < 1e-10 and g.norm < 1e-10,
                             "Thm 1, notes §6.1"))
    for p in ls.multistate_p:
        point = points.theta_pi(p, d=2, seq_len=ls.multistate_seq_len,
                                num_states=ls.multistate_states)
        H = curvature.hessian_at(point)
        reports.append(H.describe())
        focus = H.focus_report()
        predicted = np.sort(point.meta["focus_prediction"])
        claims.append(records.claim(f"multi-state unigram point (S={ls.multistate_states}, p={p:g}): "
                             "(b, E) eigenvalues (the notes' derivation)",
                             np.round(focus["eigenvalues"], 6).tolist(),
                             np.round(predicted, 6).tolist(),
                             np.allclose(focus["eigenvalues"], predicted, atol=1e-10), "notes §6.8"))
    workdir.write_text("hessians.txt", "\n\n".join(reports))
    return workdir.finish(claims, progress, where=" (Hessian reports in hessians.txt)")


# ----------------------------------------------------------------------------- figures


def _figures(cfg, groups, workdir):
    if cfg.claims == "trap":
        workdir.save_table("trap_runs", [row for g in groups for row in trap_study.run_rows(g)])
        return [trap_study.plot_curves(groups, workdir.figure_path("trap_curves")),
                trap_study.plot_fractions(groups, workdir.figure_path("trap_fractions"))]
    paths = [plot_losses(groups, workdir.figure_path("test_loss"))]
    if cfg.claims == "fig4":
        paths.append(plot_grid(groups, workdir.figure_path("fig4_heatmaps")))
    return paths


def plot_losses(groups, path):
    """Test loss against iteration per program, unigram and bigram levels dashed (Figs. 1, 3, 5)."""
    cells = [(g, c) for g in groups for c in _cells_of(g)]
    fig, axes = plotting.subplots(1, len(cells), width=3.6, height=2.9)
    for ax, (g, (p, q, runs)) in zip(axes[0], cells):
        res = g["result"]
        plotting.mean_and_band(ax, res.snapshot_steps, res.snapshots["test_loss"][runs],
                               label="test loss")
        unigram, bigram = _references(g["cfg"], p, q)
        ax.axhline(unigram, color="tab:red", linestyle="--", linewidth=1, label="unigram H(pi)")
        ax.axhline(bigram, color="tab:green", linestyle="--", linewidth=1, label="entropy rate")
        ax.set(xlabel="iteration", title=f"{_label(g)}\np={p:g}" + (f", q={q:g}" if
                                                                     g["cfg"].chain.num_states == 2
                                                                     else ""))
        ax.title.set_fontsize(7)
    axes[0, 0].set_ylabel("test loss (nats)")
    axes[0, -1].legend(fontsize=6)
    return plotting.save(fig, path)


def _cells_of(group):
    res = group["result"]
    keys = sorted({(float(p), float(q)) for p, q in zip(res.hparams["chain.p"],
                                                         res.hparams["chain.q"])})
    return [(p, q, np.flatnonzero(np.isclose(res.hparams["chain.p"], p)
                                  & np.isclose(res.hparams["chain.q"], q))) for p, q in keys]


def plot_grid(groups, path):
    """Fig. 4: mean predicted P(1 | x_n = 0) and the stuck fraction over the (p, q) grid."""
    fig, axes = plotting.subplots(2, len(groups), width=3.8, height=3.2)
    for j, g in enumerate(groups):
        rows = outcomes(g)
        ps = sorted({r["p"] for r in rows})
        qs = sorted({r["q"] for r in rows})
        f0 = np.array([[np.mean([r["f0"] for r in _at(rows, p, q)]) for q in qs] for p in ps])
        stuck = np.array([[np.mean([r["stuck"] for r in _at(rows, p, q)]) for q in qs] for p in ps])
        for i, (values, title) in enumerate([(f0, "mean predicted P(1 | 0)"),
                                             (stuck, "fraction of stuck runs")]):
            plotting.heatmap(axes[i, j], values, row_labels=[f"{p:g}" for p in ps],
                             col_labels=[f"{q:g}" for q in qs], title=f"{_label(g)}\n{title}",
                             vmin=0, vmax=1, cmap="viridis")
            axes[i, j].title.set_fontsize(7)
            for a in range(len(ps)):
                for b in range(len(qs)):
                    axes[i, j].text(b, a, f"{values[a, b]:.2f}", ha="center", va="center",
                                    fontsize=6, color="k" if values[a, b] > 0.6 else "w")
            axes[i, j].set(xlabel="q", ylabel="p")
    return plotting.save(fig, path)
