"""The edge of stability on Fig. 3's model (docs/studies/edge_of_stability.md; the study's
skeleton is landscape/engine/edge_of_stability.py): the simplified transformer on one fixed batch
of in-context n-gram sequences, by gradient descent and Adam; the phases are the test loss
falling below each sub-n-gram estimator's line (the plateaus of Fig. 3, claims.Lines).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from landscape.engine import edge_of_stability, training
from landscape.ngrams import claims as claims_lib

LR_FIELD = "optim.lr"


def phases(cfg: ml_collections.ConfigDict, result: training.RunResult) -> dict[str, np.ndarray]:
    """Each run's first snapshot step whose test loss is below the k-gram estimator's line
    (its best smoothing, "k-gram opt"), for k = 1 .. n - 1 (-1: never)."""
    lines = claims_lib.Lines(cfg).base
    test_loss = result.snapshots["test_loss"]
    out = {}
    for k in range(1, cfg.task.order_n):
        level = lines[f"{k}-gram opt"]
        at = np.full(len(result.seeds), -1)
        for r in range(len(result.seeds)):
            below = np.flatnonzero(test_loss[r] < level)
            at[r] = int(result.snapshot_steps[below[0]]) if below.size else -1
        out[f"fall below the {k}-gram line"] = at
    return out


run = edge_of_stability.paper_run(LR_FIELD, phases, "n-grams")  # the study on this model
