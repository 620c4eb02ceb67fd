"""In-context n-gram experiments (notes/ngrams.md §5, §7): configs -> compiled runs -> records,
figures and checked claims.

experiment = "train" (Figs 1, 3-7; seeds x lr one vmapped program), "stationarity" (Theorem
4.2's study) or "curvature" (a tracked run probed at its plateau, `curvature_study.py`). This
module holds the validation, the training problem and the run (the schema: `schema.py`);
`claims.py` the analysis and claims, `figures.py` the figures. What is logged:
docs/design/ngrams.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax

from landscape.engine import config as config_lib
from landscape.engine import (
    edge_of_stability,
    plotting,
    precision,
    records,
    training,
    validation,
)
from landscape.engine import experiment as engine_experiment
from landscape.engine import track as track_lib
from landscape.ngrams import claims as claims_lib
from landscape.ngrams import curvature_study, eos, estimators, figures, points, task
from landscape.ngrams import model as model_lib
from landscape.ngrams.footprint import memory_estimate, snapshot_chunk
from landscape.ngrams.schema import TRACED, default_config, model_of
from landscape.point import params_table
from landscape.typing import Progress, PyTree

CLAIM_SETS = tuple(claims_lib.CLAIMS)

# ----------------------------------------------------------------------------- validation


# Fields every program of a run shares: the estimator lines, the stationarity study, the
# analysis and the figures are computed once per run from the top-level config.
ONE_PER_RUN = validation.UNSWEEPABLE + (
    "task",
    "lines",
    "stationarity",
    "curvature",
    "eos",
    "analysis",
    "figure",
)


def _validate_run(cfg: ml_collections.ConfigDict) -> None:
    """The fields of the whole run (not per program): name, experiment, seeds, claims, the
    estimator lines, the stationarity study, the analysis and the figures."""
    r = config_lib.require_number
    config_lib.require_text(cfg, "name")
    config_lib.require_choice(cfg, "experiment", ("train", "stationarity", "curvature", "eos"))
    config_lib.require_seeds(cfg)
    names = cfg.claims.split(",") if cfg.claims else []
    config_lib.require(
        all(name in CLAIM_SETS for name in names),
        "claims",
        cfg.claims,
        f"a comma-separated list drawn from {', '.join(CLAIM_SETS)} (or '')",
    )
    if cfg.experiment == "stationarity":
        config_lib.require_one_checked_study(cfg, "")
    if cfg.experiment == "curvature":
        curvature_study.validate(cfg)
    edge_of_stability.validate(cfg)
    _validate_task(cfg, "task")
    r(cfg, "lines.num_sequences", low=1, integer=True)
    r(cfg, "lines.seed", low=0, high=2**31 - 1, integer=True)
    _validate_task(cfg, "stationarity")
    s = cfg.stationarity
    config_lib.require_numbers(cfg, "stationarity.ks", low=1, high=s.order_n, integer=True)
    config_lib.require_numbers(cfg, "stationarity.cs", low=0, low_open=True)
    config_lib.require_numbers(
        cfg, "stationarity.seq_lens", low=s.order_n, low_open=True, integer=True
    )
    r(cfg, "stationarity.num_sequences", low=4, integer=True)
    r(cfg, "stationarity.log_c0")
    r(cfg, "stationarity.seed", low=0, high=2**31 - 1, integer=True)
    n = cfg.train.num_steps
    r(cfg, "train.num_steps", low=1, integer=True)
    r(cfg, "analysis.flat_window", low=1, high=n, integer=True)
    r(cfg, "analysis.flat_tol", low=0, low_open=True)
    r(cfg, "analysis.min_plateau", low=1, high=n, integer=True)
    r(cfg, "analysis.line_tol", low=0, low_open=True)
    r(cfg, "analysis.head_threshold", low=0, high=1, low_open=True, high_open=True)
    r(cfg, "analysis.spike_ratio", low=1)
    for field in ("analysis.paper_plateau", "analysis.paper_final"):
        r(cfg, field, low=0)
        config_lib.require(
            "paper_levels" not in names or config_lib.get(cfg, field) > 0,
            field,
            config_lib.get(cfg, field),
            "a loss > 0 when claims include 'paper_levels' (the paper's value to compare with)",
        )
    config_lib.require_numbers(
        cfg, "figure.highlight_steps", low=0, high=n, integer=True, nonempty=False
    )


def _validate_task(cfg: ml_collections.ConfigDict, group: str) -> None:
    r, t = config_lib.require_number, cfg[group]
    r(cfg, f"{group}.num_states", low=2, integer=True)
    r(cfg, f"{group}.order_n", low=2, integer=True)
    r(cfg, f"{group}.alpha", low=0, low_open=True)
    if group == "task":
        config_lib.require(
            t.seq_len > t.order_n,
            "task.seq_len",
            t.seq_len,
            f"an integer > task.order_n = {t.order_n} (the first n - 1 tokens are "
            "the initial context)",
        )
        config_lib.require_choice(cfg, "task.init", task.INITS)
        try:
            task.validate_task(t.num_states, t.order_n, t.seq_len, t.alpha)
        except ValueError as error:
            raise config_lib.field_error(error, group) from None


def _validate_cell(cfg: ml_collections.ConfigDict) -> None:
    """Ranges and relations of every field of one program's config."""
    r, choice, m = config_lib.require_number, config_lib.require_choice, cfg.model
    choice(cfg, "model.kind", ("simplified", "transformer", "disentangled"))
    choice(cfg, "model.embedding", ("one_hot", "learned"))
    choice(cfg, "model.readout_init", ("", "random", "zero"))
    r(cfg, "model.num_heads", low=1, integer=True)
    r(cfg, "model.head_dim", low=0, integer=True)
    r(cfg, "model.init_scale", low=0, low_open=True)
    choice(cfg, "model.dtype", precision.COMPUTE_DTYPES)
    choice(cfg, "train.dtype", ("float32", "float64"))
    simplified = m.kind == "simplified"
    for field, default, has in (
        ("embedding", "one_hot", "learned embeddings: only kind = 'transformer'"),
        ("mlp", False, "MLP layers: only kind = 'transformer'"),
        ("readout_init", "", "a readout: only the general kinds (not 'simplified')"),
        ("learn_value", True, "a fixed value matrix: only kind = 'simplified'"),
        ("head_dim", 0, "head_dim: only kind = 'simplified' reads it"),
    ):
        applies = {
            "embedding": m.kind == "transformer",
            "mlp": m.kind == "transformer",
            "readout_init": not simplified,
            "learn_value": simplified,
            "head_dim": simplified,
        }[field]
        config_lib.require(
            applies or m[field] == default,
            f"model.{field}",
            m[field],
            f"{default!r} for model.kind = {m.kind!r} (it has no {has})",
        )
    try:
        model_of(cfg)
    except (ValueError, TypeError) as error:
        raise config_lib.field_error(error, "model") from None
    training.validate_optim(cfg)
    r(cfg, "optim.lr", low=0, low_open=True)
    config_lib.require_training_steps(cfg)
    config_lib.require_schedule(cfg)
    r(cfg, "train.test_sequences", low=2, integer=True)
    r(cfg, "train.test_seed", low=0, high=2**31 - 1, integer=True)
    r(cfg, "train.floor", low=0, high=1, high_open=True)
    config_lib.require_nonfinite_policy(cfg)
    training.validate_averaging(cfg)
    track_lib.validate_tracking(cfg)
    if cfg.train.track_every:  # the tracked batch: the first of the train.test_sequences
        r(cfg, "train.track_sequences", low=1, high=cfg.train.test_sequences, integer=True)


# validate(cfg): the run's fields, every program's, then the memory estimate; nothing is built
validate = engine_experiment.validator(
    default_config, TRACED, _validate_run, _validate_cell, memory_estimate, unsweepable=ONE_PER_RUN
)


def needs_x64(cfg: ml_collections.ConfigDict) -> bool:
    """The stationarity and curvature studies probe in float64 (training stays in train.dtype)."""
    return cfg.experiment in ("stationarity", "curvature") or cfg.train.dtype == "float64"


# ----------------------------------------------------------------------------- training problem


def test_set(cfg: ml_collections.ConfigDict) -> tuple[jax.Array, jax.Array]:
    """(x_ET, target_ES): the fixed held-out set, the same for every seed and program."""
    t = cfg.task
    x, target, _ = task.sample(
        jax.random.key(cfg.train.test_seed),
        t.num_states,
        t.order_n,
        t.seq_len,
        t.alpha,
        cfg.train.test_sequences,
        t.init,
        cfg.train.dtype,
    )
    return x, target


def _block_norms(params: PyTree, model: model_lib.NgramModel) -> dict[str, jax.Array]:
    """Fig. 6's companion norms: ||A1^h|| / sqrt(T) per head and ||Q2^T K2|| / sqrt(d)."""
    if model.kind != "simplified":
        return {"param_norm": optax.tree.norm(params)}
    out = {
        f"norm_A1_h{h + 1}": jnp.linalg.norm(params["A1"][h]) / math.sqrt(model.seq_len)
        for h in range(model.num_heads)
    }
    qk = params["Q2"].T @ params["K2"]
    out["norm_QK"] = jnp.linalg.norm(qk) / math.sqrt(model.width)
    return out


def make_problem(cfg: ml_collections.ConfigDict) -> training.Problem:
    model, t = model_of(cfg), cfg.task
    dtype = jnp.dtype(cfg.train.dtype)
    B, floor = cfg.train.batch_size, cfg.train.floor
    x_test, y_test = test_set(cfg)
    y_test = y_test.astype(dtype)
    map_x = x_test[:256]  # input-dependent maps: averaged over 256 test sequences

    def loss(
        params: PyTree, key: jax.Array, hp: training.HParams
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        x, target, _ = task.sample(
            key, t.num_states, t.order_n, t.seq_len, t.alpha, B, t.init, cfg.train.dtype
        )
        probs = model_lib.probs(params, x, model)
        return jnp.mean(estimators.cross_entropy(probs, target.astype(probs.dtype), floor)), {}

    half = x_test.shape[0] // 2
    chunk = snapshot_chunk(cfg)
    halves = [
        _chunked(x_test[:half], y_test[:half], chunk),
        _chunked(x_test[half:], y_test[half:], chunk),
    ]

    def snapshot(params: PyTree, hp: training.HParams) -> dict[str, jax.Array]:
        # the population gradient's norm without the Monte-Carlo noise floor (notes §4.7 C7):
        # <g_A, g_B> over two independent halves of the test set is unbiased for ||grad L||^2
        (loss_a, g_a), (loss_b, g_b) = [
            _mean_loss_and_grad(params, model, floor, *chunks) for chunks in halves
        ]
        dot = sum(
            jnp.vdot(a, b)
            for a, b in zip(
                jax.tree_util.tree_leaves(g_a), jax.tree_util.tree_leaves(g_b), strict=True
            )
        )
        out = {
            "test_loss": (loss_a + loss_b) / 2,
            "test_grad_norm": jnp.sign(dot) * jnp.sqrt(jnp.abs(dot)),
        }
        att = model_lib.layer1_attention(params, model, map_x)
        offsets = model_lib.head_offset_attention(att, claims_lib.OFFSETS)  # (heads, offsets)
        out["head_offsets"] = offsets
        for h in range(offsets.shape[0]):
            for j, o in enumerate(claims_lib.OFFSETS):
                out[f"head{h + 1}_lag{o}"] = offsets[h, j]
        if cfg.train.attention_maps:
            out["attention"] = att if att.ndim == 3 else att[0]  # first test sequence
        out.update(_block_norms(params, model))
        return out

    x_init = model_lib.dummy_tokens(model)
    return training.Problem(
        init=lambda key, hp: model.init(key, x_init)["params"],
        loss=loss,
        learning_rates=lambda hp: hp["optim.lr"],
        snapshot=snapshot,
        log_grad_norm=True,
        log_grad_zeros=precision.is_half(model.dtype),
    )


def _chunked(
    x_ET: jax.Array, y_ES: jax.Array, chunk: int
) -> tuple[jax.Array, jax.Array, jax.Array, int]:
    """(x (C, chunk, T), y (C, chunk, S), weight (C, chunk), count): E sequences in C chunks, the
    last padded with copies of the first sequence at weight 0."""
    count = x_ET.shape[0]
    pad = -count % chunk
    weight = jnp.concatenate([jnp.ones(count, y_ES.dtype), jnp.zeros(pad, y_ES.dtype)])
    if pad:
        x_ET = jnp.concatenate([x_ET, jnp.broadcast_to(x_ET[:1], (pad,) + x_ET.shape[1:])])
        y_ES = jnp.concatenate([y_ES, jnp.broadcast_to(y_ES[:1], (pad,) + y_ES.shape[1:])])

    def split(a: jax.Array) -> jax.Array:
        return a.reshape((-1, chunk) + a.shape[1:])

    return split(x_ET), split(y_ES), split(weight), count


def _mean_loss_and_grad(params, model, floor, x_CNT, y_CNS, w_CN, count):
    """(mean test loss, its gradient) over the chunks, one chunk at a time: the sums of the
    per-sequence losses and of their gradients, divided by the count (the mean's numbers, up to
    the rounding of the summation order)."""

    def chunk_sum(p: PyTree, x: jax.Array, y: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.sum(w * estimators.cross_entropy(model_lib.probs(p, x, model), y, floor))

    def body(carry: PyTree, chunk: Sequence[jax.Array]) -> tuple[PyTree, None]:
        value, grad = jax.value_and_grad(chunk_sum)(params, *chunk)
        return jax.tree.map(jnp.add, carry, (value, grad)), None

    # the first chunk's sums start the carry: computed from the params, they vary over a
    # shard_map's runs as the body's output does (a zeros carry would not, and scan refuses that)
    chunks = (x_CNT, y_CNS, w_CN)
    first = jax.value_and_grad(chunk_sum)(params, *[a[0] for a in chunks])
    total, grad = (
        first if x_CNT.shape[0] == 1 else jax.lax.scan(body, first, [a[1:] for a in chunks])[0]
    )
    return total / count, jax.tree.map(lambda g: g / count, grad)


def tracking_loss(cfg: ml_collections.ConfigDict) -> Callable[[PyTree, Any], jax.Array]:
    """The tracked curvature's loss: the mean cross-entropy (points.population_objective) on
    the test set's first train.track_sequences sequences, in the training dtype."""
    x, y = test_set(cfg)
    inputs = (
        x[: cfg.train.track_sequences],
        y[: cfg.train.track_sequences].astype(cfg.train.dtype),
    )
    objective = points.population_objective(model_of(cfg), float(cfg.train.floor))
    return lambda params, hp: objective(params, inputs)


# train_group(cfg, fields, workdir=None, progress=print): one program's runs -> {fields, cfg,
# grid, result}
train_group = functools.partial(
    engine_experiment.train_group,
    traced=TRACED,
    make_problem=make_problem,
    tracking_loss=tracking_loss,
)


# ----------------------------------------------------------------------------- run


def _save_arrays(workdir: records.Workdir, res: training.RunResult, prefix: str) -> None:
    """A program's arrays, names prefixed with its cell (saved before any analysis can fail)."""
    legacy = {"grad_norm": res.metrics["grad_norm"], "lr": res.hparams["optim.lr"]}
    workdir.save_arrays(
        **res.arrays(prefix, complete=True), **{prefix + k: v for k, v in legacy.items()}
    )


def _analyse(
    cfg: ml_collections.ConfigDict, group: dict, lines: claims_lib.Lines
) -> tuple[list[dict], list[records.Claim], list[dict]]:
    """(views, claims, table rows) of a trained program: per measure its analysis rows and the
    config's claim sets (the second measure, metrics_at "both": the spike only), then the spike
    compared across the two measures."""
    claims: list[records.Claim] = []
    table: list[dict] = []
    views = [claims_lib.measured_view(group, *m) for m in claims_lib.measures(group["cfg"])]
    for j, view in enumerate(views):
        view["rows"] = claims_lib.run_analysis(view, lines)
        names = [c for c in cfg.claims.split(",") if c and (j == 0 or c == "grad_norm")]
        for name in names:  # the second measure (metrics_at "both"): the spike only
            claims += records.evaluated(
                name,
                functools.partial(claims_lib.CLAIMS[name], view["cfg"], view, lines, view["rows"]),
            )
        table += [
            dict(
                program=claims_lib.program_label(group),
                measured_at=view["measured_at"] or "current parameters",
                **{k: v for k, v in row.items() if k != "grad_norm_per_snapshot"},
            )
            for row in view["rows"]
        ]
    if len(views) == 2 and "grad_norm" in cfg.claims.split(","):
        claims += records.evaluated(
            "grad_norm by measure",
            functools.partial(
                claims_lib.claims_spike_by_measure,
                cfg,
                views[0],
                views[0]["rows"],
                views[1],
                views[1]["rows"],
            ),
        )
    return views, claims, table


def _run_curvature(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress
) -> dict[str, Any]:
    """One program, probed at its plateau."""
    group = train_group(cfg, {}, workdir, progress)
    _save_arrays(workdir, group["result"], "")
    return curvature_study.run(cfg, group, claims_lib.Lines(cfg), workdir, progress)


def _run_train(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress
) -> dict[str, Any]:
    """The training runs: the estimator lines, one program per structural cell, the claims."""
    lines = claims_lib.Lines(cfg)
    if progress:
        progress("estimator lines: " + ", ".join(f"{k} {v:.4f}" for k, v in lines.base.items()))
    groups: list[dict] = []
    claims: list[records.Claim] = []
    table: list[dict] = []
    cells = config_lib.structural_cells(cfg, TRACED)
    for i, fields in enumerate(cells):
        if fields and progress:
            progress(engine_experiment.program_line(fields))
        if progress:
            cell_cfg = config_lib.with_fields(cfg, fields)
            model = model_of(cell_cfg)
            progress(
                f"model ({precision.of(cell_cfg.train.dtype, cell_cfg.model.dtype).name}):\n"
                + params_table(model_lib.init_params(jax.random.key(cell_cfg.seed), model))
            )
        group = train_group(cfg, fields, workdir, progress)
        _save_arrays(workdir, group["result"], engine_experiment.cell_prefix(i, len(cells)))
        views, group_claims, rows = _analyse(cfg, group, lines)
        claims += group_claims
        table += rows
        groups.append(dict(views[0], other_measure=views[1] if len(views) == 2 else None))
    paths = [str(p) for p in figures.figures_train(cfg, groups, lines, workdir)]
    curvature = (
        plotting.tracked_curvature(
            [g["result"] for g in groups], workdir.figure_path("curvature"), [str(c) for c in cells]
        )
        if any(g["result"].tracked_steps is not None for g in groups)
        else None
    )
    paths += [str(curvature)] if curvature else []
    return workdir.finish(
        claims,
        progress,
        figures=paths,
        lines=lines.base,
        runs=table,
        seconds=engine_experiment.seconds_of([g["result"] for g in groups]),
    )


def run_stationarity(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress = print
) -> dict[str, Any]:
    from landscape.ngrams import stationarity, stationarity_claims

    rows = stationarity.study(**cfg.stationarity.to_dict())  # the group: study's arguments
    text = stationarity.table(rows)
    workdir.write_text("stationarity.txt", text)
    workdir.save_table("stationarity", rows)
    figures = [
        str(stationarity.plot(rows, workdir.figure_path("grad_norm_vs_T"))),
        str(stationarity.plot_loss_vs_c(rows, workdir.figure_path("loss_vs_c"))),
    ]
    claims = records.evaluated("stationarity", lambda: stationarity_claims.study_claims(rows))
    if progress:
        progress(text)
    return workdir.finish(claims, progress, figures=figures, rows=rows)


run = engine_experiment.runner(
    validate,
    _run_train,
    stationarity=run_stationarity,
    eos=functools.partial(eos.run, make_problem=make_problem, traced=TRACED),
    curvature=_run_curvature,
)
