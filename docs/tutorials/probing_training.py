# %% [markdown]
# # Probing a training run
#
# Where does training stall, is the point where it stalls a saddle, and does the saddle's negative
# curvature point to where training goes next? This tutorial asks that of a real run: the
# simplified transformer of *Sub-n-grams are near-stationary points* (the model of its Fig. 3)
# on in-context trigrams, made small (S = 3 states, T = 16 tokens, D = 692 parameters) so that
# every Hessian below is exact and takes seconds. We train it keeping its parameters every 256
# steps and tracking λ_min and λ_max inside the compiled run, plot them, read the run back from
# its records, take the trained point on its plateau, ask for its near-stationary verdict, put the
# probes' `summary()` rows in a pandas table, and compare the plateau's escape directions with
# the parameters training actually reached later.
#
# From the repository root, `python docs/tutorials/probing_training.py` runs it (1-3 min on 2
# cores; `LANDSCAPE_TUTORIAL_TINY=1` for a few hundred steps). Records go to
# `runs/tutorials/probing_training/` (or `$LANDSCAPE_TUTORIAL_WORKDIR`).

# %%
import os
import pathlib
import sys

import jax
import numpy as np
import pandas as pd
from jax.flatten_util import ravel_pytree

import landscape
from landscape import plotting, records, sweeps
from landscape.ngrams import claims, curvature_study, experiment

landscape.setup(x64=True)  # a CPU device per core; float64 for the probes (training stays float32)
TINY = bool(os.environ.get("LANDSCAPE_TUTORIAL_TINY"))
WORKDIR = pathlib.Path(
    os.environ.get("LANDSCAPE_TUTORIAL_WORKDIR", "runs/tutorials/probing_training")
)
NUM_STEPS = 512 if TINY else 3072
POPULATION = 256 if TINY else 1024  # sequences of the trained points' Monte-Carlo population


def show(fig, name):
    """Save the figure as a record of WORKDIR (figures/, in its manifest, so that a rerun with
    overwrite=True replaces it); in a notebook also draw it inline."""
    path = plotting.save(fig, records.Workdir(WORKDIR).figure_path(name))
    if "ipykernel" in sys.modules:
        from IPython.display import Image, display

        display(Image(filename=str(path)))


# %% [markdown]
# ## A run that keeps its parameters and tracks its curvature
#
# The n-gram package's config (`experiment.default_config()`, Fig. 3's setting) with a smaller
# task, and its training problem (`experiment.make_problem`: the model, the minibatch loss that
# samples fresh sequences every step, the test-loss snapshots). Two options of `sweeps.run` make
# the run probe-able:
#
# - `params_every=256` keeps the parameters at steps 0, 256, 512, ... inside the compiled run;
# - `track=landscape.Track(...)` measures the extreme Hessian eigenvalues every 32 steps by 10
#   Lanczos steps on a fixed loss, here the first 128 test sequences
#   (`experiment.tracking_loss`), vmapped over runs, with no host round trip.
#
# `config=cfg` writes the config beside the arrays, so the run can be read back as a finished
# run of this package.

# %%
cfg = experiment.default_config()
cfg.task.update(num_states=3, seq_len=16)
cfg.train.update(num_steps=NUM_STEPS, log_every=32, test_sequences=1024, track_every=32)
cfg.train.params_every = 128 if TINY else 256
experiment.validate(cfg)

track = landscape.Track(loss=experiment.tracking_loss(cfg), every=32, num_lanczos=10)
result = sweeps.run(
    experiment.make_problem(cfg),
    cfg.optim,
    {"optim.lr": cfg.optim.lr},
    sweeps.Grid.make({}, seeds=[0]),
    num_steps=cfg.train.num_steps,
    log_every=cfg.train.log_every,
    params_every=cfg.train.params_every,
    track=track,
    workdir=WORKDIR,
    config=cfg,
    overwrite=True,
    progress=None,
)
print(f"tracked steps {result.tracked_steps[:4]} ... {result.tracked_steps[-1]}")
print(f"kept parameters at steps {result.params_steps.tolist()}")

# %% [markdown]
# ## λ_min and λ_max along training
#
# The test loss drops quickly, stalls on a plateau (the bigram stage: one head attends to the
# previous token), then drops again when a second head learns to attend two tokens back. The
# plateaus are found on the test-loss curve by the package's detector (`claims.plateaus`: the
# loss moves less than 0.01 over a window). The tracked λ_min is negative all along; λ_max
# shrinks on the plateau and jumps when the loss drops.

# %%
steps, loss = result.snapshot_steps, result.snapshots["test_loss"][0]
found = claims.plateaus(steps, loss, window=256, tol=0.01, min_length=384 if not TINY else 64)
print("plateaus:", [(p["start"], p["end"], round(p["level"], 4)) for p in found])

fig, axes = plotting.subplots(1, 2, width=4.2, height=3.0)
axes[0, 0].plot(steps, loss)
axes[0, 0].set(xlabel="step", ylabel="test loss (nats)", title="test loss")
for name, color in (("lambda_max", "tab:red"), ("lambda_min", "tab:blue")):
    axes[0, 1].plot(result.tracked_steps, result.metrics[name][0], color=color, label=name)
axes[0, 1].axhline(0, color="k", lw=0.6)
axes[0, 1].set(xlabel="step", title="extreme Hessian eigenvalues (128 test sequences)")
axes[0, 1].legend(fontsize=7)
for ax in axes[0]:
    for p in found:
        ax.axvspan(p["start"], p["end"], color="tab:blue", alpha=0.15, lw=0)
show(fig, "tracked")

# %% [markdown]
# ## The run read back from its records
#
# Everything above is in the workdir: `arrays.npz` holds the kept parameters (`params/A1`, ...,
# with `params_steps`) and the tracked metrics (`metric_lambda_min`, ..., with
# `tracked_steps`). `landscape.records.load` returns the same `RunResult` from them, in this
# process or in a later one.

# %%
result = landscape.records.load(WORKDIR)
print(sorted(result.metrics)[:6], result.params_steps.tolist())
print("A1 at step 256:", result.params_at(256, run=0)["A1"].shape)

# %% [markdown]
# ## Trained points and their verdicts, as a table
#
# `landscape.ngrams.trained_point` turns a kept step into a `Point` on the population the
# paper's constructions are judged on (a fixed Monte-Carlo set of sequences, here 1024), named
# after its run and step, in float64. A list of points of one model is one vmapped Hessian call,
# and each Hessian's `summary()` is a row of a table.
#
# No trained point is a critical point: its gradient is never zero. `kind()` applies the
# near-stationary rule ([notes](../../notes/landscape_geometry/) §9): it takes the Newton step
# to the critical point of the quadratic model and trusts it only if the loss there agrees with
# the model and the step removes most of the gradient; then the verdict is that critical
# point's kind, else "not stationary". `stationary` says which ("exact", "near" or "no").

# %%
kept = [int(s) for s in result.params_steps]
trained = [
    landscape.ngrams.trained_point(WORKDIR, run=0, step=s, num_sequences=POPULATION) for s in kept
]
hessians = landscape.hessian_at(trained)  # one compiled, vmapped call
table = pd.DataFrame([h.summary() for h in hessians])
columns = ["point", "kind", "stationary", "loss", "grad_norm", "lambda_min", "lambda_max"]
print(table[columns + ["num_negative"]].to_string(index=False))

# %% [markdown]
# ## The plateau point
#
# The kept step nearest the middle of the first plateau (not the last one: we compare it with
# the parameters after it). Its Hessian has negative eigenvalues, but the near-stationary check
# says whether a critical point of that kind is nearby; `describe()` of the check gives the
# numbers that decided.

# %%
plateau = found[0] if found else dict(start=kept[1], end=kept[-2])
middle = (plateau["start"] + plateau["end"]) / 2
i = int(np.argmin([abs(s - middle) for s in kept[:-1]]))
H = hessians[i]
print(H.point.name)
print("kind:", H.kind().value)
print("verdict:", H.verdict())
print(H.near_stationary().describe())

# %% [markdown]
# ## Escape directions and where training went
#
# On this plateau the check fails: the model's loss change is right (within 2%), but half of the
# gradient lies along directions whose curvature is smaller than the change of curvature over
# the step, where the quadratic model says nothing, and no Newton step removes it. The run is
# drifting, not sitting near a critical point; yet the loss is locally non-convex all along,
# with over a hundred negative eigenvalues at every kept step.
#
# `escape_directions` returns the eigenvectors of the most negative eigenvalues, each checked at
# second order by symmetric differences, L(θ + εv) + L(θ - εv) - 2L(θ) against ε²λ, which holds
# off a critical point too. Do they point where training went? We compare them with the change
# of the parameters from the plateau point to the last kept step, after the drop: the largest
# |cos| with one direction, and the norm of the projection onto their span
# (`curvature_study.overlap`). Chance is what a random direction gets: about sqrt(k/D) for a
# span of k directions in D dimensions, measured here with 2000 random directions in the
# coordinates training moves (the strictly upper-triangular entries of A1 are masked by the
# causal attention and never move).

# %%
escape = landscape.escape_directions(trained[i])
print(escape.describe())

flat = {s: ravel_pytree(result.params_at(s, run=0))[0] for s in (0, kept[i], kept[-1])}
moved = np.asarray(flat[kept[-1]] - flat[kept[i]], np.float64)
live = np.asarray((flat[kept[-1]] != flat[0]) | (flat[kept[i]] != flat[0]))
found_overlap = curvature_study.overlap(moved, escape.flat_vectors)
chance = curvature_study.random_overlaps(escape.flat_vectors, jax.random.key(0), 2000, live)
k, dim = escape.num_negative(), int(live.sum())
print(f"next stage against {k} escape directions in D_live = {dim}:")
print(
    f"  projection {found_overlap['span']:.4f}; chance {chance['span_mean']:.4f} "
    f"± {chance['span_std']:.4f} (sqrt(k/D) = {np.sqrt(k / dim):.4f})"
)
print(
    f"  max |cos| {found_overlap['max_cos']:.4f}; chance {chance['max_cos_mean']:.4f} "
    f"± {chance['max_cos_std']:.4f}"
)

# %% [markdown]
# The parameters moved *less* along the escape directions than a random direction would:
# their projection is about a third of the chance level. Where do the two live? The share of
# each direction's squared norm in each parameter block:
# the escape directions sit in layer 2's query and key (Q2, K2), the bilinear part of the
# model, while training moved the first layer's attention logits (A1).

# %%
unravel = ravel_pytree(trained[i].params)[1]
shares = {
    "escape directions": curvature_study.block_shares(escape.flat_vectors, unravel, 2),
    "next stage": curvature_study.block_shares(moved[None, :], unravel, 2),
}
print(pd.DataFrame(shares).T.round(3).to_string())

# %% [markdown]
# ## Next
#
# The curvature study runs all of this on Fig. 3's own setting (S = 5, T = 32, D = 2548), adds
# the Gauss-Newton split, the whole negative eigenspace, the direction to the next construction
# θ*³ and λ_min against the population's size, and writes tables, a figure and claims (4-7 min
# on 2 cores):
#
# ```bash
# python -m experiments.ngrams --config=configs/ngrams.py:curvature
# ```
#
# Its results: [Curvature at the n-gram plateau](../../studies/ngrams_curvature/). The options:
# [Probing training runs](../../guide/tracking/).
