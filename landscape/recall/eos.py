"""The edge of stability on Fig. 1's model (docs/studies/edge_of_stability.md; the study's
skeleton is landscape/engine/edge_of_stability.py): the simplified recall model on its exact
population loss (full-batch gradient descent without sampling) and by Adam; the phases are the
stages, each jump the first crossing of the midpoint between two plateau levels (flow.jump_times).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from landscape.engine import edge_of_stability, training
from landscape.recall import flow, theory

LR_FIELD = "optim.lr"


def phases(cfg: ml_collections.ConfigDict, result: training.RunResult) -> dict[str, np.ndarray]:
    """Each run's jump h (h = 1 .. k): the first step its evaluation loss is below the midpoint
    of plateau levels h - 1 and h (theory.plateau_levels; -1: never)."""
    levels = theory.plateau_levels(cfg.task.k, cfg.task.num_responses)
    steps = np.broadcast_to(result.snapshot_steps, result.snapshots["eval_loss"].shape)
    times = flow.jump_times(steps, result.snapshots["eval_loss"], levels)
    return {
        f"jump {h + 1}": np.where(np.isfinite(times[:, h]), np.ceil(times[:, h]), -1).astype(int)
        for h in range(times.shape[1])
    }


run = edge_of_stability.paper_run(LR_FIELD, phases, "recall")  # the study on this model
