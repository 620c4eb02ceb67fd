"""The rows of metrics.jsonl as a run goes on: one per run per snapshot step, streamed a chunk
at a time through the run's `records.Workdir`."""

from __future__ import annotations

from typing import Any

import numpy as np


class MetricsRecorder:
    """Streams metrics.jsonl rows (one per run per snapshot step) while a run goes on."""

    def __init__(
        self,
        workdir: Any,
        hparams: dict[str, np.ndarray],
        seeds: np.ndarray,
        log_every: int,
        num_runs: int,
        tags: dict[str, Any],
    ) -> None:
        self.workdir, self.log_every, self.tags = workdir, log_every, tags
        self.hparams = {k: np.asarray(v)[:num_runs] for k, v in hparams.items()}
        self.seeds = seeds[:num_runs]

    def write_rows(
        self,
        first_step: int,
        loss: np.ndarray | None,
        snaps: dict[str, np.ndarray],
        tracked: tuple[dict[str, np.ndarray], int] = ({}, 0),
    ) -> None:
        """The rows of a chunk's snapshots; `tracked`: the tracked metrics (R, S) and their
        cadence, added to the rows of tracked steps."""
        scalars = {k: v for k, v in snaps.items() if np.ndim(v) == 2}  # (R, S), padded R
        values, every = tracked
        num_snaps = (
            next(iter(snaps.values())).shape[1]
            if snaps
            else (1 if loss is None else loss.shape[1] // self.log_every)
        )
        rows = []
        for s in range(num_snaps):
            step = first_step + (0 if loss is None else (s + 1) * self.log_every)
            for r, seed in enumerate(self.seeds):
                row = {"step": int(step), "run": r, "seed": int(seed), **self.tags}
                row.update({k: v[r].item() for k, v in self.hparams.items()})
                if loss is not None:  # batch loss of the last step before this snapshot
                    row["loss"] = float(loss[r, (s + 1) * self.log_every - 1])
                row.update({k: float(v[r, s]) for k, v in scalars.items()})
                if every and step % every == 0:
                    row.update({k: float(v[r, s]) for k, v in values.items()})
                rows.append(row)
        self.workdir.append_metrics(rows)

    def save_partial(self, losses: list[np.ndarray], snaps: list[dict[str, np.ndarray]]) -> None:
        """arrays.npz of a run stopped early: the steps so far, real runs only."""
        n = len(self.seeds)
        self.workdir.save_arrays(
            losses=np.concatenate(losses, axis=1)[:n],
            **{
                f"snapshot_{k}": np.concatenate([s[k] for s in snaps], axis=1)[:n] for k in snaps[0]
            },
        )
