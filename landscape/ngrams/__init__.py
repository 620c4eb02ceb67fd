"""In-context n-grams (Varre et al.): sub-n-grams are near-stationary points.

task.py          the per-sequence Dirichlet n-gram sampler (uniform or stationary start, soft
                 targets), the lifted chain and its stationary law, Lemma H.5, T -> infinity
                 plateaus
estimators.py    the k-gram estimators of Def. 2.1, the padded variant, add-alpha / Bayes, losses
model.py         the simplified disentangled transformer (§3.2), the attention-only transformer
                 with one-hot or learned embeddings and its MLP variant (§3.3), Def. 2.2's model:
                 one flax.linen Module (NgramModel) with dtype / param_dtype
points.py        the constructions theta_*^k(c) (§4.4), Eq. 30's bigram point, random init, as
                 Points on a fixed Monte-Carlo population loss; unbiased gradient norms
stationarity.py  Theorem 4.2's study: ||grad L(theta_*^k(c))|| against T and c, tables, plots
experiment.py    configs -> compiled runs (seeds x lr vmapped) -> records, figures, claims
claims.py        the estimator lines, the plateau analysis, the claims of a run and of the study
figures.py       test loss with the estimator lines, attention maps, heads by seed, gradient norms
"""

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
]
