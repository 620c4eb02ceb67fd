"""The WikiText experiment's claims (Figs. 7, 10: sparse attention that freezes; entropy falls
with the learning rate), its per-run table and its figures."""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import ml_collections
import numpy as np

from landscape.engine import plotting, records, training
from landscape.scan_snap import model as model_lib

Group = tuple[dict[str, Any], training.RunResult]  # a structural cell's fields and its runs

FREEZE_SHARE = 0.25  # fig7: the last third's entropy range is under this share of its fall


FALL_SHARE = 0.9  # fig7: the final entropy is under this share of the initial one


_NOT_CONSTANT = "scheduled (NOT constant: the claim is about a constant lr)"


def _layers(fields: Mapping[str, Any]) -> str:
    """ "3 layers" for a depth-sweep cell, "" for a cell without one."""
    n = fields.get("transformer.num_layers")
    return "" if n is None else f"{n} layer{'s' if n > 1 else ''}"


def final_rows(groups: list[Group], unigram: float) -> list[dict[str, Any]]:
    """One row per run: its cell, lr, seed, final entropy, validation loss, whether it stayed
    finite, and whether it learnt (finite and below the unigram loss) (final_by_run.csv)."""
    rows = []
    for fields, result in groups:
        snaps = result.snapshots
        learnt = _learnt(result, unigram)
        for r in range(result.num_runs):
            rows.append(
                dict(
                    fields,
                    lr=float(result.hparams["optim.lr_z"][r]),
                    ffn_lr=float(
                        result.hparams["optim.lr_z"][r] * result.hparams["optim.lr_y_over_lr_z"][r]
                    ),
                    seed=int(result.seeds[r]),
                    entropy_layer0=float(snaps["entropy_layer0"][r, -1]),
                    entropy=float(snaps["entropy"][r, -1]),
                    val_loss=float(snaps["val_loss"][r, -1]),
                    val_perplexity=float(snaps["val_perplexity"][r, -1]),
                    first_nonfinite_step=int(result.first_nonfinite_step[r]),
                    learnt=bool(learnt[r]),
                )
            )
    return rows


def initial_loss(vocab_size: int, width: int) -> float:
    """E[loss] at initialisation: logits = LN output (norm^2 = width) . decoder column
    U(-0.1, 0.1), so each logit has variance width * 0.01 / 3 and E[logsumexp] =
    ln V + width / 600 for a large vocabulary (the target's logit has mean 0)."""
    return math.log(vocab_size) + width * 0.01 / 6


def _learnt(result: training.RunResult, unigram: float) -> np.ndarray:
    """Per run: finite throughout, and a final validation loss below the unigram model's."""
    loss = result.snapshots["val_loss"][:, -1]
    return (result.first_nonfinite_step < 0) & np.isfinite(loss) & (loss < unigram)


def _sanity(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float, every_run_learns: bool
) -> list[records.Claim]:
    """The initial loss against its closed form; with `every_run_learns` (Fig. 7: one lr per
    depth), that every run ends below the unigram loss (Fig. 10 marks the runs that do not)."""
    out = []
    for fields, result in groups:
        at = f" ({_layers(fields)})" if _layers(fields) else ""
        V = result.final_params["decoder"]["kernel"].shape[-1]
        width = result.final_params["decoder"]["kernel"].shape[-2]
        start = float(np.mean(result.snapshots["val_loss"][:, 0]))
        expected = initial_loss(V, width)
        out.append(
            records.sanity(
                f"validation loss at step 0 = ln V + width/600 = {expected:.3f}{at} (decoder "
                "U(-0.1, 0.1) on a LayerNorm output)",
                start,
                f"within 0.2 of {expected:.3f}",
                abs(start - expected) < 0.2,
                "notes §3.7",
            )
        )
        if not every_run_learns:
            continue
        learnt = _learnt(result, unigram)
        out.append(
            records.sanity(
                f"every run learns{at}: finite, final validation loss below the unigram model's "
                f"{unigram:.3f} (a sparse model, not a broken one)",
                np.round(result.snapshots["val_loss"][:, -1], 3).tolist(),
                f"< {unigram:.3f}",
                bool(learnt.all()),
            )
        )
    return out


def claims_fig7(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float
) -> list[records.Claim]:
    """Fig. 7 (notes §5.7): per depth, layer 0's mean attention entropy falls from step 0 and
    freezes over the last third of training while the lr stays constant."""
    out = _sanity(cfg, groups, unigram, every_run_learns=True)
    constant = cfg.optim.schedule == "constant"
    for fields, result in groups:
        at = _layers(fields) or _layers({"transformer.num_layers": cfg.transformer.num_layers})
        steps = result.snapshot_steps
        entropy = result.snapshots["entropy_layer0"]  # (R, S)
        start, end = entropy[:, 0], entropy[:, -1]
        out.append(
            records.claim(
                f"Fig. 7, {at}: layer 0's mean attention entropy falls over training (final below "
                f"{FALL_SHARE:g} x its value at step 0)",
                {"step 0": np.round(start, 3).tolist(), "final": np.round(end, 3).tolist()},
                f"final < {FALL_SHARE:g} x step 0 in every run",
                bool(np.all(end < FALL_SHARE * start)),
                "Fig. 7, notes §5.7",
            )
        )
        last_third = steps >= steps[-1] * 2 / 3
        drift = np.ptp(entropy[:, last_third], axis=1)
        fall = start - end
        fell = end < FALL_SHARE * start
        out.append(
            records.claim(
                f"Fig. 7, {at}: the entropy freezes while the lr is "
                f"{'constant' if constant else _NOT_CONSTANT}"
                f": its range over the last third of training (steps >= {int(steps[-1] * 2 / 3)}) "
                f"is under {FREEZE_SHARE:g} x its fall",
                {"range": np.round(drift, 4).tolist(), "fall": np.round(fall, 3).tolist()},
                f"range < {FREEZE_SHARE:g} x fall, after a fall (final < {FALL_SHARE:g} x step 0), "
                "in every run",
                bool(constant and np.all(fell & (drift < FREEZE_SHARE * fall))),
                "Fig. 7, notes §5.7",
            )
        )
    return out


def entropy_by_lr(result: training.RunResult, unigram: float) -> list[dict[str, Any]]:
    """Per lr (ascending): the final layer-0 entropy's mean and std (ddof 1) over the runs that
    learnt (`_learnt`), and how many runs did not."""
    lrs = result.hparams["optim.lr_z"]
    learnt = _learnt(result, unigram)
    entropy = result.snapshots["entropy_layer0"][:, -1]
    rows = []
    for lr in np.unique(lrs):
        runs = np.isclose(lrs, lr)
        good = entropy[runs & learnt]
        rows.append(
            dict(
                lr=float(lr),
                runs=int(runs.sum()),
                learnt=int(good.size),
                mean=float(good.mean()) if good.size else math.nan,
                std=float(good.std(ddof=1)) if good.size > 1 else math.nan,
                val_loss=float(
                    np.nanmean(np.where(runs & learnt, result.snapshots["val_loss"][:, -1], np.nan))
                )
                if good.size
                else math.nan,
            )
        )
    return rows


def claims_fig10(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float
) -> list[records.Claim]:
    """Fig. 10 (notes §5.10): the final mean attention entropy falls as the (unified) lr rises,
    over the lrs whose runs all learnt; the lrs with failed runs are reported, not dropped."""
    out = _sanity(cfg, groups, unigram, every_run_learns=False)
    for fields, result in groups:
        at = f" ({_layers(fields)})" if _layers(fields) else ""
        rows = entropy_by_lr(result, unigram)
        stable = [r for r in rows if r["learnt"] == r["runs"]]
        failed = {
            r["lr"]: f"{r['runs'] - r['learnt']}/{r['runs']} failed"
            for r in rows
            if r["learnt"] < r["runs"]
        }
        means = [r["mean"] for r in stable]
        measured: dict[str, Any] = {
            f"lr {r['lr']:g}": f"{r['mean']:.3f} +- {r['std']:.3f}" for r in stable
        }
        if failed:
            measured["not learnt (excluded)"] = {f"lr {k:g}": v for k, v in failed.items()}
        out.append(
            records.claim(
                f"Fig. 10{at}: the final mean attention entropy falls as the lr rises (over the "
                f"lrs whose runs all learnt: {[r['lr'] for r in stable]})",
                measured,
                "decreasing in lr, at least 3 stable lrs",
                len(means) >= 3 and bool(np.all(np.diff(means) < 0)),
                "Fig. 10, notes §5.10",
            )
        )
    return out


def _no_claims(
    cfg: ml_collections.ConfigDict, groups: list[Group], unigram: float
) -> list[records.Claim]:
    return []


def plot_attention_maps(
    cfg: ml_collections.ConfigDict, groups: list[Group], path: pathlib.Path
) -> pathlib.Path:
    """Fig. 7: layer 0's attention on the fixed evaluation chunk (rows: depth; columns: the
    map steps), first run of each cell; one colour scale."""
    steps_wanted = list(cfg.text.map_steps)
    fig, axes = plotting.subplots(len(groups), len(steps_wanted), width=2.6, height=2.5)
    image = None
    for row, (_, result) in enumerate(groups):
        steps = list(result.snapshot_steps)
        layers = result.snapshots["attention_maps"].shape[2]
        for col, step in enumerate(steps_wanted):
            ax = axes[row, col]
            a = result.snapshots["attention_maps"][0, steps.index(step), 0]
            image = ax.imshow(a, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            h = float(model_lib.attention_entropy(a[None]))
            ax.set_title(
                f"{layers} layer{'s' if layers > 1 else ''}, iter {step}\nentropy {h:.2f}",
                fontsize=8,
            )
            ax.set_xticks([]), ax.set_yticks([])
        axes[row, 0].set_ylabel("query position")
        assert image is not None  # subplots needs a column: map_steps is not empty
        fig.colorbar(image, ax=axes[row, -1], fraction=0.046, pad=0.04)
    for ax in axes[-1]:
        ax.set_xlabel("key position")
    return plotting.save(fig, path)


def plot_entropy_curves(groups: list[Group], unigram: float, path: pathlib.Path) -> pathlib.Path:
    """Layer 0's mean attention entropy and the validation loss against the step, per cell and
    lr (mean over seeds with a min-max band); the unigram loss dashed."""
    fig, axes = plotting.subplots(1, 2, width=4.4, height=3.2)
    for fields, result in groups:
        steps = result.snapshot_steps
        lrs = result.hparams["optim.lr_z"]
        for lr in np.unique(lrs):
            runs = np.isclose(lrs, lr)
            label = (f"{_layers(fields)}, " if _layers(fields) else "") + f"lr {lr:g}"
            plotting.mean_and_band(
                axes[0, 0], steps, result.snapshots["entropy_layer0"][runs], label=label
            )
            plotting.mean_and_band(
                axes[0, 1], steps, result.snapshots["val_loss"][runs], label=label
            )
    axes[0, 1].axhline(unigram, color="gray", linestyle="--", linewidth=1, label="unigram")
    axes[0, 0].set(xlabel="iteration", ylabel="layer-0 attention entropy (nats)")
    axes[0, 1].set(xlabel="iteration", ylabel="validation loss (nats)")
    axes[0, 0].legend(fontsize=7)
    axes[0, 1].legend(fontsize=7)
    return plotting.save(fig, path)


def plot_entropy_vs_lr(groups: list[Group], unigram: float, path: pathlib.Path) -> pathlib.Path:
    """Fig. 10: the final mean attention entropy (mean +- std over the runs that learnt) against
    the lr, every run a faint dot; runs that did not learn (non-finite, or a validation loss
    above the unigram model's) a red x, so no lr is dropped silently. Right: validation loss."""
    fig, axes = plotting.subplots(1, 2, width=4.2, height=3.2)
    grid_lrs: set[float] = set()
    for fields, result in groups:
        rows = entropy_by_lr(result, unigram)
        label = _layers(fields) or "runs that learnt"
        learnt = _learnt(result, unigram)
        lrs = result.hparams["optim.lr_z"]
        grid_lrs.update(float(v) for v in lrs)
        finals = {
            "entropy_layer0": result.snapshots["entropy_layer0"][:, -1],
            "val_loss": result.snapshots["val_loss"][:, -1],
        }
        for ax, key in zip(axes[0], finals, strict=True):
            ax.plot(lrs[learnt], finals[key][learnt], ".", color="gray", alpha=0.5)
            failed = ~learnt & np.isfinite(finals[key])
            if failed.any():
                ax.plot(
                    lrs[failed],
                    finals[key][failed],
                    "x",
                    color="red",
                    label=f"did not learn ({int((~learnt).sum())} runs)",
                )
        stable = [r for r in rows if r["learnt"]]
        axes[0, 0].errorbar(
            [r["lr"] for r in stable],
            [r["mean"] for r in stable],
            yerr=[0 if math.isnan(r["std"]) else r["std"] for r in stable],
            marker="o",
            capsize=3,
            label=label + " (mean +- std)",
        )
        axes[0, 1].plot(
            [r["lr"] for r in stable],
            [r["val_loss"] for r in stable],
            marker="o",
            label=label + " (mean)",
        )
    axes[0, 1].axhline(unigram, color="gray", linestyle="--", linewidth=1, label="unigram")
    ticks = sorted(grid_lrs)
    for ax in axes[0]:
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("learning rate $\\eta$")
        ax.legend(fontsize=7)
    axes[0, 0].set(
        ylabel="final attention entropy, layer 0 (nats)",
        title="Fig. 10: entropy against the learning rate",
    )
    axes[0, 1].set(ylabel="final validation loss (nats)")
    return plotting.save(fig, path)


CLAIMS: dict[
    str,
    Callable[[ml_collections.ConfigDict, list[Group], float], list[records.Claim]],
] = {
    "fig7": claims_fig7,
    "fig10": claims_fig10,
    "none": _no_claims,
}
