"""Attention with Markov (Makkuva et al., seeds 003/004): notes/markov.md §8, §11.

    python -m experiments.markov --config=configs/markov.py                 # Fig. 3, theory model
    python -m experiments.markov --config=configs/markov.py:fig3_gpt        # Fig. 3, GPT-2 model
    python -m experiments.markov --config=configs/markov.py:landscape       # Thms 1-3, Hessians
    python -m experiments.markov --config=configs/markov.py:atlas           # the probes' atlas

CPU-sized settings (notes §11.3): d = 4, N = 128, batch 16, AdamW(0.9, 0.95) lr 1e-3, wd 1e-3 on
Linear weights, 2% warm-up from lr/100 then cosine to lr/5. The paper's N = 1024 and 8000 steps
are one override away (--config.model.seq_len=1024 --config.train.num_steps=8000).
"theory" is the no-LayerNorm ReLU model the theorems analyse; "gpt" the GPT-2 blocks the paper
trained (pre-LN + final LN, GELU). The notes' pilot found the trap depends on LayerNorm: every
experiment can run both, and summary.json says which claims each reproduces.

Variants (`--config=configs/markov.py:<variant>`), with CPU times on 2 cores:
  fig3 / fig3_gpt   tied vs untied at (p, q) = (0.5, 0.8) and (0.2, 0.3), 5 seeds (~1 min)
  fig4 / fig4_gpt   tied vs untied over p, q in {0.2, 0.4, 0.6, 0.8}, 3 seeds (~3 min)
  fig4_paper        the issue's grid: 7 x 7 = 49 cells x 5 seeds x tied/untied, 8000 steps
                    (one program per tying; ~22 min)
  fig1 / fig1_gpt   depth 1 vs 2, tied, (0.5, 0.8), 3 seeds (~1 min)
  fig5              S = 5, p in {0.3, 0.6, 0.9}, tied vs untied, d = 8 (~2 min)
  appendix_d        tied (0.2, 0.3): the rank-one structure of the learned minimum (~30 s)
  landscape         exact Hessians at theta_pi / theta_star against the closed forms (~20 s)
  atlas             the probes over a 4 x 4 (p, q) grid, tied and untied: verdicts against
                    Thms 2-3, escape directions, Gauss-Newton, paths to theta_star, SLQ; and
                    the theory model trained at (0.6, 0.8), tied and untied, 2 seeds: where it
                    ends and its Hessian density (~1 min idle, ~3 min on busy cores)

The trap at the authors' recipe and precision (notes §13): GPT-2 blocks, d = 8, tied,
(p, q) = (0.5, 0.8), batch 16, AdamW(0.9, 0.95) lr 2e-3, PyTorch's OneCycle (cosine warm-up over
2% from lr/100, cosine down to lr/5), each crossed with precision in {float32, float16 autocast
without a gradient scaler, bfloat16 autocast}, 10 seeds per cell:
  fig1_paper        depth 1, 2, 4, 8; N = 512; 500 iterations (12 programs; 27 min on 2 cores,
                    half of it the 8-layer programs; --config.sweep.model.num_layers='[1, 2]'
                    for a 6-minute part)
  fig3_paper        1 layer; N = 1024; 400 iterations (3 programs; ~9 min)
  fig3_paper_long   as fig3_paper for Table 2's 8000 iterations at its lr 1e-3 (~3 h)
  trap_gpu          fig1_paper's recipe at depth 1 and 2 with 50 seeds a cell (6 programs of
                    50 runs): trapped fractions with 95% Wilson intervals of +-0.14 at most.
                    Prepared for one GPU, the device check's optional last row (python -m
                    experiments.device_check --trap): about 3 minutes there (fig1_paper's H200
                    run, 85 s for 45 layer-programs of 10 seeds, scaled linearly to 9 of 50
                    seeds: 85 s, an upper bound now that the runs are vmapped; compile 6 x 13 s);
                    ~25 min on 2 CPU cores (fig1_paper's 1471 s x 9/45 x 5)

The trap's curvature along training (landscape/markov/curvature_study.py, notes §14;
docs/studies/markov_curvature.md): the recipe above under float16 autocast, 8 seeds, beside the
tied theory model in float32 (Thm 2), with the parameters kept and λ_min / λ_max tracked every 10
steps on the first 32 evaluation sequences; each seed probed at a point on its plateau (dense
Hessian and near-stationary verdict, escape directions against its real escape, basin radii):
  curvature         N = 128, 400 iterations (the theory model's first 2 seeds probed; ~5 min on
                    2 shared cores: 1 min training, 20-35 s per probed seed)
  curvature_paper   Fig. 1's N = 512, 500 iterations, 10 seeds each (D ~ 4800: dense Hessians of
                    ~4800 columns on 32 sequences of 512 tokens per seed; prepared for a GPU, not
                    run on the CPU)

The edge of stability on Fig. 1's model (landscape/markov/eos.py; docs/studies/
edge_of_stability.md): the GPT-2 block (d = 8, tied, 1 layer, float32) trained by full-batch
gradient descent on one fixed batch at three step sizes and by Adam, 3 seeds, λ_max (Adam: its
preconditioned sharpness) tracked every 10 steps by 16 Lanczos steps:
  eos               N = 64, 32 sequences, 400 steps
  eos_paper         N = 512, the paper's batch of 16 sequences, 500 steps (prepared, not run)
"""

import ml_collections

from landscape.markov.experiment import default_config

VARIANTS = (
    "fig3",
    "fig3_gpt",
    "fig4",
    "fig4_gpt",
    "fig4_paper",
    "fig1",
    "fig1_gpt",
    "fig5",
    "appendix_d",
    "landscape",
    "atlas",
    "fig1_paper",
    "fig3_paper",
    "fig3_paper_long",
    "trap_gpu",
    "curvature",
    "curvature_paper",
    "eos",
    "eos_paper",
)
PRECISIONS = ["float32", "float16", "bfloat16"]  # model.dtype: float16 = torch autocast
TIED_UNTIED = [{"model": {"tied": True}}, {"model": {"tied": False}}]
GPT2 = {"family": "gpt", "layer_norm": True, "activation": "gelu"}


def get_config(variant: str = "fig3") -> ml_collections.ConfigDict:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    c = default_config()
    c.name = f"markov_{variant}"
    c.claims = variant.split("_gpt")[0].replace("_paper", "")
    if variant in ("fig1_paper", "fig3_paper", "fig3_paper_long", "trap_gpu"):
        return _trap_study(c, variant)
    if variant.startswith("curvature"):
        return _curvature(c, variant)
    if variant.startswith("eos"):
        return _eos(c, variant)
    if variant.endswith("_gpt"):
        c.model.update(GPT2)
    if variant.startswith("fig3"):
        c.num_seeds = 5
        c.sweep = {"chain": {"p": [0.5, 0.2], "q": [0.8, 0.3]}}
        c.sweep_zip = True
        c.variants = TIED_UNTIED
    elif variant.startswith("fig4"):
        c.num_seeds = 3
        c.sweep = {"chain": {"p": [0.2, 0.4, 0.6, 0.8], "q": [0.2, 0.4, 0.6, 0.8]}}
        c.variants = TIED_UNTIED
        c.train.update(num_steps=1000, log_every=100)
        if variant == "fig4_paper":
            grid = [0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9]
            c.num_seeds = 5
            c.sweep = {"chain": {"p": grid, "q": grid}}
            c.train.update(num_steps=8000, log_every=500)
    elif variant.startswith("fig1"):
        c.num_seeds = 3
        c.variants = [{"model": {"num_layers": 1}}, {"model": {"num_layers": 2}}]
    elif variant == "fig5":
        c.num_seeds = 3
        c.chain.num_states = 5
        c.model.d = 8
        c.sweep = {"chain": {"p": [0.3, 0.6, 0.9]}}
        c.variants = TIED_UNTIED
        c.train.update(num_steps=2000, log_every=100)
    elif variant == "appendix_d":
        c.num_seeds = 3
        c.chain.update(p=0.2, q=0.3)
        c.train.update(num_steps=2000, log_every=100)
    elif variant == "landscape":
        c.experiment = "landscape"
    elif variant == "atlas":
        c.update(experiment="atlas", claims="atlas")
    return c


def _trap_study(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """The authors' recipe (notes §13) crossed with precision: claims = 'trap'."""
    c.claims = "trap"
    c.num_seeds = 10
    c.chain.update(p=0.5, q=0.8)
    c.model.update(GPT2, d=8, tied=True)
    c.optim.update(lr=2e-3, schedule="onecycle", initial_lr_fraction=0.01, final_lr_fraction=0.2)
    c.train.update(batch_size=16, warmup_fraction=0.02, eval_sequences=32)
    if variant in ("fig1_paper", "trap_gpu"):
        c.model.seq_len = 512
        c.train.update(num_steps=500, log_every=10)
        c.sweep = {"model": {"num_layers": [1, 2, 4, 8], "dtype": PRECISIONS}}
        if variant == "trap_gpu":
            c.num_seeds = 50
            c.sweep.model.num_layers = [1, 2]
    else:
        c.model.seq_len = 1024
        c.train.update(num_steps=400, log_every=10)
        c.sweep = {"model": {"dtype": PRECISIONS}}
        if variant == "fig3_paper_long":  # Table 2: 8000 iterations at lr 1e-3
            c.optim.lr = 1e-3
            c.train.update(num_steps=8000, log_every=100)
    return c


def _curvature(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """The trap's curvature along training (landscape/markov/curvature_study.py): the recipe of
    _trap_study under float16 autocast, beside the tied theory model (Thm 2) in float32."""
    c = _trap_study(c, "fig1_paper" if variant == "curvature_paper" else "fig3_paper")
    c.update(experiment="curvature", claims="curvature")
    c.sweep = ml_collections.ConfigDict()
    theory = {"family": "theory", "layer_norm": False, "activation": "relu", "dtype": ""}
    c.variants = [{"model": {"dtype": "float16"}}, {"model": theory}]
    c.train.update(log_every=10, params_every=10, track_every=10, track_sequences=32)
    if variant == "curvature":  # N = 128 (notes §11.3), 8 seeds; the theory model's first 2
        c.num_seeds = 8
        c.model.seq_len = 128
        c.curvature.random_directions = 6
        c.variants[1]["curvature"] = {"probed_seeds": 2}
    return c


def _eos(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """The edge of stability on Fig. 1's model (landscape/markov/eos.py): the trap's GPT-2 block
    (d = 8, tied, 1 layer, float32) on one fixed batch of the (0.5, 0.8) chain."""
    c.update(experiment="eos", claims="eos", num_seeds=3)
    c.chain.update(p=0.5, q=0.8)
    c.model.update(GPT2, d=8, tied=True, num_layers=1)
    c.train.update(batch_size=32, eval_sequences=32, track_sequences=32, num_steps=400)
    c.train.update(log_every=10, track_every=10, track_lanczos=16)
    c.eos.update(step_sizes=[0.1, 0.3, 1.0], adam_step_sizes=[0.003, 0.03])
    c.model.seq_len = 64
    if variant == "eos_paper":  # Fig. 1's N = 512 and 500 iterations; the paper's batch 16
        c.model.seq_len = 512
        c.train.update(batch_size=16, num_steps=500)
    return c
