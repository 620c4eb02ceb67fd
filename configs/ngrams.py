"""In-context n-grams (Varre et al., seed 000): notes/ngrams.md §5, §7.

    python -m experiments.ngrams --config=configs/ngrams.py                 # Fig. 3 (default)
    python -m experiments.ngrams --config=configs/ngrams.py:fig4
    python -m experiments.ngrams --config=configs/ngrams.py:stationarity    # Thm 4.2, C7/C8
    python -m experiments.ngrams --config=configs/ngrams.py:curvature       # at Fig. 3's plateau

Each figure has a CPU-sized variant and, where it differs, a `_paper` one with the paper's
settings (notes §5 and the settings the notes recover by matching the figures' lines):
  fig3 / fig3_paper   simplified transformer, S=5, n=3, T=32, alpha=.5, 2 heads, Adam 1e-2,
                      2^14 steps as the paper; 4096 / 2^16 test sequences. fig3_paper trains
                      two programs: the authors' Fig. 3 model (layer-2 query/key width S = 5,
                      before their commit 767e22c) beside the corrected width (m+1) S = 15,
                      and checks the paper's absolute values (1.6355 / 1.6068, notes §5, §8)
  fig5 / fig5_paper   fig3 for seeds 1..5 as one vmapped program (order of head formation)
  fig4 / fig4_paper   attention-only transformer, S=3, n=3, T=32, alpha=1, one-hot vs learned
                      embeddings (two programs), AdamW 5e-3 wd 1e-4, 2048 / 4096 steps
  fig1 / fig1_paper   simplified, S=3, n=4, T=256, alpha=.3, 3 heads (the 4-gram staircase of the
                      authors' newer Fig. 1, `working` branch: lines 0.995 / 0.907 / 0.767 / 0.535)
  fig1_t128 / _paper  the same at T=128, alpha=.5 (the arXiv Fig. 1's lines, 1.057 / 1.014 / ...)
  fig6 / fig6_paper   simplified, S=5, n=3, T=128, alpha=.5: gradient norm along training, the
                      authors' `working` recipe (V1 = I, AdamW b1 = 0, wd 1e-4, lr 1e-2
                      constant), measured at the parameter EMA (0.999) and at the current
                      parameters (notes §8); 8192 / 16384 steps
  fig7 / fig7_paper   transformer with MLPs, S=5, n=3, T=64, alpha=1, one-hot, AdamW 1e-3 (at
                      5e-3 it never escapes, notes §8): gradient norm, a single (unigram)
                      plateau?; 8192 / 12288 steps
  stationarity        ||grad L(theta_*^k(c))|| against T and c (S=3, n=3, alpha=1), the loss at
                      theta_*^k against the k-gram estimators (notes §4.7 C7, C8)
  smoke               fig3 for 1536 steps with 2048 test sequences (the CI check of notes §7)
  curvature           Fig. 3's run (seed 0, 8192 steps) tracked (lambda every 64 steps on 128
                      test sequences) and kept every 256 steps, probed at 50% and 90% of its
                      first sub-n-gram plateau on 2048 population sequences: Hessian kind,
                      Gauss-Newton split, escape directions and their overlap with the next
                      stage and with theta_*^3 against chance (docs/studies/ngrams_curvature.md;
                      5-7 min on 2 cores)
  curvature_paper     the same for seeds 0-2 over 2^14 steps, at four kept steps per plateau,
                      on 8192 sequences (about 1.5-2 h on 2 cores)
  eos                 the edge of stability on Fig. 3's model (landscape/ngrams/eos.py;
                      docs/studies/edge_of_stability.md): full-batch gradient descent on one
                      fixed batch of 128 sequences at three step sizes, and Adam at the paper's
                      1e-2 and 1e-3, 3 seeds, 1000 steps, λ_max tracked every 20 steps
  eos_paper           the same over the paper's 2^14 steps (prepared, not run)
"""

import ml_collections

from landscape.ngrams.experiment import default_config

FIGURES = ("fig1", "fig1_t128", "fig3", "fig4", "fig5", "fig6", "fig7")
FIG3_PAPER_LEVELS = dict(paper_plateau=1.6355, paper_final=1.6068)  # authors' notebook, notes §5
VARIANTS = FIGURES + tuple(f + "_paper" for f in FIGURES) + ("stationarity", "smoke")
VARIANTS += ("curvature", "curvature_paper", "eos", "eos_paper")


def get_config(variant: str = "fig3") -> ml_collections.ConfigDict:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    c = default_config()
    c.name = f"ngrams_{variant}"
    paper = variant.endswith("_paper")
    figure = variant.removesuffix("_paper")
    if figure in ("fig3", "fig5", "smoke"):
        c.train.num_steps = 16384
        if paper:
            c.train.update(test_sequences=2**16, log_every=128)
        if variant == "fig3_paper":  # head_dim 0: the corrected (m+1) S
            c.variants = [{"model": {"head_dim": 5}}, {"model": {"head_dim": 0}}]
            c.num_seeds = 3  # escape times vary over seeds (notes §5)
            c.analysis.update(FIG3_PAPER_LEVELS)
            c.claims = "staircase,heads,paper_levels"
        if figure == "fig5":
            c.seed, c.num_seeds = 1, 5
            c.claims = "staircase,heads"
        if figure == "smoke":
            c.train.update(num_steps=1536, test_sequences=2048)
            c.claims = "heads"
    elif figure == "fig4":
        c.task.update(num_states=3, seq_len=32, alpha=1.0)
        c.model.update(kind="transformer")
        c.optim.update(name="adamw", weight_decay=1e-4)
        c.optim.lr = 5e-3
        c.train.update(num_steps=4096 if paper else 2048, log_every=32)
        if paper:
            c.train.test_sequences = 2**16
        c.variants = [{"model": {"embedding": "one_hot"}}, {"model": {"embedding": "learned"}}]
        # the whole staircase takes ~900 steps (the paper's x-range): shorter flatness windows
        c.analysis.update(flat_window=64, min_plateau=96, flat_tol=0.008)
        c.claims = "staircase,heads"
    elif figure in ("fig1", "fig1_t128"):
        c.task.update(
            num_states=3,
            order_n=4,
            seq_len=256 if figure == "fig1" else 128,
            alpha=0.3 if figure == "fig1" else 0.5,
        )
        c.model.update(num_heads=3)
        c.train.update(num_steps=8192, log_every=64, test_sequences=2048 if not paper else 2**14)
        c.claims = "staircase,heads"
    elif figure == "fig6":
        c.task.update(seq_len=128)
        c.seed, c.num_seeds = 1, 4  # escape times vary over seeds: four
        c.model.learn_value = False  # the authors' `working` recipe (notes §8)
        c.optim.update(name="adamw", b1=0.0, weight_decay=1e-4)
        c.optim.lr = 1e-2
        c.train.update(
            num_steps=16384 if paper else 8192,
            log_every=64,
            test_sequences=4096 if not paper else 2**14,
            metrics_at="both",
        )
        c.claims = "staircase,grad_norm"
    elif figure == "fig7":
        c.task.update(num_states=5, seq_len=64, alpha=1.0)
        c.model.update(kind="transformer", mlp=True)
        c.optim.update(name="adamw", weight_decay=1e-4)
        c.optim.lr = 1e-3  # 5e-3 never leaves the unigram plateau (notes §8)
        c.train.update(
            num_steps=12288 if paper else 8192,
            log_every=64,
            test_sequences=2048,
            attention_maps=False,
        )
        c.claims = "single_plateau,grad_norm"
    elif figure == "stationarity":
        c.experiment = "stationarity"
        c.claims = ""
    elif figure == "curvature":
        c.experiment, c.claims = "curvature", ""
        c.train.update(num_steps=8192, track_every=64, params_every=256)
        if paper:
            c.num_seeds = 3
            c.train.num_steps = 16384
            c.curvature.update(
                fractions=[0.25, 0.5, 0.75, 1.0],
                num_sequences=8192,
                random_directions=5000,
                lanczos_sizes=[128, 512, 2048, 8192, 32768],
            )
    elif figure == "eos":  # Fig. 3's model on one fixed batch of train.batch_size sequences
        c.experiment, c.claims, c.num_seeds = "eos", "", 3
        c.train.update(num_steps=16384 if paper else 1000, log_every=20 if not paper else 128)
        c.train.update(test_sequences=1024, track_every=c.train.log_every, track_lanczos=16)
        c.eos.update(step_sizes=[0.1, 0.3, 1.0], adam_step_sizes=[1e-3, 1e-2])
    return c
