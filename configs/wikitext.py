"""Scan & Snap on WikiText: Figs. 7 and 10 of Tian et al. (notes/scan_snap.md §2.5, §3.7, §5.7,
§5.10).

    python -m experiments.scan_snap --config=configs/wikitext.py              # Fig. 7
    python -m experiments.scan_snap --config=configs/wikitext.py:fig10        # Fig. 10, CPU grid
    python -m experiments.scan_snap --config=configs/wikitext.py:fig10_paper \\
        --config.text.path=/data/wikitext-2                                   # 5 epochs of train
    python -m experiments.scan_snap --config=configs/wikitext.py:curvature    # Hessian, 8-13 min

The model is the PyTorch transformer tutorial's (d = 200, one head, FFN 200, post-LN,
sinusoidal positions, untied decoder), plain SGD with the gradient's norm clipped to 0.5, batch 20,
bptt 35, a constant lr.

Data: `text.path` is a WikiText folder holding `{train,valid,test}.txt` (the PyTorch examples
repository's word_language_model/data/wikitext-2) or `wiki.{train,valid,test}.tokens` (Salesforce's
WikiText-2 or -103 archives); it defaults to ../shared/data/wikitext-2, a folder beside the
repository (not part of it) that holds the valid and test splits only: the CPU variants train on
valid (214k tokens, 306 chunks an epoch) and evaluate on test; the `_paper` variants train on
train and evaluate on valid, as the paper did, and need the full dataset at `text.path`. A missing
folder or split is one sentence saying what it holds and where to get the data.

fig7:  1 and 3 layers (one program each), lr 5 for every parameter and 10 for the FFNs (the
       authors' notebook), dropout 0.3, 1500 iterations; layer 0's attention map on the
       evaluation split's chunk 100 (column 0) at iterations 0, 500, 1000, 1500.
fig10: 1 layer, one unified lr over a grid, 5 seeds, the grid x seeds one vmapped program,
       dropout 0.2 (decoder_wiki.yaml); the mean validation attention entropy after training.
       CPU scale: 280 steps (0.9 epoch of the valid split, 13.5 min on 2 cores); paper: 5 epochs
       of train (14915 steps) with the whole validation split evaluated.
curvature: Fig. 7's 1-layer run, 1000 iterations (docs/studies/wikitext_curvature.md,
       landscape/scan_snap/curvature_study.py), with lambda_min / lambda_max tracked every 50
       steps (10 Lanczos steps) on 2 evaluation chunks (700 tokens), the parameters kept every
       100 steps, the top Ritz values every 200, and at the steps where layer 0's attention
       scans, snaps and has frozen the top 3 and bottom 3 eigenpairs (tol 1e-3, at most 4
       Lanczos runs each) with their shares per block, the evaluation chunks a dataset in
       batches (one chunk a batch). CPU: 8-13 min on 2 busy cores (a load of 6-8).
curvature_paper: the same at the paper's scale for a GPU: train on train (about 28.8k types,
       D = 1.2e7), 1500 iterations, 32 evaluation chunks, lambda every 25 steps by 20 Lanczos
       steps, the top 8 and bottom 8 eigenpairs at tol 1e-4, Ritz values every 100 steps; needs
       text.path with the train split.
"""

import ml_collections

from landscape.scan_snap.experiment import default_config

VARIANTS = ("fig7", "fig7_paper", "fig10", "fig10_paper", "curvature", "curvature_paper")
LR_GRID = [0.5, 1.0, 2.0, 5.0, 10.0]


def get_config(variant: str = "fig7") -> ml_collections.ConfigDict:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    c = default_config()
    c.name = f"wikitext_{variant}"
    c.experiment = "wikitext"
    paper = variant.endswith("_paper")
    if paper:  # the full dataset: train on train, evaluate on valid
        c.text.update(train_split="train", eval_split="valid")
    c.optim.update(name="sgd", momentum=0.0, clip_norm=0.5)
    c.train.update(batch_size=20, on_nonfinite="mark")
    if variant.startswith("curvature"):
        return _curvature(c, paper)
    if variant.startswith("fig7"):
        c.claims = "fig7"
        c.transformer.dropout = 0.3
        c.optim.update(lr_z=5.0, lr_y_over_lr_z=2.0)  # FFN linear1/linear2 at lr 10
        c.train.update(num_steps=1500, log_every=100)  # checkpoints every 100 batches
        c.text.map_steps = [0, 500, 1000, 1500]
        c.sweep = {"transformer": {"num_layers": [1, 3]}}
    else:
        c.claims = "fig10"
        c.num_seeds = 5
        c.transformer.dropout = 0.2
        c.optim.update(lr_z=1.0, lr_y_over_lr_z=1.0)  # one unified lr
        if paper:  # 5 epochs of WikiText-2's train
            c.train.update(num_steps=5 * 2983, log_every=2983)
            c.text.update(map_steps=[0, 5 * 2983], eval_chunks=0)
        else:  # 0.9 epoch of valid: 13.5 min
            c.train.update(num_steps=280, log_every=140)
            c.text.update(map_steps=[0, 280], eval_chunks=32)
        c.sweep = {"optim": {"lr_z": LR_GRID}}
    return c


def _curvature(c: ml_collections.ConfigDict, paper: bool) -> ml_collections.ConfigDict:
    """Fig. 7's 1-layer run, tracked and kept, probed at its phases (curvature_study.py)."""
    c.update(experiment="curvature", claims="curvature")
    c.transformer.update(num_layers=1, dropout=0.3)
    c.optim.update(lr_z=5.0, lr_y_over_lr_z=2.0)
    c.train.update(num_steps=1000, log_every=50, params_every=100, track_every=50)
    c.text.map_steps = [0, 500, 1000]
    c.curvature.update(top_k=3, negative_k=3, max_restarts=4, spectrum_every=200)
    if paper:
        c.train.update(num_steps=1500, log_every=25, track_every=25, track_lanczos=20)
        c.text.map_steps = [0, 500, 1000, 1500]
        c.curvature.update(
            eval_chunks=32, top_k=8, negative_k=8, tol=1e-4, max_restarts=20, spectrum_every=100
        )
    return c
