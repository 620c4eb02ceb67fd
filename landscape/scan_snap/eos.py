"""The edge of stability on the Y/Z model (docs/studies/edge_of_stability.md; the study's
skeleton is landscape/engine/edge_of_stability.py): Syn-Small's model on one fixed batch of
sequence classes, by gradient descent (one step size for Y and Z) and Adam; the phases are the
scan (the entropy of the attention on distinct tokens halfway down) and the snap (it has frozen).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from landscape.engine import edge_of_stability, training

LR_FIELD = "optim.lr_z"
FROZEN = 0.01  # the snap: the entropy stays within this fraction of its whole drop of its end


def entropy_phases(steps: np.ndarray, entropy: np.ndarray) -> dict[str, np.ndarray]:
    """Per run (entropy (R, S) at `steps`): the scan, the first step the entropy is halfway
    from its start to its end; the snap, the first step after which it stays within FROZEN of
    its whole drop of its end (Tian et al. §5: the attention freezes). -1 where it never drops."""
    scan, snap = np.full(entropy.shape[0], -1), np.full(entropy.shape[0], -1)
    for r, curve in enumerate(entropy):
        drop = curve[0] - curve[-1]
        if not np.isfinite(drop) or drop <= 0:
            continue
        scan[r] = int(steps[np.flatnonzero(curve <= curve[0] - drop / 2)[0]])
        away = np.flatnonzero(np.abs(curve - curve[-1]) > FROZEN * drop)
        snap[r] = int(steps[away[-1] + 1]) if away.size else int(steps[0])
    return {"scan": scan, "snap": snap}


def phases(cfg: ml_collections.ConfigDict, result: training.RunResult) -> dict[str, np.ndarray]:
    """The scan and the snap of each run (`entropy_phases` of its distinct-token entropy)."""
    return entropy_phases(result.snapshot_steps, result.snapshots["distinct_entropy"])


run = edge_of_stability.paper_run(LR_FIELD, phases, "Scan & Snap")  # the study on this model
