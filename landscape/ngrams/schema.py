"""The n-gram experiments' config schema (every field with its default: Fig. 3's setting, notes
§5), the swept fields and the model a config describes; shared by experiment.py and trained.py."""

from __future__ import annotations

import ml_collections

from landscape.engine import edge_of_stability, precision, training
from landscape.engine import track as track_lib
from landscape.ngrams import model as model_lib

TRACED = ("optim.lr",)


def default_config() -> ml_collections.ConfigDict:
    """Every field an n-gram config may set; defaults are Fig. 3's setting (notes §5)."""
    c = ml_collections.ConfigDict()
    c.name = "ngrams"
    c.experiment = "train"  # train | stationarity | curvature | eos
    c.seed = 0  # runs use seeds seed, ..., seed + num_seeds - 1
    c.num_seeds = 1
    c.task = dict(num_states=5, order_n=3, seq_len=32, alpha=0.5, init="uniform")
    c.model = dict(
        kind="simplified",
        num_heads=2,
        head_dim=0,
        learn_value=True,
        embedding="one_hot",
        mlp=False,
        readout_init="",
        init_scale=1.0,
        dtype="",
    )
    #              head_dim 0: (heads + 1) S; readout_init "": the kind's default; dtype: the
    #              computation dtype ("" = train.dtype; bfloat16 / float16: autocast, precision.py)
    c.optim = training.default_optim_config()
    c.optim.update(name="adam")  # paper §5: Adam, constant lr, no weight decay
    c.optim.lr = 0.01
    c.train = dict(
        batch_size=128,
        num_steps=8192,
        log_every=64,
        test_sequences=4096,
        test_seed=2**20,
        floor=1e-8,
        dtype="float32",
        on_nonfinite="stop",
        attention_maps=True,
        track_sequences=128,  # the tracked curvature's evaluation batch: the test set's first
        **training.default_averaging(),
        **track_lib.default_tracking(),
    )
    c.lines = dict(num_sequences=16384, seed=2**21)
    c.stationarity = dict(  # stationarity.study's arguments (experiment = "stationarity")
        ks=[1, 2, 3],
        cs=[2.0, 4.0, 8.0, 16.0],
        seq_lens=[32, 64, 128, 256, 512],
        num_states=3,
        order_n=3,
        alpha=1.0,
        num_sequences=16384,
        log_c0=4.0,
        seed=0,
    )
    c.curvature = dict(  # the curvature study (curvature_study.py)
        fractions=[0.5, 0.9],  # where in the first sub-n-gram plateau: 0 its start, 1 its end
        num_sequences=2048,  # the trained points' population (points.population_set)
        population_seed=0,
        num_directions=6,  # escape directions: the most negative eigenpairs
        c=3.0,  # the next construction theta_*^(k+1)(c): notes §4.7 C8's best c at S=5, T=32
        random_directions=2000,  # the chance baseline's random directions
        random_seed=0,
        lanczos_sizes=[128, 512, 2048, 8192],  # lambda_min at the point against the population
        lanczos_iters=100,
    )
    c.analysis = dict(
        flat_window=256,
        flat_tol=0.01,
        min_plateau=384,
        line_tol=0.02,
        head_threshold=0.4,
        spike_ratio=3.0,
        paper_plateau=0.0,
        paper_final=0.0,
    )  # claims "paper_levels": a figure's values
    c.figure = dict(highlight_steps=[])  # [] picks: start, mid-plateau, end
    c.sweep = ml_collections.ConfigDict()
    c.variants = []
    c.eos = edge_of_stability.default_study()  # experiment = "eos" (eos.py)
    c.claims = "staircase,heads,grad_norm"
    return c


def model_of(cfg: ml_collections.ConfigDict) -> model_lib.NgramModel:
    m, prec = cfg.model, precision.of(cfg.train.dtype, cfg.model.dtype)
    fields = dict(
        kind=m.kind,
        num_states=cfg.task.num_states,
        seq_len=cfg.task.seq_len,
        num_heads=m.num_heads,
        init_scale=m.init_scale,
        dtype=prec.dtype,
        param_dtype=prec.param_dtype,
    )
    if m.kind == "simplified":
        fields.update(head_dim=m.head_dim or None, learn_value=m.learn_value)
    else:
        fields.update(embedding=m.embedding, mlp=m.mlp, readout_init=m.readout_init or None)
    return model_lib.NgramModel(**fields)
