"""Curvature tracked inside a compiled training run (`landscape.Track`): every `every` steps, the
extreme Hessian eigenvalues of a deterministic loss by a fixed number of Lanczos steps, its
gradient norm and loss, and optionally the SLQ negative mass; vmapped over runs with the rest of
the chunk; with `preconditioned`, Adam's preconditioned sharpness too (docs/notes/
edge_of_stability.md). docs/guide/tracking.md; notes/landscape_geometry.md §8 for the quadrature."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape import _checks
from landscape import point as point_lib
from landscape.core import batches as batches_lib
from landscape.core import hvp, lanczos, preconditioner, ritz
from landscape.engine import config as config_lib

Params = Any
HParams = dict[str, jax.Array]

# the per-step metrics a Track adds to a run (negative_mass only with negative_mass=True)
TRACKED = ("lambda_min", "lambda_max", "track_grad_norm", "track_loss")
# with preconditioned=True: the extreme eigenvalues of P^{-1/2} H P^{-1/2}, P Adam's diagonal
PRECONDITIONED = ("preconditioned_lambda_min", "preconditioned_lambda_max")


@dataclasses.dataclass(frozen=True)
class Track:
    """What to track along training, passed as `sweeps.run(..., track=Track(...))`; measured at
    the current parameters (whatever `metrics_at` says of the snapshots).

    loss: (params, hparams) -> scalar, a deterministic loss (an evaluation batch fixed in
        advance, or a population loss), hparams the run's traced hyperparameters; a loss that
        reads no hyperparameters may be loss(params), as `Point` and `result.point` take it
        (which form is read from the number of positional arguments the function takes).
    every: track at the steps 0, every, 2 every, ... (a multiple of the run's log_every).
    num_lanczos: Lanczos steps (Hessian-vector products) per probe; the extreme Ritz values
        converge first, so a few steps give lambda_min and lambda_max (from inside the spectrum).
    probes: Lanczos runs from independent random starts; the extremes are taken over all.
    negative_mass: also the SLQ estimate of the fraction of eigenvalues below
        -negative_below * max |Ritz value| (the mean over probes of their Gauss weights there).
    seed: the start vectors' key is fold_in(key(seed), step): the same for every run.
    preconditioned: also the extreme eigenvalues of P^{-1/2} H P^{-1/2}, P = diag(sqrt(v̂) + ε)
        from the run's own Adam state at that step (Cohen et al., 2022, §3; its λ_max is the
        preconditioned sharpness, docs/notes/edge_of_stability.md): the run's optimizer must be
        adam or adamw; NaN at step 0, before Adam has a second moment.
    batches: an evaluation set in batches (leaves with one leading axis of B batches, or those
        and a short last batch, as `landscape.batches` makes): the loss is then loss(params,
        hparams, batch) (or loss(params, batch), as a `Point`'s objective), its mean over the
        batches, each weighed by its examples, tracked with memory for one batch
        (`core.hvp.batched_gradient`).
    """

    loss: Callable[..., jax.Array]
    every: int
    num_lanczos: int = 10
    probes: int = 1
    negative_mass: bool = False
    negative_below: float = 1e-4
    seed: int = 0
    preconditioned: bool = False
    batches: Any = dataclasses.field(default=None, compare=False, repr=False)
    # whether the loss takes the hyperparameters (set from its signature)
    _takes_hparams: bool = dataclasses.field(default=True, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.loss):
            raise TypeError(
                f"loss = {self.loss!r}: must be a function (params, hparams) -> scalar loss, "
                f"not {_checks.type_name(self.loss)}."
            )
        full = 2 if self.batches is None else 3
        if _checks.takes(self.loss, full) is False:
            form = "(params, hparams)" if self.batches is None else "(params, hparams, batch)"
            short = "(params)" if self.batches is None else "(params, batch)"
            _checks.check_signature("loss", self.loss, full - 1, f"loss{form} or loss{short}")
            object.__setattr__(self, "_takes_hparams", False)
        _checks.check_int("every", self.every, 1, "the steps between two tracked steps")
        _checks.check_int("num_lanczos", self.num_lanczos, 1, "Lanczos steps per probe")
        _checks.check_int("probes", self.probes, 1, "Lanczos runs from random starts")
        _checks.check_bool("negative_mass", self.negative_mass)
        _checks.check_real(
            "negative_below", self.negative_below, low=0, meaning="relative to max |λ|"
        )
        _checks.check_int("seed", self.seed, 0, "the key of the Lanczos start vectors")
        _checks.check_bool("preconditioned", self.preconditioned)
        if self.batches is not None:
            point_lib.check_not_listed("batches", self.batches)
            stack = batches_lib.split(self.batches)[0]  # a short last batch apart
            sizes = {np.shape(leaf)[:1] for leaf in jax.tree.leaves(stack)}
            if len(sizes) != 1 or sizes == {()}:
                raise ValueError(
                    "batches: every leaf must have the same leading axis of B batches, e.g. "
                    "landscape.batches((x, y), batch_size=256)."
                )

    @property
    def names(self) -> tuple[str, ...]:
        """The metrics this track records."""
        return (
            TRACKED
            + (("negative_mass",) if self.negative_mass else ())
            + (PRECONDITIONED if self.preconditioned else ())
        )

    def check_cadence(self, log_every: int, num_steps: int) -> None:
        """ValueError unless `every` is a multiple of the run's snapshot cadence and at most its
        number of steps (beyond it only step 0 would be tracked)."""
        if self.every % log_every:
            raise ValueError(
                f"track.every = {self.every} must be a multiple of log_every = {log_every} "
                "(curvature is tracked at snapshot steps)."
            )
        if self.every > num_steps:
            raise ValueError(
                f"track.every = {self.every} exceeds the run's num_steps = {num_steps}: only "
                f"step 0 would be tracked; give an every of at most {num_steps}."
            )

    def value(self, params: Params, hp: HParams, *batch: Any) -> jax.Array:
        """The loss at `params` (on `batch` with batches), in whichever form it was given."""
        return self.loss(params, hp, *batch) if self._takes_hparams else self.loss(params, *batch)


def measure(
    track: Track, params: Params, hp: HParams, step: jax.Array, inverse_sqrt: Any = None
) -> dict[str, jax.Array]:
    """The tracked metrics at `params` (one run; vmapped by the chunk): the functional tracker's
    core (`landscape.core`: one linearisation of the loss's gradient, then a Lanczos run and its
    Ritz values) from `probes` cold starts, `num_lanczos` Hessian-vector products each; with
    `inverse_sqrt` (the flat P^{-1/2}, `adam_inverse_sqrt`) the same starts on P^{-1/2} H P^{-1/2}
    too (`core.hvp.preconditioned`), NaN where P^{-1/2} is not finite."""
    flat, unravel = ravel_pytree(params)
    inputs = () if track.batches is None else (track.batches,)
    value, grad, matvec = hvp.loss_operator(
        lambda p, *batch: track.value(p, hp, *batch), flat, unravel, inputs, bool(inputs)
    )
    num_iters = min(track.num_lanczos, flat.size)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(track.seed), step), track.probes)

    def extremes(linear: Callable[[jax.Array], jax.Array]) -> tuple[jax.Array, jax.Array]:
        def measured(key: jax.Array) -> tuple[jax.Array, jax.Array]:
            start_key, restart_key = jax.random.split(key)  # as lanczos.lanczos draws its start
            start = lanczos.varying_like(jax.random.normal(start_key, flat.shape, flat.dtype), flat)
            found = ritz.ritz(lanczos.extract(lanczos.run(linear, start, num_iters, restart_key)))
            return found.values, found.weights

        return jax.vmap(measured)(keys)  # (probes, num_iters) each

    nodes, weights = extremes(matvec)
    out = {
        "lambda_min": jnp.min(nodes[:, 0]),
        "lambda_max": jnp.max(nodes[:, -1]),
        "track_grad_norm": jnp.linalg.norm(grad),
        "track_loss": value,
    }
    if track.negative_mass:
        below = nodes < -track.negative_below * jnp.max(jnp.abs(nodes))
        out["negative_mass"] = jnp.mean(jnp.sum(jnp.where(below, weights, 0), axis=1))
    if track.preconditioned:
        defined = jnp.all(jnp.isfinite(inverse_sqrt))
        scale = jnp.where(defined, inverse_sqrt, jnp.ones_like(inverse_sqrt)).astype(flat.dtype)
        pre, _ = extremes(hvp.preconditioned(matvec, scale))
        nan = jnp.full((), jnp.nan, pre.dtype)
        out["preconditioned_lambda_min"] = jnp.where(defined, jnp.min(pre[:, 0]), nan)
        out["preconditioned_lambda_max"] = jnp.where(defined, jnp.max(pre[:, -1]), nan)
    return out


def adam_inverse_sqrt(opt_state: Any, b2: float, eps: float) -> jax.Array:
    """The flat P^{-1/2} = 1 / sqrt(sqrt(v̂) + ε) of the Adam state in `opt_state`
    (`core.preconditioner.adam_preconditioner`, v̂ the second moment bias-corrected at Adam's
    last update t, Kingma & Ba, Alg. 1); NaN before the first update."""
    if preconditioner.adam_state(opt_state) is None:
        raise ValueError(
            "track.preconditioned needs the run's optimizer to be adam or adamw (an Adam state "
            "in its optimizer state; found none)."
        )
    diagonal, _ = ravel_pytree(preconditioner.adam_preconditioner(opt_state, eps=eps, b2=b2))
    return 1 / jnp.sqrt(diagonal)


def measure_at(
    track: Track | None, params: Params, hp: HParams, step: jax.Array, inverse_sqrt: Any = None
) -> dict[str, jax.Array]:
    """`measure` at a step that is a multiple of `track.every`, NaN at any other (a real branch:
    the step is the same for every run, so vmap keeps the `lax.cond` and other snapshots cost
    nothing); {} without a track."""
    if track is None:
        return {}
    check_output(track, params, hp)
    shapes = jax.eval_shape(lambda: measure(track, params, hp, step, inverse_sqrt))
    like = jax.tree.leaves(params)[0]

    def skipped() -> dict[str, jax.Array]:
        return {
            k: lanczos.varying_like(jnp.full(s.shape, jnp.nan, s.dtype), like)
            for k, s in shapes.items()
        }

    return jax.lax.cond(
        step % track.every == 0, lambda: measure(track, params, hp, step, inverse_sqrt), skipped
    )


def check_output(track: Track, params: Params, hp: HParams) -> None:
    """One sentence, while the chunk is traced, for a tracked loss that reads a hyperparameter
    the run does not have or does not return one floating-point scalar."""
    batch = () if track.batches is None else (batches_lib.first_batch(track.batches),)
    try:
        out = jax.eval_shape(lambda: track.value(params, hp, *batch))
    except KeyError as error:
        name = error.args[0] if error.args else None
        if not isinstance(name, str) or name in hp:
            raise
        raise ValueError(
            f"track.loss reads hparams[{name!r}], which this run does not have (its "
            f"hyperparameters: {', '.join(sorted(hp)) or 'none'})."
        ) from None
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape != () or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        what = (
            f"a {_checks.type_name(out)}"
            if shape is None
            else f"an array of shape {shape} and dtype {dtype}"
        )
        raise TypeError(
            f"track.loss returned {what}: it must return one floating-point scalar (reduce it, "
            "e.g. jnp.mean, or return the loss alone)."
        )


def default_tracking() -> dict[str, Any]:
    """The `train` group's fields for parameters at chosen steps and tracked curvature (every
    package's config has them; 0: off, the default of the CPU figure configs)."""
    return dict(
        params_every=0,  # keep the parameters every this many steps (a multiple of log_every)
        track_every=0,  # lambda_min / lambda_max every this many steps (a multiple of log_every)
        track_lanczos=10,  # Lanczos steps (Hessian-vector products) per tracked step and probe
        track_probes=1,  # Lanczos start vectors per tracked step
        track_negative_mass=False,  # also the SLQ fraction of negative eigenvalues
    )


def validate_tracking(cfg: Any) -> None:
    """The fields of `default_tracking`: cadences that are multiples of train.log_every (the
    kept parameters' dividing train.num_steps), at least one Lanczos step and probe."""
    t, r = cfg.train, config_lib.require_number
    for field in ("params_every", "track_every"):
        r(cfg, f"train.{field}", low=0, integer=True)
        value = t[field]
        fits = t.num_steps % max(value, 1) == 0 if field == "params_every" else value <= t.num_steps
        config_lib.require(
            value == 0 or (value % t.log_every == 0 and fits),
            f"train.{field}",
            value,
            f"0 (off) or a multiple of train.log_every = {t.log_every}"
            + (" that divides" if field == "params_every" else " at most")
            + f" train.num_steps = {t.num_steps}",
        )
    r(cfg, "train.track_lanczos", low=1, integer=True)
    r(cfg, "train.track_probes", low=1, integer=True)


def track_of(cfg: Any, loss: Callable[..., jax.Array], batches: Any = None) -> Track | None:
    """The Track a config's train group asks for with `loss` (None when train.track_every = 0):
    loss(params, hparams), or with `batches` (an evaluation set in batches) loss(params,
    hparams, batch) or loss(params, batch)."""
    t = cfg.train
    if not t.get("track_every", 0):
        return None
    return Track(
        loss=loss,
        every=t.track_every,
        num_lanczos=t.track_lanczos,
        probes=t.track_probes,
        negative_mass=t.track_negative_mass,
        batches=batches,
    )
