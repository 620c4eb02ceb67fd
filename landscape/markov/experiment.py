"""Attention with Markov experiments (notes/markov.md §8, §11): configs -> compiled sweeps ->
records, figures and checked claims.

experiment = "train" (a (p, q) grid x seeds as one program per model variant), "landscape"
(exact Hessians at the constructed points, atlas.run_landscape), "atlas" (atlas.py) or
"curvature" (the trap's curvature along training, curvature_study.py). This module holds the
config's validation and memory estimate, the training problem and the runs (the schema:
`schema.py`); `claims.py` the claims, `figures.py` the figures (`trap_study.py` the precision
study's own). See docs/design/markov.md.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape.engine import backend, edge_of_stability, memory, precision, records, training
from landscape.engine import config as config_lib
from landscape.engine import experiment as engine_experiment
from landscape.engine import track as track_lib
from landscape.engine.experiment import BASELINE_BYTES
from landscape.engine.memory import format_bytes
from landscape.engine.plotting import draw_tracked
from landscape.markov import atlas, attention, curvature_study, eos, figures, points, task
from landscape.markov import model as model_lib
from landscape.markov.claims import CLAIMS, run_table
from landscape.markov.schema import ANALYSES, CLAIM_SETS, TRACED, default_config
from landscape.point import params_table
from landscape.typing import Progress, PyTree


def _validate_run(cfg: ml_collections.ConfigDict) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims, sweep_zip."""
    choice = config_lib.require_choice
    config_lib.require_text(cfg, "name")
    choice(cfg, "experiment", ("train", "curvature", "eos", *ANALYSES))
    choice(cfg, "claims", (*CLAIM_SETS, "curvature", "eos"))
    config_lib.require_seeds(cfg)
    if cfg.experiment in ANALYSES:
        config_lib.require_empty_sweep(cfg, f"experiment = {cfg.experiment!r}")
        choice(cfg, "claims", (cfg.experiment, "none"))
    elif cfg.experiment == "train":
        config_lib.require(
            cfg.claims not in (*ANALYSES, "curvature"),
            "claims",
            cfg.claims,
            "one of the training claims (or 'none') for experiment = 'train'; "
            "'landscape', 'atlas' and 'curvature' go with the experiments of those names",
        )
    if cfg.claims == "trap":
        config_lib.require(
            not any(k in ("chain.p", "chain.q") for k in config_lib.flatten(cfg.sweep)),
            "sweep",
            cfg.sweep,
            "without chain.p / chain.q axes "
            "for claims = 'trap' (one chain; the study sweeps depth and precision)",
        )
    if cfg.sweep_zip:
        lengths = {
            k: len(v)
            for k, v in config_lib.flatten(cfg.sweep).items()
            if k in TRACED and isinstance(v, (list, tuple))
        }
        config_lib.require(
            len(set(lengths.values())) <= 1,
            "sweep_zip",
            True,
            "False unless the traced sweep axes have equal lengths (they are "
            "paired): " + ", ".join(f"sweep.{k} has {n}" for k, n in lengths.items()),
        )


def _validate_cell(cfg: ml_collections.ConfigDict) -> None:
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
    config_lib.require(
        cfg.model.dtype != "float64" or cfg.train.dtype == "float64",
        "model.dtype",
        cfg.model.dtype,
        "float64 only with train.dtype = 'float64' (it needs "
        "64-bit JAX); float16 / bfloat16 for mixed precision",
    )
    r(cfg, "model.d", low=1, integer=True)
    r(cfg, "model.seq_len", low=2, integer=True)
    r(cfg, "model.num_layers", low=1, integer=True)
    r(cfg, "model.num_heads", low=1, high=cfg.model.d, integer=True)
    config_lib.require(
        cfg.model.d % cfg.model.num_heads == 0,
        "model.num_heads",
        cfg.model.num_heads,
        f"a divisor of model.d = {cfg.model.d} (heads split d)",
    )
    r(cfg, "model.mlp_width", low=0, integer=True)
    config_lib.require(
        not (cfg.model.family == "theory" and cfg.model.layer_norm),
        "model.layer_norm",
        True,
        "False for the theory model (notes §3.1 has no "
        "LayerNorm); use model.family = 'gpt' for the GPT-2 blocks",
    )
    try:
        model_lib.from_config(cfg)
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
    track_lib.validate_tracking(cfg)
    if cfg.train.track_every:  # the tracked batch: the first of the train.eval_sequences
        r(cfg, "train.track_sequences", low=1, high=cfg.train.eval_sequences, integer=True)
    S = cfg.chain.num_states
    if cfg.claims in ("fig3", "appendix_d", "trap"):
        config_lib.require(
            S == 2,
            "chain.num_states",
            S,
            f"2 for claims = {cfg.claims!r} (they read the binary chain's f0, f1)",
        )
    if cfg.claims == "appendix_d":
        config_lib.require(
            cfg.model.family == "theory",
            "model.family",
            cfg.model.family,
            "'theory' for claims = 'appendix_d' (App. D fits the theory model)",
        )
    if cfg.claims == "fig5":
        config_lib.require(
            S >= 3,
            "chain.num_states",
            S,
            "an integer >= 3 for claims = 'fig5' (the multi-state chain)",
        )
    _validate_landscape(cfg)
    _validate_atlas(cfg)
    curvature_study.validate(cfg)
    edge_of_stability.validate(cfg)


def _validate_atlas(cfg: ml_collections.ConfigDict) -> None:
    r = config_lib.require_number
    for axis in ("atlas.p", "atlas.q"):
        config_lib.require_numbers(cfg, axis, low=0, high=1, low_open=True, high_open=True)
    off_boundary = [
        (p, q) for p in cfg.atlas.p for q in cfg.atlas.q if abs(p + q - 1) > atlas.BOUNDARY_GAP
    ]
    config_lib.require(
        bool(off_boundary),
        "atlas.p",
        list(cfg.atlas.p),
        "values that, with atlas.q, give at least one cell off the line p + q = 1 (where the "
        "alpha block is degenerate)",
    )
    r(cfg, "atlas.d", low=1, integer=True)
    r(cfg, "atlas.seq_len", low=2, high=14, integer=True)  # exact: 2^N sequences
    r(cfg, "atlas.path_ts", low=3, integer=True)
    r(cfg, "atlas.num_probes", low=2, integer=True)
    r(cfg, "atlas.num_iters", low=2, integer=True)
    config_lib.require_numbers(
        cfg,
        "atlas.train_cell",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        length=2,
        length_of="[p, q]",
    )
    p, q = cfg.atlas.train_cell
    config_lib.require(
        abs(p + q - 1) > atlas.BOUNDARY_GAP,
        "atlas.train_cell",
        list(cfg.atlas.train_cell),
        "a cell off the line p + q = 1 (there the unigram and bigram losses coincide, so no "
        "basin can be told apart)",
    )
    r(cfg, "atlas.train_seeds", low=1, integer=True)
    r(cfg, "atlas.train_steps", low=0, integer=True)  # 0: no trained points


def _validate_landscape(cfg: ml_collections.ConfigDict) -> None:
    r, ls = config_lib.require_number, cfg.landscape
    pts = ls.points
    config_lib.require(
        all(
            isinstance(pt, (list, tuple)) and len(pt) == 2 and all(0 < v < 1 for v in pt)
            for pt in pts
        ),
        "landscape.points",
        pts,
        "a list of [p, q] points in (0, 1)^2, e.g. [[0.5, 0.8], [0.2, 0.3]]",
    )
    config_lib.require_numbers(
        cfg, "landscape.multistate_p", low=0, high=1, low_open=True, high_open=True, nonempty=False
    )
    config_lib.require(
        len(pts) + len(ls.multistate_p) > 0,
        "landscape.points",
        pts,
        "a non-empty list when landscape.multistate_p is empty (nothing to check)",
    )
    r(cfg, "landscape.d", low=1, integer=True)
    r(cfg, "landscape.seq_len", low=1, integer=True)
    r(cfg, "landscape.multistate_states", low=3, integer=True)
    r(cfg, "landscape.multistate_seq_len", low=1, integer=True)


def needs_x64(cfg: ml_collections.ConfigDict) -> bool:
    return cfg.experiment in (*ANALYSES, "curvature") or cfg.train.dtype == "float64"


# ----------------------------------------------------------------------------- memory


_MEMORY_FIELDS = (
    "train.batch_size",
    "train.eval_sequences",
    "num_seeds",
    "model.seq_len",
    "model.num_layers",
    "model.num_heads",
    "model.d",
    "landscape.seq_len",
    "landscape.multistate_seq_len",
)


def _sequence_floats(
    N: int, S: int, d: int, layers: int, heads: int, mlp: int, whole: bool = False
) -> int:
    """Activations of one sequence's forward pass: per layer q, k, v, the residual stream, the
    LayerNorms and the MLP's hidden layer, and the attention scores (heads x N x N, with the mask
    and softmax) where they are held whole (attention.scores_held_whole, or `whole`); the logits.
    Longer sequences go through the tiled attention, which keeps each row's log-sum-exp only."""
    whole = whole or attention.scores_held_whole(N)
    scores = 3 * heads * N * N if whole else heads * N
    return layers * (scores + 12 * N * d + 3 * N * (mlp or 4 * d)) + 3 * N * S


def _landscape_bytes(v: dict) -> tuple[float, str]:
    """The dense Hessian (run_landscape): 256 columns at a time of the linearised gradient over
    the exact population (all S^N sequences, at most 2^16; Monte Carlo 256 beyond), float64."""
    worst = (0.0, "")
    for S, N, d in (
        (2, v["landscape.seq_len"], v["landscape.d"]),
        (v["landscape.multistate_states"], v["landscape.multistate_seq_len"], 2),
    ):
        sequences = S**N if S**N <= points.EXACT_LIMIT else 256
        num_params = S * d + N * d + 11 * d * d + d * S
        columns = min(num_params, 256)
        need = (
            2 * columns * sequences * _sequence_floats(N, S, d, 1, 1, 0) * 8 + num_params**2 * 8 * 3
        )
        worst = max(
            worst,
            (
                need,
                f"the dense Hessian ({num_params} parameters) over all "
                f"{S}^{N} = {S**N} sequences, {columns} columns at a time",
            ),
        )
    return BASELINE_BYTES + worst[0], worst[1]


def _cell_bytes(v: dict) -> tuple[float, str]:
    """(bytes, what) of one program: the runs a step holds at once (a group of runs per device,
    `runs_per_group`) x a batch's forward and backward (four times its activations), the
    evaluation sequences' forward, the losses kept on the host and a baseline."""
    if v["experiment"] == "landscape":
        return _landscape_bytes(v)
    B, N, E, steps = (
        v["train.batch_size"],
        v["model.seq_len"],
        v["train.eval_sequences"],
        v["train.num_steps"],
    )
    size = np.dtype(v["train.dtype"]).itemsize
    floats = _sequence_floats(
        N,
        v["chain.num_states"],
        v["model.d"],
        v["model.num_layers"],
        v["model.num_heads"],
        v["model.mlp_width"],
    )
    runs = memory.traced_runs(v, TRACED, zipped=v["sweep_zip"])
    devices = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    group = max(1, _SCORES_PER_GROUP // (B * N * N))
    at_once = min(runs, group * (devices or 1))
    # the backward pass's scores, weights and their gradients, chunk by chunk (tiled attention)
    chunk = 4 * attention.chunk_scores(N, v["model.num_heads"])
    step = at_once * ((4 * B + 2 * E) * floats + chunk) * size + 3 * at_once * (B + E) * (N + 1) * 4
    # the snapshot at step 0 is vmapped over every run at once (training.train), not in groups:
    # one score matrix per sequence and layer where they are held whole, else a chunk of them
    held = (
        v["model.num_layers"] * v["model.num_heads"] * N * N
        if attention.scores_held_whole(N)
        else 0
    )
    first = runs * (E * (held + 4 * N) + chunk) * size
    kept = runs * steps * 4 * 2
    if first > step:
        return BASELINE_BYTES + first + kept, (
            f"the first evaluation of all {runs} run(s) at once, {E} sequences of {N} tokens each"
        )
    return BASELINE_BYTES + step + kept, (
        f"{at_once} of {runs} run(s) at once x (a step on {B} sequences of {N} tokens + the "
        f"evaluation of {E}), {format_bytes(4 * floats * size)} per sequence"
    )


def run_bytes(cfg: ml_collections.ConfigDict) -> float:
    """One run's memory in a step of the plain formulation (every score held whole): a batch's
    forward and backward, the evaluation's forward and the sampled tokens (`_cell_bytes`)."""
    B, N, E, m = cfg.train.batch_size, cfg.model.seq_len, cfg.train.eval_sequences, cfg.model
    floats = _sequence_floats(
        N, cfg.chain.num_states, m.d, m.num_layers, m.num_heads, m.mlp_width, whole=True
    )
    size = np.dtype(cfg.train.dtype).itemsize
    return float((4 * B + 2 * E) * floats * size + 3 * (B + E) * (N + 1) * 4)


def memory_estimate(cfg: ml_collections.ConfigDict) -> memory.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`."""
    return memory.estimate_memory(cfg, TRACED, _cell_bytes, _MEMORY_FIELDS, default_config)


# validate(cfg): the run's fields, every program's, then the memory estimate; nothing is built
validate = engine_experiment.validator(
    default_config, TRACED, _validate_run, _validate_cell, memory_estimate
)


# ----------------------------------------------------------------------------- training problem


def kernel_of(cfg: ml_collections.ConfigDict, hp: Mapping[str, jax.Array]) -> jax.Array:
    """The chain's transition matrix at a run's hyperparameters (chain.p, chain.q)."""
    if cfg.chain.num_states == 2:
        return task.binary_kernel(hp["chain.p"], hp["chain.q"])
    return task.symmetric_kernel(cfg.chain.num_states, hp["chain.p"])


def init_law(cfg: ml_collections.ConfigDict, kernel: jax.Array) -> jax.Array:
    """The law of x_1: the chain's stationary law, or uniform (`chain.initial`)."""
    S = cfg.chain.num_states
    return task.stationary(kernel) if cfg.chain.initial == "stationary" else jnp.ones(S) / S


def _decay_mask(params: PyTree) -> PyTree:
    """Weight decay on Linear weights only (W_*, an untied head), as the authors' AdamW."""

    def decayed(path: tuple[Any, ...], _: jax.Array) -> bool:
        name = jax.tree_util.keystr(path, simple=True, separator="/").split("/")[-1]
        return name.startswith("W_") or name in ("a", "A", "lm_head")

    return jax.tree_util.tree_map_with_path(decayed, params)


def make_problem(cfg: ml_collections.ConfigDict) -> training.Problem:
    model = model_lib.from_config(cfg)
    dtype = jnp.dtype(cfg.train.dtype)
    B, N, E = cfg.train.batch_size, cfg.model.seq_len, cfg.train.eval_sequences
    eval_key = jax.random.key(10_000 + cfg.seed)  # one test set per (p, q): common numbers

    def loss(
        params: PyTree, key: jax.Array, hp: training.HParams
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        kernel = kernel_of(cfg, hp)
        # the length-N scan where tuned for the CPU (faster there), else the associative scan:
        # the same sequences (task.sample; decided when traced, landscape/engine/backend.py)
        x = task.sample(
            key, kernel, init_law(cfg, kernel), B, N + 1, sequential=backend.cpu_tuned()
        )
        x = training.batch_share(x)  # this device's sequences when a run splits its batch
        log_probs = cast(jax.Array, model.apply({"params": params}, x[:, :N]))
        if cfg.train.targets == "hard":
            return -jnp.take_along_axis(log_probs, x[:, 1:, None], axis=-1).mean(), {}
        share = x.shape[0]
        return task.population_cross_entropy(
            log_probs, jnp.full(share, 1.0 / share), task.soft_targets(x[:, :N], kernel)
        ), {}

    def snapshot(params: PyTree, hp: training.HParams) -> dict[str, jax.Array]:
        kernel = kernel_of(cfg, hp)
        x = task.sample(
            eval_key, kernel, init_law(cfg, kernel), E, N, sequential=backend.cpu_tuned()
        )
        log_probs = cast(jax.Array, model.apply({"params": params}, x))
        out = {
            "test_loss": task.population_cross_entropy(
                log_probs, jnp.full(E, 1.0 / E), task.soft_targets(x, kernel)
            )
        }
        if cfg.chain.num_states == 2:  # mean predicted P(x_{n+1} = 1 | x_n = 0 or 1), Fig. 3/4
            prob_one = jnp.exp(log_probs[..., 1])
            for state in (0, 1):
                mask = x == state
                out[f"f{state}"] = jnp.sum(prob_one * mask) / jnp.maximum(mask.sum(), 1)
        return out

    return training.Problem(
        init=lambda key, hp: jax.tree.map(
            lambda a: a.astype(dtype), model_lib.init_params(key, model)
        ),
        loss=loss,
        learning_rates=lambda hp: hp["optim.lr"],
        snapshot=snapshot,
        weight_decay_mask=_decay_mask,
        runs_per_group=runs_per_group(cfg),
        run_bytes=run_bytes(cfg),
        log_grad_zeros=precision.is_half(model.dtype),
        # off the CPU a single run splits its batch over several devices at any size
        batch_size=B if B * N * N >= _SCORES_TO_SPLIT or not backend.cpu_tuned() else None,
    )


# Runs vmapped together hold at most about this many attention scores (~2 MiB), so that a step
# stays in cache; a loop goes over such groups (docs/performance.md, "The papers' tunings").
_SCORES_PER_GROUP = 2**19


# A single run splits its batch over devices (Problem.batch_size) only from this many attention
# scores per step: below it the cross-device synchronisation costs more on the CPU than the split
# saves (docs/performance.md, "The papers' tunings").
_SCORES_TO_SPLIT = 2**22


def model_table(cfg: ml_collections.ConfigDict) -> str:
    """The model summary: each parameter's name, shape, dtype and count (landscape.params_table),
    and the precision; from the shapes alone (nothing is compiled)."""
    model = model_lib.from_config(cfg)
    params = jax.tree.map(
        lambda s: np.zeros(s.shape, s.dtype),
        jax.eval_shape(functools.partial(model_lib.init_params, model=model), jax.random.key(0)),
    )
    params = jax.tree.map(lambda a: a.astype(model.param_dtype), params)
    prec = precision.of(cfg.train.dtype, cfg.model.dtype)
    return f"{model.family} model, {prec.name}:\n{params_table(params)}"


def runs_per_group(cfg: ml_collections.ConfigDict) -> int:
    """Runs per vmapped group on the CPU (2 at N = 128): the scores of a run's B sequences of
    length N, with the tiles' masked halves, are fewer than B N^2. Off the CPU the groups hold
    what fits in the device's memory (`run_bytes`, landscape/engine/backend.py)."""
    B, N = cfg.train.batch_size, cfg.model.seq_len
    return max(1, _SCORES_PER_GROUP // (B * N * N))


def _set_warmup(cell: ml_collections.ConfigDict) -> None:
    """optim.warmup_steps from train.warmup_fraction of the cell's steps."""
    cell.optim.warmup_steps = int(round(cell.train.warmup_fraction * cell.train.num_steps))


def atlas_training_config(cfg: ml_collections.ConfigDict, tied: bool) -> ml_collections.ConfigDict:
    """The engine's config for the trained points: the theory model (no LayerNorm, ReLU) at
    atlas.train_cell, d and seq_len, with the notes' CPU recipe (notes/markov.md §11.3)."""
    cell = default_config()
    p, q = cfg.atlas.train_cell
    cell.name = f"{cfg.name}_trained"
    cell.update(seed=cfg.seed, num_seeds=cfg.atlas.train_seeds)
    cell.chain.update(p=float(p), q=float(q))
    cell.model.update(family="theory", d=cfg.atlas.d, seq_len=cfg.atlas.seq_len, tied=tied)
    cell.train.update(num_steps=cfg.atlas.train_steps, log_every=cfg.atlas.train_steps)
    validate(cell)
    return cell


def _atlas_train(
    cfg: ml_collections.ConfigDict, tied: bool
) -> tuple[ml_collections.ConfigDict, training.RunResult]:
    """The atlas's trained runs of one tying: its config and their result."""
    cell = atlas_training_config(cfg, tied)
    return cell, train_group(cell, {}, progress=None)["result"]


def tracked_inputs(cfg: ml_collections.ConfigDict, hp: training.HParams) -> tuple[jax.Array, ...]:
    """(x, weights, targets) of the tracked loss: the first train.track_sequences sequences of
    the run's evaluation batch (test_loss's), equal weights, soft targets at its chain."""
    kernel, n = kernel_of(cfg, hp), cfg.train.track_sequences
    eval_key = jax.random.key(10_000 + cfg.seed)  # make_problem's: the test_loss sequences
    E, N = cfg.train.eval_sequences, cfg.model.seq_len
    x = task.sample(eval_key, kernel, init_law(cfg, kernel), E, N, sequential=True)[:n]
    return x, jnp.full(n, 1.0 / n, kernel.dtype), task.soft_targets(x, kernel)


def tracking_loss(cfg: ml_collections.ConfigDict) -> Callable[[PyTree, Any], jax.Array]:
    """The tracked curvature's loss: the soft-target cross-entropy on `tracked_inputs`, in the
    parameters' precision (under float16 / bfloat16 autocast too: a Hessian in a half type is
    rounding)."""
    model = model_lib.from_config(cfg).clone(dtype=None)

    def loss(params: PyTree, hp: training.HParams) -> jax.Array:
        x, weights, targets = tracked_inputs(cfg, hp)
        log_probs = cast(jax.Array, model.apply({"params": params}, x))
        return task.population_cross_entropy(log_probs, weights.astype(log_probs.dtype), targets)

    return loss


# train_group(cfg, fields, workdir=None, progress=print): one program's runs -> {fields, cfg,
# grid, result}
train_group = functools.partial(
    engine_experiment.train_group,
    traced=TRACED,
    make_problem=make_problem,
    tracking_loss=tracking_loss,
    prepare=_set_warmup,
)


def _run_atlas(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress
) -> dict[str, Any]:
    return atlas.run_atlas(cfg, workdir, progress, train=functools.partial(_atlas_train, cfg))


def _run_curvature(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress
) -> dict[str, Any]:
    cells = config_lib.structural_cells(cfg, TRACED)
    study = curvature_study.run
    return study(cfg, workdir, progress, cells=cells, train=train_group, batch=tracked_inputs)


def _run_train(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress
) -> dict[str, Any]:
    """The training runs: one program per structural cell, then the claims and figures."""
    groups, cells = [], config_lib.structural_cells(cfg, TRACED)
    for i, fields in enumerate(cells):
        if fields and progress:
            progress(engine_experiment.program_line(fields))
        if progress:
            progress(model_table(config_lib.with_fields(cfg, fields)))
        group = train_group(cfg, fields, workdir, progress)
        groups.append(group)
        res = group["result"]
        prefix = engine_experiment.cell_prefix(i, len(cells))
        workdir.save_arrays(**res.arrays(prefix, complete=True))
    claims = CLAIMS[cfg.claims](cfg, groups)
    paths = [str(p) for p in figures.draw(cfg, groups, workdir)]
    paths += draw_tracked(workdir, [g["result"] for g in groups], [str(c) for c in cells])
    return workdir.finish(
        claims,
        progress,
        figures=paths,
        runs=run_table(groups),
        seconds=engine_experiment.seconds_of([g["result"] for g in groups]),
    )


run = engine_experiment.runner(
    validate,
    _run_train,
    landscape=atlas.run_landscape,
    atlas=_run_atlas,
    eos=functools.partial(eos.run, make_problem=make_problem, traced=TRACED),
    curvature=_run_curvature,
)
