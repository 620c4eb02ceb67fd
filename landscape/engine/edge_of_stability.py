"""The edge-of-stability study's skeleton, shared by the papers (docs/notes/edge_of_stability.md;
docs/studies/edge_of_stability.md): a paper's model trained by full-batch gradient descent (its
loss on one fixed training set) at a few step sizes η, and by Adam, every run's λ_max tracked
inside the compiled run against 2/η (Cohen et al., ICLR 2021), Adam's preconditioned sharpness
against (2 + 2β1)/((1 - β1)η) (Cohen et al., 2022); the paper's phases placed against the step
where sharpening reaches the threshold. A paper supplies only its `Part`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from landscape.engine import claims as claims_lib
from landscape.engine import config as config_lib
from landscape.engine import experiment, plotting, records, study, sweeps, training
from landscape.engine import track as track_lib
from landscape.typing import Progress, Row

OPTIMIZERS = ("gd", "adam")
# a loss increase counts when it exceeds this fraction of the loss (float32 rounding below it)
RISE = 1e-6
Phases = dict[str, np.ndarray]  # phase name -> (R,) the step it happens in each run, -1: never


@dataclasses.dataclass(frozen=True)
class Part:
    """What a paper hands the study: its training problem at a config, the traced field that is
    the step size η (every parameter group then trains at η), its traced fields, and its phases
    read from a run's records; `prepare(cell)` where the paper derives fields."""

    make_problem: Callable[[ml_collections.ConfigDict], training.Problem]
    lr_field: str
    traced: Sequence[str]
    phases: Callable[[ml_collections.ConfigDict, training.RunResult], Phases]
    prepare: Callable[[ml_collections.ConfigDict], None] | None = None


def default_study() -> ml_collections.ConfigDict:
    """The `eos` group of a paper's config (read by experiment = 'eos')."""
    return ml_collections.ConfigDict(
        dict(
            step_sizes=[0.1, 0.3, 1.0],  # η of full-batch gradient descent
            adam_step_sizes=[0.003],  # η of Adam (optim.b1, optim.b2, optim.eps)
            data_seed=0,  # the key of the one fixed training set (the full batch)
            reach_rtol=0.1,  # sharpening reaches the threshold at λ_max >= (1 - rtol) x it
        )
    )


def validate(cfg: ml_collections.ConfigDict) -> None:
    """The study's fields, for experiment = 'eos': one ConfigError sentence each."""
    if cfg.get("experiment") != "eos":
        return
    config_lib.require_numbers(cfg, "eos.step_sizes", low=0, low_open=True)
    config_lib.require_numbers(cfg, "eos.adam_step_sizes", low=0, low_open=True)
    config_lib.require_number(cfg, "eos.data_seed", low=0, integer=True)
    config_lib.require_number(cfg, "eos.reach_rtol", low=0, high=1, high_open=True)
    study.require_every(cfg, "eos", "λ_max is tracked along training", ("track_every",))


def threshold(optimizer: str, lr: float, b1: float = 0.9) -> float:
    """The stability threshold at step size `lr`: 2/η for gradient descent, (2 + 2β1)/((1 - β1)η)
    for Adam's preconditioned sharpness (docs/notes/edge_of_stability.md §1, §2)."""
    return 2 / lr if optimizer == "gd" else (2 + 2 * b1) / ((1 - b1) * lr)


def optimizer_cell(cfg: ml_collections.ConfigDict, optimizer: str) -> ml_collections.ConfigDict:
    """The config of one optimizer's program: plain gradient descent (no momentum, decay,
    clipping or schedule) or Adam with the config's b1, b2, eps; losses kept when a run diverges."""
    cell = ml_collections.ConfigDict(cfg.to_dict())
    cell.optim.update(
        name="sgd" if optimizer == "gd" else "adam",
        momentum=0.0,
        nesterov=False,
        weight_decay=0.0,
        clip_norm=0.0,
        schedule="constant",
    )
    cell.train.on_nonfinite = "mark"
    return cell


def full_batch(problem: training.Problem, data_seed: int, lr_field: str) -> training.Problem:
    """`problem` on one fixed training set (its batch drawn from key(data_seed) at every step:
    full-batch gradient descent), every parameter at the one step size hp[lr_field]."""
    key = jax.random.key(data_seed)
    return dataclasses.replace(
        problem,
        loss=lambda params, _key, hp, *step: problem.loss(params, key, hp, *step),
        learning_rates=lambda hp: hp[lr_field],
        batch_size=None,
    )


def full_batch_loss(problem: training.Problem, data_seed: int) -> Callable[..., jax.Array]:
    """The loss gradient descent descends, (params, hparams) -> scalar: the tracked loss."""
    key = jax.random.key(data_seed)
    return lambda params, hp: problem.loss(params, key, hp)[0]


def train(
    cfg: ml_collections.ConfigDict,
    part: Part,
    optimizer: str,
    workdir: Any = None,
    progress: Progress = print,
) -> tuple[ml_collections.ConfigDict, training.RunResult]:
    """One optimizer's program: its step sizes x seeds as one vmapped run, λ_max (and for Adam
    the preconditioned λ_max) tracked every train.track_every steps on the full-batch loss."""
    cell = optimizer_cell(cfg, optimizer)
    if part.prepare is not None:
        part.prepare(cell)
    problem = part.make_problem(cell)
    sizes = cfg.eos.step_sizes if optimizer == "gd" else cfg.eos.adam_step_sizes
    t = cell.train
    track = track_lib.Track(
        loss=full_batch_loss(problem, cfg.eos.data_seed),
        every=t.track_every,
        num_lanczos=t.track_lanczos,
        probes=t.track_probes,
        preconditioned=optimizer == "adam",
    )
    grid = sweeps.Grid.make(
        {part.lr_field: [float(s) for s in sizes]}, np.arange(cfg.seed, cfg.seed + cfg.num_seeds)
    )
    result = sweeps.run_cell(
        full_batch(problem, cfg.eos.data_seed, part.lr_field),
        cell,
        part.traced,
        grid,
        fields={"optimizer": optimizer},
        workdir=workdir,
        progress=progress,
        track=track,
    )
    return cell, result


# ----------------------------------------------------------------------------- measurements


def reach_step(steps: np.ndarray, ratio: np.ndarray, rtol: float) -> int | None:
    """The first tracked step whose λ_max / threshold is at least 1 - rtol (None: never)."""
    at = np.flatnonzero(np.nan_to_num(ratio, nan=-np.inf) >= 1 - rtol)
    return int(steps[at[0]]) if at.size else None


def increases(losses: np.ndarray, start: int, stop: int) -> int:
    """The steps t in [start, stop - 1) whose full-batch loss rises to t + 1 by more than RISE of
    itself (losses[t] is the loss at the parameters before update t)."""
    window = losses[start:stop]
    rises = window[1:] - window[:-1] > RISE * np.abs(window[:-1])
    return int(np.sum(rises))


def run_row(
    optimizer: str,
    lr: float,
    seed: int,
    steps: np.ndarray,
    sharpness: np.ndarray,
    losses: np.ndarray,
    rtol: float,
    b1: float = 0.9,
) -> Row:
    """One run's row: its threshold, the step sharpening reaches it, λ_max / threshold at most
    and (median) after reaching it, the loss's rises before and after, the loss there and at the
    end, and the first non-finite step (None: finite)."""
    level = threshold(optimizer, lr, b1)
    ratio = sharpness / level
    reach = reach_step(steps, ratio, rtol)
    finite = np.isfinite(losses)
    stop = int(np.argmin(finite)) if not finite.all() else losses.size
    after = ratio[steps >= reach] if reach is not None else np.array([])
    return {
        "optimizer": optimizer,
        "lr": lr,
        "seed": seed,
        "threshold": level,
        "initial_ratio": float(ratio[0]) if np.isfinite(ratio[0]) else None,
        "reach_step": reach,
        "max_ratio": float(np.nanmax(ratio)) if np.isfinite(ratio).any() else None,
        "hover_ratio": float(np.nanmedian(after)) if np.isfinite(after).any() else None,
        "rises_before": increases(losses, 0, min(reach if reach is not None else stop, stop)),
        "rises_after": increases(losses, reach, stop) if reach is not None else None,
        "loss_at_reach": float(losses[reach]) if reach is not None and reach < stop else None,
        "final_loss": float(losses[stop - 1]) if stop else None,
        "nonfinite_step": None if stop == losses.size else stop,
    }


def rows_of(
    cfg: ml_collections.ConfigDict,
    optimizer: str,
    result: training.RunResult,
    phases: Phases,
    lr_field: str,
) -> list[Row]:
    """Every run's `run_row`, with the step of each of the paper's phases (None: never)."""
    key = "lambda_max" if optimizer == "gd" else "preconditioned_lambda_max"
    steps = np.asarray(result.tracked_steps)
    out = []
    for r in range(len(result.seeds)):
        row = run_row(
            optimizer,
            float(result.hparams[lr_field][r]),
            int(result.seeds[r]),
            steps,
            np.asarray(result.metrics[key][r], float),
            np.asarray(result.losses[r], float),
            float(cfg.eos.reach_rtol),
            float(cfg.optim.b1),
        )
        for name, at in phases.items():
            row[f"phase {name}"] = int(at[r]) if at[r] >= 0 else None
        out.append(row)
    return out


# ----------------------------------------------------------------------------- claims


def _by_lr(rows: Sequence[Row], optimizer: str) -> dict[float, list[Row]]:
    out: dict[float, list[Row]] = {}
    for row in rows:
        if row["optimizer"] == optimizer:
            out.setdefault(row["lr"], []).append(row)
    return out


def _name(optimizer: str) -> tuple[str, str]:
    """(the optimizer's label, its threshold's)."""
    return ("GD", "2/η") if optimizer == "gd" else ("Adam", "(2+2β1)/((1-β1)η)")


def claims(rows: Sequence[Row], rtol: float, phase_names: Sequence[str]) -> list[records.Claim]:
    """Per optimizer: sharpening reaches the threshold (within rtol) in every run; after it,
    λ_max / threshold hovers within 1 ± rtol (the median of each run's); the loss stops falling
    monotonically there and still falls; and where each of the paper's phases falls against it.
    Runs that stay finite are a sanity check. docs/notes/edge_of_stability.md §3."""
    out = []
    for optimizer in OPTIMIZERS:
        by_lr = _by_lr(rows, optimizer)
        if not by_lr:
            continue
        label, level = _name(optimizer)
        source = "Cohen et al. (2021), §3" if optimizer == "gd" else "Cohen et al. (2022), §3"
        reached, every = _runs_where(by_lr, lambda r: r["reach_step"] is not None)
        out.append(
            claims_lib.claim(
                f"{label}: sharpening reaches {level} (λ_max ≥ {1 - rtol:g} x it) in every run",
                reached,
                "every run at every step size",
                every,
                source,
            )
        )
        out.append(_hover_claim(label, level, by_lr, rtol, source))
        out.append(_monotone_claim(label, level, by_lr, source))
        out += [_phase_claim(label, level, by_lr, name) for name in phase_names]
        finite, every = _runs_where(by_lr, lambda r: r["nonfinite_step"] is None)
        out.append(
            claims_lib.sanity(
                f"{label}: runs whose loss stays finite",
                finite,
                "all (a diverged run's loss is kept to its first non-finite step)",
                every,
            )
        )
    return out


def _runs_where(
    by_lr: dict[float, list[Row]], holds: Callable[[Row], bool]
) -> tuple[dict[float, str], bool]:
    """{lr: "held/runs"} of the runs where `holds` does, and whether it holds in every run."""
    held = {lr: sum(holds(r) for r in rs) for lr, rs in by_lr.items()}
    every = all(held[lr] == len(rs) for lr, rs in by_lr.items())
    return {lr: f"{held[lr]}/{len(rs)}" for lr, rs in by_lr.items()}, every


def _hover_claim(
    label: str, level: str, by_lr: dict[float, list[Row]], rtol: float, source: str
) -> records.Claim:
    medians = {
        lr: [round(r["hover_ratio"], 3) for r in rs if r["hover_ratio"] is not None]
        for lr, rs in by_lr.items()
    }
    values = [v for vs in medians.values() for v in vs]
    return claims_lib.claim(
        f"{label}: once reached, λ_max hovers at {level} (each run's median ratio after it)",
        {lr: vs or "never reached" for lr, vs in medians.items()},
        f"within 1 ± {rtol:g}",
        bool(values) and all(abs(v - 1) <= rtol for v in values),
        source,
    )


def _monotone_claim(
    label: str, level: str, by_lr: dict[float, list[Row]], source: str
) -> records.Claim:
    """The loss falls monotonically before the threshold and not after it, yet still falls."""
    measured, passed, any_reached = {}, True, False
    for lr, rs in by_lr.items():
        hit = [r for r in rs if r["reach_step"] is not None and r["final_loss"] is not None]
        any_reached |= bool(hit)
        measured[lr] = [
            f"rises {r['rises_before']} before, {r['rises_after']} after; loss "
            f"{r['loss_at_reach']:.4g} -> {r['final_loss']:.4g}"
            for r in hit
            if r["loss_at_reach"] is not None
        ] or "never reached"
        passed &= all(
            r["rises_after"] > 0
            and r["loss_at_reach"] is not None
            and r["final_loss"] < r["loss_at_reach"]
            for r in hit
        )
    return claims_lib.claim(
        f"{label}: at {level} the loss stops falling monotonically, and still falls",
        measured,
        "every run that reaches it: a loss rise after it, a lower loss at the end",
        passed and any_reached,
        source,
    )


def _phase_claim(label: str, level: str, by_lr: dict[float, list[Row]], name: str) -> records.Claim:
    """Where a paper's phase falls against the step sharpening reaches the threshold."""
    counts, passed, seen = {}, True, False
    for lr, rs in by_lr.items():
        tally = {"after": 0, "before": 0, "no edge": 0, "no phase": 0}
        for r in rs:
            phase, reach = r[f"phase {name}"], r["reach_step"]
            where = (
                "no phase"
                if phase is None
                else "no edge"
                if reach is None
                else "after"
                if phase >= reach
                else "before"
            )
            tally[where] += 1
        counts[lr] = {k: v for k, v in tally.items() if v}
        seen |= tally["after"] + tally["before"] > 0
        passed &= tally["before"] == 0 and tally["no edge"] == 0
    return claims_lib.claim(
        f"{label}: the {name} happens at the edge (after λ_max reaches {level})",
        counts,
        "after, in every run where it happens",
        passed and seen,
        "this study (the paper's phase against Cohen et al.)",
    )


# ----------------------------------------------------------------------------- the figure


def figure(
    groups: Sequence[tuple[str, training.RunResult, Phases]],
    rows: Sequence[Row],
    path: Any,
    title: str,
) -> Any:
    """Per optimizer, λ_max / threshold against step for every run (a colour per step size),
    the full-batch loss beneath it, the paper's phases marked on each run's loss."""
    fig, axes = plotting.subplots(2, len(groups), width=3.6, height=2.4, sharex="col")
    markers = "ovs^D"
    for column, (optimizer, result, phases) in enumerate(groups):
        chosen = [r for r in rows if r["optimizer"] == optimizer]
        lrs = sorted({r["lr"] for r in chosen})
        key = "lambda_max" if optimizer == "gd" else "preconditioned_lambda_max"
        top, bottom = axes[0, column], axes[1, column]
        for r, row in enumerate(chosen):
            color = f"C{lrs.index(row['lr'])}"
            ratio = result.metrics[key][r] / row["threshold"]
            label = f"η = {row['lr']:g}" if row["seed"] == chosen[0]["seed"] else None
            top.plot(result.tracked_steps, ratio, color=color, lw=1, label=label)
            losses = result.losses[r]
            bottom.plot(np.arange(losses.size), losses, color=color, lw=0.8)
            for m, at in enumerate(phases.values()):
                if 0 <= at[r] < losses.size:
                    bottom.plot(at[r], losses[at[r]], markers[m % 5], color=color, ms=4)
        top.axhline(1.0, color="k", ls="--", lw=0.8)
        label, level = _name(optimizer)
        top.set_title(f"{title}: {label}")
        top.set_ylabel(f"λ_max / ({level})" if optimizer == "gd" else "precond. λ_max / thr.")
        top.legend(fontsize=7)
        bottom.set_yscale("log")
        bottom.set_xlabel("step")
        bottom.set_ylabel("full-batch loss")
        names = list(phases)
        if names:
            bottom.set_title(
                ", ".join(f"{markers[m % 5]}: {n}" for m, n in enumerate(names)), fontsize=8
            )
    fig.tight_layout()
    return plotting.save(fig, path)


# ----------------------------------------------------------------------------- the study


def run(
    cfg: ml_collections.ConfigDict,
    workdir: records.Workdir,
    progress: Progress,
    part: Part,
    title: str,
) -> dict[str, Any]:
    """The study: both optimizers' programs, eos_runs.csv (one row per run), the claims, the
    figure (figures/edge_of_stability.png) and summary.json."""
    groups, rows = [], []
    for i, (cell, result) in study.programs(
        [{"optimizer": optimizer} for optimizer in OPTIMIZERS],
        lambda fields: train(cfg, part, fields["optimizer"], workdir, progress),
        workdir,
        progress,
        result=lambda trained: trained[1],
    ):
        optimizer = OPTIMIZERS[i]
        phases = part.phases(cell, result)
        groups.append((optimizer, result, phases))
        rows += rows_of(cfg, optimizer, result, phases, part.lr_field)
    workdir.save_table("eos_runs", rows)
    names = list(groups[0][2])
    found = claims_lib.evaluated(
        "edge of stability", lambda: claims(rows, cfg.eos.reach_rtol, names)
    )
    path = figure(groups, rows, workdir.figure_path("edge_of_stability"), title)
    seconds = experiment.seconds_of([g[1] for g in groups])
    return workdir.finish(found, progress, figures=[str(path)], seconds=seconds)


def paper_run(
    lr_field: str, phases: Callable[..., dict[str, np.ndarray]], title: str
) -> Callable[..., dict[str, Any]]:
    """A paper's study, `run(cfg, workdir, progress, *, make_problem, traced)`: `run` on the
    `Part` of its problem, learning-rate field and phases, its figure titled `title`."""

    def run_paper(
        cfg: ml_collections.ConfigDict,
        workdir: records.Workdir,
        progress: Progress,
        *,
        make_problem: Callable[[ml_collections.ConfigDict], training.Problem],
        traced: Any,
    ) -> dict[str, Any]:
        return run(cfg, workdir, progress, Part(make_problem, lr_field, traced, phases), title)

    return run_paper
