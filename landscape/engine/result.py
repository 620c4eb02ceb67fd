"""What a training program returns: every run's losses, metrics, snapshots and parameters, and
one run as a `Point` for the probes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape import point as point_lib
from landscape.engine.track import PRECONDITIONED, TRACKED

TRACKED_NAMES = (*TRACKED, "negative_mass", *PRECONDITIONED)

Params = Any


@dataclasses.dataclass
class RunResult:
    """What `train` returns; every array has the run axis R first."""

    hparams: dict[str, np.ndarray]
    seeds: np.ndarray
    losses: np.ndarray  # (R, steps): batch loss at each step, before its update
    metrics: dict[str, np.ndarray]  # (R, steps) each: the loss function's scalar metrics
    snapshot_steps: np.ndarray  # (S,): 0, log_every, ..., num_steps
    snapshots: dict[str, np.ndarray]  # (R, S, ...) each
    final_params: Params  # pytree of (R, ...) arrays
    first_nonfinite_step: np.ndarray  # (R,): -1 where the loss stayed finite
    compile_seconds: float
    run_seconds: float
    initial_params: Params = None  # pytree of (R, ...) arrays: `problem.init` at `run_keys`
    backend: str = ""  # jax.default_backend() of the program
    device_count: int = 0  # devices visible to JAX (jax.device_count())
    program_devices: int = 0  # devices this program's runs (or one run's batch) were laid over
    params_steps: np.ndarray | None = None  # (P,): 0, params_every, ..., num_steps
    kept_params: Params = None  # pytree of (R, P, ...) arrays: the parameters at params_steps
    tracked_steps: np.ndarray | None = None  # (T,): the steps of the tracked metrics (R, T)

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], prefix: str = "", seconds: Any = (np.nan, np.nan)
    ) -> RunResult:
        """The result `arrays(prefix, complete=True)` wrote (what `records.load` reads), with
        its (compile, run) `seconds` (not among the arrays: they differ between equal runs)."""
        a = {k[len(prefix) :]: np.asarray(v) for k, v in arrays.items() if k.startswith(prefix)}
        if "hparam_names" not in a:
            raise ValueError(
                "these arrays hold no complete run result (RunResult.arrays(complete=True) "
                "writes one): the run was recorded before records.load could read it back."
            )
        names = a["hparam_names"].tolist()
        compile_seconds, run_seconds = (float(x) for x in seconds)
        return cls(
            hparams={k: a[k.replace(".", "_")] for k in names},
            seeds=a["seeds"],
            losses=a["losses"],
            metrics={k[len("metric_") :]: v for k, v in a.items() if k.startswith("metric_")},
            snapshot_steps=a["snapshot_steps"],
            snapshots={k[len("snapshot_") :]: v for k, v in a.items() if k.startswith("snapshot_")},
            final_params=_tree_of(a, "final_params"),
            first_nonfinite_step=a["first_nonfinite_step"],
            compile_seconds=compile_seconds,
            run_seconds=run_seconds,
            initial_params=_tree_of(a, "initial_params"),
            params_steps=a.get("params_steps"),
            kept_params=_tree_of(a, "params") if "params_steps" in a else None,
            tracked_steps=a.get("tracked_steps"),
        )

    @property
    def num_runs(self) -> int:
        return len(self.seeds)

    @property
    def num_steps(self) -> int:
        return int(self.snapshot_steps[-1])

    @property
    def tracked(self) -> list[str]:
        """The names of the tracked metrics among `metrics` ((R, T) each, at `tracked_steps`)."""
        if self.tracked_steps is None:
            return []
        return [k for k in self.metrics if k in TRACKED_NAMES]

    def arrays(self, prefix: str = "", complete: bool = False) -> dict[str, np.ndarray]:
        """The result as arrays.npz entries: losses, seeds, snapshot_steps,
        first_nonfinite_step, each hyperparameter ("optim.lr" -> "optim_lr"), each snapshot
        ("snapshot_<name>"), the kept parameters ("params/<leaf name>", (R, P, ...), with
        "params_steps") and the tracked metrics ("metric_lambda_min", ..., (R, T), with
        "tracked_steps"), every name after `prefix` (e.g. "cell1_"). complete: also each
        per-step metric ("metric_<name>", e.g. metric_grad_norm), the initial and final
        parameters ("initial_params/<leaf name>", "final_params/<leaf name>") and the
        hyperparameters' names: what `records.load` reads back."""
        arrays = {
            "losses": self.losses,
            "seeds": self.seeds,
            "snapshot_steps": self.snapshot_steps,
            "first_nonfinite_step": self.first_nonfinite_step,
        }
        arrays.update({k.replace(".", "_"): v for k, v in self.hparams.items()})
        arrays.update({f"snapshot_{k}": v for k, v in self.snapshots.items()})
        if self.kept_params is not None and self.params_steps is not None:
            arrays.update(_named_leaves("params", self.kept_params), params_steps=self.params_steps)
        if self.tracked_steps is not None:
            arrays.update({f"metric_{k}": self.metrics[k] for k in self.tracked})
            arrays["tracked_steps"] = self.tracked_steps
        if complete:
            arrays.update({f"metric_{k}": v for k, v in self.metrics.items()})
            for which in ("initial", "final"):
                arrays.update(_named_leaves(f"{which}_params", self.params(which)))
            arrays["hparam_names"] = np.asarray(list(self.hparams), dtype=str)
        return {prefix + k: v for k, v in arrays.items()}

    def run_index(self, run: int | Mapping[str, float]) -> int:
        """The index of a run: an int, or {hyperparameter or "seed": value} naming one run."""
        if not isinstance(run, Mapping):
            if isinstance(run, bool) or not isinstance(run, (int, np.integer)):
                raise _checks.ArgumentTypeError(
                    f"run = {run!r}: must be a run's index (an int) or {{hyperparameter or "
                    f"'seed': value}}, e.g. {{'seed': 0}}, not {_checks.type_name(run)}."
                )
            if not 0 <= int(run) < self.num_runs:
                raise IndexError(f"run {run}: this result has runs 0 .. {self.num_runs - 1}.")
            return int(run)
        columns = {**self.hparams, "seed": self.seeds}
        unknown = set(run) - set(columns)
        if unknown:
            raise KeyError(f"{sorted(unknown)} name no column of this result ({sorted(columns)}).")
        match = np.ones(self.num_runs, bool)
        for name, value in run.items():
            match &= np.isclose(np.asarray(columns[name], np.float64), value)
        if match.sum() != 1:
            values = "; ".join(
                f"{k} {', '.join(f'{v:g}' for v in np.unique(np.asarray(columns[k], float)))}"
                for k in columns
            )
            raise KeyError(
                f"run = {dict(run)} matches {int(match.sum())} runs, not one (the runs have "
                f"{values}): name one by its hyperparameters and seed, or give its index."
            )
        return int(np.flatnonzero(match)[0])

    def params_at(self, step: int, run: int | Mapping[str, float] | None = None) -> Params:
        """The parameters after `step` updates: every run's (R first), or one run's. Step 0 and
        the last step are always kept; others where the run kept them (`params_every`)."""
        step = _checks.check_int("step", step, 0, "a training step")
        if step == 0 and self.initial_params is not None:
            return self.params("initial", run)
        if step == self.num_steps:
            return self.params("final", run)
        steps = [] if self.params_steps is None else self.params_steps.tolist()
        if step not in steps:
            kept = f"steps {_steps_text(steps)}" if steps else "no steps but the first and last"
            raise ValueError(
                f"step = {step}: this result kept the parameters at {kept} (train with "
                "params_every to keep others)."
            )
        index = steps.index(step)
        chosen = jax.tree.map(lambda x: np.asarray(x[:, index]), self.kept_params)
        if run is None:
            return chosen
        run_index = self.run_index(run)
        return jax.tree.map(lambda x: np.asarray(x[run_index]), chosen)

    def params(self, which: str = "final", run: int | Mapping[str, float] | None = None) -> Params:
        """The "initial" or "final" parameters: every run's (R first), or one run's."""
        if which not in ("initial", "final"):
            raise ValueError(f"which = {which!r}: must be 'initial' or 'final'.")
        params = self.initial_params if which == "initial" else self.final_params
        if params is None:
            raise ValueError("this result keeps no initial parameters (made before they were).")
        if run is None:
            return params
        index = self.run_index(run)
        return jax.tree.map(lambda x: np.asarray(x[index]), params)

    def point(
        self,
        run: int | Mapping[str, float],
        loss: Callable[..., jax.Array] | tuple[Callable[[Params, Any], jax.Array], Any],
        which: str = "final",
        dtype: Any = None,
        step: int | None = None,
    ) -> point_lib.Point:
        """One run's initial or final parameters, or those at `step` (`params_at`), as a `Point`
        for the probes (hessian_at, ...), named after the run and step, with no prediction.

        `loss` is loss_fn(params) -> scalar, or a `Track`'s loss(params, hparams) (filled with
        this run's hyperparameters), or an (objective, inputs) pair, objective(params, inputs)
        -> scalar (points of one model then share compiled programs). `run` is an index
        or {hyperparameter or "seed": value}, e.g. {"lr": 0.1, "seed": 2}. `dtype`: the
        floating parameters cast to it (e.g. float64 for curvature, with x64 on).
        """
        index = self.run_index(run)
        if which not in ("initial", "final"):
            raise ValueError(f"which = {which!r}: must be 'initial' or 'final'.")
        _check_loss(loss)
        if dtype is not None:
            try:
                dtype = jnp.dtype(dtype)
            except TypeError:
                dtype = None
            if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
                raise _checks.ArgumentTypeError(
                    "dtype: must be a floating dtype (e.g. np.float64) or None (the trained "
                    "parameters' own)."
                )
        setting = ", ".join(
            [f"{k}={float(v[index]):g}" for k, v in self.hparams.items()]
            + [f"seed {int(self.seeds[index])}"]
        )

        def cast(x: np.ndarray) -> jax.Array:
            floating = dtype is not None and jnp.issubdtype(x.dtype, jnp.floating)
            return jnp.asarray(x, dtype if floating else None)

        if step is None:
            params, where = self.params(which, index), which
        else:
            params, where = self.params_at(step, index), f"step {step}"
        params = jax.tree.map(cast, params)
        name = f"run {index} ({setting}), {where}"
        if isinstance(loss, tuple):
            objective, inputs = loss
            point = point_lib.Point(params, name=name, objective=objective, inputs=inputs)
        elif _checks.takes(loss, 1) is False and _checks.takes(loss, 2):  # a Track's loss
            hp = {k: jnp.asarray(v[index]) for k, v in self.hparams.items()}
            point = point_lib.Point(params, name=name, objective=loss, inputs=hp)
        else:
            point = point_lib.Point(params, loss, name=name)
        _check_reads(point, index)
        return point


def _check_reads(point: point_lib.Point, index: int) -> None:
    """One sentence when the loss cannot read this run's parameters (another model's loss): it
    is traced once (`jax.eval_shape`, nothing computed), as the first probe would."""
    objective, inputs = point.shared
    try:
        jax.eval_shape(objective, point.params, inputs)
    except Exception as error:  # noqa: BLE001 -- reported in the sentence
        names = [name for name, _, _ in point_lib.param_names(point.params)]
        shown = ", ".join(names[:4]) + (", ..." if names[4:] else "")
        raise ValueError(
            f"loss cannot read the parameters of run {index} ({shown}): "
            f"{type(error).__name__}: {str(error)[:120]}; give the loss of the model this run "
            "trained."
        ) from None


def _check_loss(loss: object) -> None:
    """A loss function, or an (objective, inputs) pair."""
    if callable(loss):
        if _checks.takes(loss, 1) is False:
            _checks.check_signature(
                "loss",
                loss,
                2,
                "loss(params) or loss(params, hparams)",
                "give objective(params, inputs) as the pair (objective, inputs)",
            )
        return
    if isinstance(loss, tuple) and len(loss) == 2 and callable(loss[0]):
        return
    raise _checks.ArgumentTypeError(
        f"loss = {loss!r}: must be a function params -> scalar loss, or a pair (objective, "
        f"inputs) with objective(params, inputs) -> scalar loss, not {_checks.type_name(loss)}."
    )


def _named_leaves(prefix: str, params: Params) -> dict[str, np.ndarray]:
    """{"<prefix>/<leaf name>": leaf} ("<prefix>" alone for a single unnamed leaf)."""
    return {
        prefix + (f"/{name}" if name else ""): np.asarray(leaf)
        for (name, _, _), leaf in zip(
            point_lib.param_names(params), jax.tree.leaves(params), strict=True
        )
    }


def _tree_of(arrays: Mapping[str, np.ndarray], prefix: str) -> Params:
    """The pytree `_named_leaves(prefix, params)` wrote, as nested dicts by the leaf names
    (what Flax parameters are; their leaves flatten in the same order)."""
    if prefix in arrays:
        return arrays[prefix]
    tree: dict[str, Any] = {}
    for key, value in arrays.items():
        if not key.startswith(prefix + "/"):
            continue
        *path, leaf = key[len(prefix) + 1 :].split("/")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _steps_text(steps: list[int]) -> str:
    if len(steps) > 6:
        return f"{steps[0]}, {steps[1]}, ..., {steps[-1]}"
    return ", ".join(map(str, steps))


def run_timing(results: list[RunResult]) -> dict[str, Any]:
    """Compile and run seconds and the number of runs of several programs' results."""
    return {
        "compile_seconds": sum(r.compile_seconds for r in results),
        "run_seconds": sum(r.run_seconds for r in results),
        "runs": sum(r.num_runs for r in results),
    }
