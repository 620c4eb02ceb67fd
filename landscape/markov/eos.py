"""The edge of stability on the single-layer trap's model (docs/studies/edge_of_stability.md;
the study's skeleton is landscape/engine/edge_of_stability.py): the GPT-2 block of Fig. 1 on one
fixed batch of the (p, q) chain, by gradient descent and Adam; the phase is the escape from the
unigram plateau H(π) (trap_study.run_rows's rule: the test loss below (H(π) + entropy rate) / 2).
"""

from __future__ import annotations

import ml_collections
import numpy as np

from landscape.engine import edge_of_stability, training
from landscape.markov import theory

LR_FIELD = "optim.lr"


def phases(cfg: ml_collections.ConfigDict, result: training.RunResult) -> dict[str, np.ndarray]:
    """Each run's escape step: the first snapshot whose test loss is below the midpoint of H(π)
    and the entropy rate (-1: never)."""
    test_loss = result.snapshots["test_loss"]
    out = np.full(len(result.seeds), -1)
    for r in range(len(result.seeds)):
        p, q = float(result.hparams["chain.p"][r]), float(result.hparams["chain.q"][r])
        level = (float(theory.unigram_loss(p, q)) + float(theory.entropy_rate(p, q))) / 2
        below = np.flatnonzero(test_loss[r] < level)
        out[r] = int(result.snapshot_steps[below[0]]) if below.size else -1
    return {"escape from the unigram plateau": out}


run = edge_of_stability.paper_run(LR_FIELD, phases, "Markov")  # the study on this model
