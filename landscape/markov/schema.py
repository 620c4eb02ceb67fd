"""The Markov experiments' config schema (every field with its default: the notes' CPU-sized
Fig. 3 setting, notes/markov.md §11.3), the swept fields and the experiment and claim names;
shared by experiment.py and its validation."""

from __future__ import annotations

import ml_collections

from landscape.engine import edge_of_stability, training
from landscape.engine import track as track_lib
from landscape.markov import curvature_study

TRACED = ("chain.p", "chain.q", "optim.lr")


CLAIM_SETS = ("fig1", "fig3", "fig4", "fig5", "appendix_d", "trap", "landscape", "atlas", "none")


ANALYSES = ("landscape", "atlas")  # experiments that train nothing: one fixed set of points


def default_config() -> ml_collections.ConfigDict:
    """Every field a Markov config may set; defaults are the notes' CPU-sized Fig. 3 setting."""
    c = ml_collections.ConfigDict()
    c.name = "markov"
    c.experiment = "train"  # train | landscape | atlas | curvature | eos (eos.py)
    c.seed = 0
    c.num_seeds = 1
    c.chain = dict(num_states=2, p=0.5, q=0.8, initial="stationary")  # q unused when S > 2
    c.model = dict(
        family="theory",
        d=4,
        seq_len=128,
        num_layers=1,
        num_heads=1,
        mlp_width=0,
        tied=True,
        activation="relu",
        layer_norm=False,  # mlp_width 0 = 4d
        dtype="",
    )  # computation dtype: "" = train.dtype; float16 / bfloat16 autocast
    c.optim = training.default_optim_config()
    # Table 2 / the authors' OneCycle: AdamW(0.9, 0.95), wd 1e-3 on Linear weights only, 2%
    # linear warm-up from lr/100, cosine to lr/5 (notes §3.3)
    c.optim.update(
        name="adamw",
        b1=0.9,
        b2=0.95,
        weight_decay=1e-3,
        schedule="warmup_cosine",
        initial_lr_fraction=0.01,
        final_lr_fraction=0.2,
    )
    c.optim.lr = 1e-3
    c.train = dict(
        batch_size=16,
        num_steps=1000,
        log_every=50,
        warmup_fraction=0.02,
        targets="hard",  # hard: sampled next tokens (as trained); soft: P[x_n]
        eval_sequences=64,
        dtype="float32",
        on_nonfinite="stop",
        track_sequences=64,  # the tracked curvature's batch: the evaluation batch's first
        **training.default_averaging(),
        **track_lib.default_tracking(),
    )
    c.sweep = ml_collections.ConfigDict()
    c.sweep_zip = False  # pair the traced axes instead of their product
    c.variants = []
    c.landscape = dict(
        points=[[0.5, 0.8], [0.2, 0.3], [0.9, 0.9], [0.3, 0.6]],
        d=4,
        seq_len=8,
        multistate_p=[0.5, 0.85],
        multistate_states=5,
        multistate_seq_len=4,
    )
    c.atlas = dict(
        p=[0.2, 0.4, 0.6, 0.8],
        q=[0.2, 0.4, 0.6, 0.8],
        d=4,
        seq_len=6,
        path_ts=41,
        num_probes=16,
        num_iters=40,
        # the trained points (notes §11.4): the theory model trained tied and untied at one
        # cell, at d and seq_len above; 0 steps trains nothing
        train_cell=[0.6, 0.8],
        train_seeds=2,
        train_steps=1000,
    )
    c.curvature = curvature_study.default_study()
    c.eos = edge_of_stability.default_study()  # experiment = "eos"
    c.claims = "none"
    return c
