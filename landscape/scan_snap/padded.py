"""One program for the task sizes of a grid (Fig. 6's four K) off the CPU: every run's task padded
to the largest K and M, its own sizes picked by traced numbers; the same numbers as one program
per size, to float rounding (docs/design/cpu_formulations.md, docs/design/scan_snap.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from landscape.engine import backend, sweeps, training
from landscape.engine import config as config_lib
from landscape.scan_snap import model as model_lib
from landscape.scan_snap import task as task_lib
from landscape.typing import PyTree

# structural axes that change only K and M (the support, L and the batch stay): padding can join
PADDABLE = ("data.num_last", "data.num_next_per_last")


def applies(cfg: ml_collections.ConfigDict, cells: Sequence[Mapping[str, Any]]) -> bool:
    """One padded program for `cells` (structural_cells of a training config): off the CPU, when
    there are several and they differ only in PADDABLE fields. On the CPU every run would do the
    largest task's arithmetic, about twice Fig. 6's run (docs/performance.md#compile-time)."""
    fields = {field for cell in cells for field in cell}
    return (
        not backend.cpu_tuned()
        and cfg.experiment == "train"
        and len(cells) > 1
        and fields <= set(PADDABLE)
    )


class PaddedArrays(NamedTuple):
    """The cells' tasks padded to K classes and M tokens and stacked (C cells first): padded
    classes copy class 0 (finite everywhere) and weigh nothing; padded tokens have probability 0
    and are masked out of the softmax over the vocabulary."""

    num_classes: np.ndarray  # (C,)
    class_probs: np.ndarray  # (C, K, M)
    last_token: np.ndarray  # (C, K)
    next_token: np.ndarray  # (C, K)
    support: np.ndarray  # (C, K, S)
    support_cdf: np.ndarray  # (C, K, S)
    is_distinct: np.ndarray  # (C, K, M)
    class_weight: np.ndarray  # (C, K): 1/K_c on the cell's classes, 0 on padding
    token_mask: np.ndarray  # (C, M)


@dataclasses.dataclass(frozen=True)
class PaddedTasks:
    """The cells' tasks, their structural fields and `PaddedArrays`."""

    tasks: tuple[task_lib.SequenceClasses, ...]
    fields: tuple[dict[str, Any], ...]
    arrays: PaddedArrays

    @property
    def num_tokens(self) -> int:
        return self.arrays.class_probs.shape[2]


def pad_tasks(tasks: Sequence[task_lib.SequenceClasses], fields: Sequence[dict]) -> PaddedTasks:
    """`tasks` (one per cell, the same support width and L) padded to the largest K and M."""
    K = max(t.num_classes for t in tasks)
    M = max(t.num_tokens for t in tasks)

    def stack(get: Callable[[task_lib.SequenceClasses], np.ndarray], tokens: bool) -> np.ndarray:
        """get(task)'s classes, then copies of class 0 up to K (tokens padded with zeros)."""
        out = []
        for t in tasks:
            a = np.asarray(get(t))
            if tokens:
                a = np.pad(a, ((0, 0), (0, M - a.shape[1])))
            out.append(np.concatenate([a, np.repeat(a[:1], K - t.num_classes, axis=0)]))
        return np.stack(out)

    counts = np.array([t.num_classes for t in tasks])
    return PaddedTasks(
        tuple(tasks),
        tuple(dict(f) for f in fields),
        PaddedArrays(
            num_classes=counts,
            class_probs=stack(lambda t: t.class_probs, True),
            last_token=stack(lambda t: t.last_token[:, None], False)[..., 0],
            next_token=stack(lambda t: t.next_token[:, None], False)[..., 0],
            support=stack(lambda t: t.support, False),
            support_cdf=stack(lambda t: t.support_cdf, False),
            is_distinct=stack(lambda t: t.is_distinct, True),
            class_weight=(np.arange(K) < counts[:, None]) / counts[:, None],
            token_mask=np.stack([np.arange(M) < t.num_tokens for t in tasks]),
        ),
    )


def cell_index(padded: PaddedTasks, hparams: Mapping[str, jax.Array]) -> jax.Array:
    """The run's cell: the one whose structural fields equal the run's traced copies of them."""
    matches = [
        jnp.all(jnp.stack([hparams[k] == v for k, v in fields.items()])) for fields in padded.fields
    ]
    return jnp.argmax(jnp.stack(matches))


def init_params(
    cfg: ml_collections.ConfigDict, padded: PaddedTasks, key: jax.Array, cell: jax.Array
) -> PyTree:
    """`model.init_params` at the cell's M, zero-padded to the largest: a uniform draw's first
    M_c^2 numbers are the M_c x M_c draw's (threefry counts the flat index)."""
    M, dtype = padded.num_tokens, jnp.dtype(cfg.train.dtype)
    if cfg.model.init == "zeros":
        return {"Y": jnp.zeros((M, M), dtype), "Z": jnp.zeros((M, M), dtype)}
    sizes = jnp.asarray([t.num_tokens for t in padded.tasks])[cell]
    bound = jnp.stack([model_lib.uniform_bound(t.num_tokens) for t in padded.tasks])[cell]
    rows, cols = np.arange(M)[:, None], np.arange(M)[None, :]
    inside = (rows < sizes) & (cols < sizes)
    flat = jnp.where(inside, rows * sizes + cols, 0)

    def draw(k: jax.Array) -> jax.Array:
        values = jax.random.uniform(k, (M * M,), dtype, -bound, bound)
        return jnp.where(inside, values[flat], jnp.zeros((), dtype))

    y_key, z_key = jax.random.split(key)
    return {"Y": draw(y_key), "Z": draw(z_key)}


def _population_loss(
    model: model_lib.YZModel, params: PyTree, population: task_lib.Population, mask: Any, w: Any
) -> jax.Array:
    """`YZModel.population_loss` of a padded task: padded tokens out of the softmax, padded
    classes weighted 0 in the mean."""
    logits = cast(
        jax.Array,
        model.apply({"params": params}, population, method=model_lib.YZModel.population_logits),
    )
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)
    picked = jnp.take_along_axis(log_probs, population.next_token[:, None], axis=1)[:, 0]
    return -jnp.sum(w * picked)


def make_problem(cfg: ml_collections.ConfigDict, padded: PaddedTasks) -> training.Problem:
    """The Y/Z problem of `experiment.make_problem` over the padded tasks: hparams are the TRACED
    learning rates and the cell's structural fields (`cell_index`)."""
    model = model_lib.from_config(cfg, padded.num_tokens)
    B, L, keep = cfg.train.batch_size, padded.tasks[0].seq_len, cfg.eval.snapshot_attention
    arrays = jax.tree.map(jnp.asarray, padded.arrays)  # constants of the program

    def loss(params: PyTree, key: jax.Array, hp: training.HParams) -> tuple[jax.Array, dict]:
        c = cell_index(padded, hp)
        context, query, label, _ = task_lib.sample_classes(
            key,
            B,
            L,
            arrays.num_classes[c],
            arrays.support[c],
            arrays.support_cdf[c],
            arrays.last_token[c],
            arrays.next_token[c],
        )
        logits, _ = model.apply({"params": params}, context, query)
        return model_lib.cross_entropy(jnp.where(arrays.token_mask[c], logits, -jnp.inf), label), {}

    def snapshot(params: PyTree, hp: training.HParams) -> dict[str, jax.Array]:
        c = cell_index(padded, hp)
        population = task_lib.Population(
            arrays.class_probs[c].astype(model.param_dtype),
            arrays.last_token[c],
            arrays.next_token[c],
        )
        c_KM = task_lib.attention_weights(params["Z"], population)
        w = arrays.class_weight[c].astype(c_KM.dtype)
        out = {
            "distinct_entropy": jnp.sum(w * task_lib.masked_entropy(c_KM, arrays.is_distinct[c])),
            "population_loss": _population_loss(model, params, population, arrays.token_mask[c], w),
        }
        if keep:
            out["attention"] = c_KM
        return out

    return training.Problem(
        init=lambda key, hp: init_params(cfg, padded, key, cell_index(padded, hp)),
        loss=loss,
        learning_rates=lambda hp: {
            "Y": hp["optim.lr_z"] * hp["optim.lr_y_over_lr_z"],
            "Z": hp["optim.lr_z"],
        },
        snapshot=snapshot,
    )


def train_cells(
    cfg: ml_collections.ConfigDict,
    cells: Sequence[dict[str, Any]],
    traced: Sequence[str],
    workdir: Any = None,
    progress: Any = print,
) -> list[tuple[task_lib.SequenceClasses, sweeps.Grid, training.RunResult]]:
    """Every cell's runs in one padded program; per cell, what `experiment.train_group` returns
    (its task, grid and result, unpadded; the program's seconds shared evenly)."""
    tasks = [task_lib.sequence_classes(**config_lib.with_fields(cfg, f).data) for f in cells]
    padded = pad_tasks(tasks, cells)
    seeds = np.arange(cfg.seed, cfg.seed + cfg.num_seeds)
    axes = config_lib.traced_axes(cfg, traced)
    structural = {k: sorted({float(f[k]) for f in cells}) for k in cells[0]}
    base = {k: config_lib.get(cfg, k) for k in traced} | {k: v[0] for k, v in structural.items()}
    result = sweeps.run(
        make_problem(cfg, padded),
        cfg.optim,
        base,
        sweeps.Grid.make(structural | axes, seeds),
        dtype=np.dtype(cfg.train.dtype),
        progress=progress,
        workdir=workdir,
        **sweeps.train_options(cfg),
    )
    out = []
    for fields, task in zip(cells, tasks, strict=True):
        runs = np.flatnonzero(
            np.all([result.hparams[k] == float(v) for k, v in fields.items()], axis=0)
        )
        part = split(result, runs, task.num_classes, task.num_tokens, list(fields), len(cells))
        out.append((task, sweeps.Grid.make(axes, seeds), part))
    return out


def split(
    result: training.RunResult, runs: np.ndarray, K: int, M: int, drop: list[str], share: int
) -> training.RunResult:
    """The `runs` of a padded program's result, as their own program's: hparams without the
    structural `drop`, parameters M x M, attention K x M, seconds / `share`."""

    def params(tree: PyTree) -> PyTree:
        return None if tree is None else jax.tree.map(lambda a: np.asarray(a)[runs, :M, :M], tree)

    snapshots = {k: v[runs] for k, v in result.snapshots.items()}
    if "attention" in snapshots:
        snapshots["attention"] = snapshots["attention"][:, :, :K, :M]
    return dataclasses.replace(
        result,
        hparams={k: v[runs] for k, v in result.hparams.items() if k not in drop},
        seeds=result.seeds[runs],
        losses=result.losses[runs],
        metrics={k: v[runs] for k, v in result.metrics.items()},
        snapshots=snapshots,
        final_params=params(result.final_params),
        initial_params=params(result.initial_params),
        first_nonfinite_step=result.first_nonfinite_step[runs],
        compile_seconds=result.compile_seconds / share,
        run_seconds=result.run_seconds / share,
    )
