"""In-context n-grams (Varre et al.): sub-n-grams are near-stationary points.

Built so far (issue 4 is in progress):
task.py        the per-sequence Dirichlet n-gram sampler (uniform or stationary start, soft
               targets), the lifted chain and its stationary law, Lemma H.5, T -> infinity plateaus
estimators.py  the k-gram estimators of Def. 2.1, the padded variant, add-alpha / Bayes, losses
"""

from landscape.ngrams import estimators, task

__all__ = ["estimators", "task"]
