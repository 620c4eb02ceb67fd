"""In-context n-grams (Varre et al.): sub-n-grams are near-stationary points; docs/design/ngrams.md.

The rooms of docs/architecture.md but theory.py (closed forms: task, estimators); [room]: its room.

task.py          per-sequence Dirichlet n-gram sampler, lifted chain, Lemma H.5, plateaus
estimators.py    [task] the k-gram estimators of Def. 2.1, padded, add-alpha / Bayes, losses
model.py         NgramModel: the simplified (§3.2), attention-only (§3.3) and Def. 2.2 models
points.py        theta_*^k(c) (§4.4), Eq. 30's bigram point, random init
gradients.py     [experiment] the unbiased population-gradient norms, in total and per block (C7)
stationarity.py  [experiment] Theorem 4.2's study: ||grad L(theta_*^k(c))|| against T and c
stationarity_claims.py  [claims] that study's claims (C5-C9)
schema.py        [experiment] the config schema, the traced fields, the model of a config
experiment.py    configs -> compiled runs (seeds x lr vmapped) -> records, figures, claims
footprint.py     [experiment] the bytes a run holds (memory estimate), the snapshot's chunk
claims.py        the estimator lines, the plateau analysis, the claims of a run
figures.py       test loss with the estimator lines, attention maps, heads by seed, gradient norms
trained.py       trained_point: a run's parameters at a step on the constructions' population
curvature_study.py  a plateau's kind, Gauss-Newton split, escape directions against chance
eos.py           [curvature_study] experiment = "eos": the edge of stability's phases (the lines)
"""

from landscape.engine import lazy
from landscape.ngrams import estimators, model, points, stationarity, task
from landscape.ngrams.points import bigram_point_all_heads, random_point, theta_star, unigram_point

__all__ = [
    "estimators",
    "model",
    "points",
    "stationarity",
    "task",
    "theta_star",
    "unigram_point",
    "bigram_point_all_heads",
    "random_point",
    "trained_point",
]


# trained_point loads on first use: it reads records through the experiment's modules
__getattr__ = lazy.module_getattr(__name__, {"trained_point": f"{__name__}.trained"})
