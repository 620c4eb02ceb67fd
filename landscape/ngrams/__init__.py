"""In-context n-grams (Varre et al.): sub-n-grams are near-stationary points.

task.py          the per-sequence Dirichlet n-gram sampler (uniform or stationary start, soft
                 targets), the lifted chain and its stationary law, Lemma H.5, T -> infinity plateaus
estimators.py    the k-gram estimators of Def. 2.1, the padded variant, add-alpha / Bayes, losses
model.py         the simplified disentangled transformer (§3.2), the attention-only transformer
                 with one-hot or learned embeddings and its MLP variant (§3.3), Def. 2.2's model
experiment.py    configs -> compiled runs (seeds x lr vmapped) -> records, figures, claims
"""

from landscape.ngrams import estimators, model, task

__all__ = ["estimators", "model", "task"]
