# %% [markdown]
# # Your own task on the engine: in-context induction
#
# Sequences of 6 distinct tokens out of 16, then the same 6 again; a 2-layer attention-only
# transformer learns to copy the second half from the first (an induction head). We train
# 4 seeds x 2 learning rates as one program, keep the records in a workdir, draw the loss
# curves there, and compare the Hessian at initialisation with the Hessian after training.
# From the repository root, `python docs/tutorials/own_task.py` runs it (1-3 min on 2 cores;
# `LANDSCAPE_TUTORIAL_TINY=1` for a seconds-long check). The guide:
# [Your own task](../../guide/own_task/).

# %%
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import landscape
from landscape import plotting, records, sweeps, training

landscape.setup(x64=True)  # a device per core, compilation cache, float32 matmuls, float64 probes
TINY = bool(os.environ.get("LANDSCAPE_TUTORIAL_TINY"))
VOCAB, HALF, BATCH = 16, 6, 32
WIDTH, STEPS = (8, 40) if TINY else (16, 1200)
WORKDIR = os.environ.get("LANDSCAPE_TUTORIAL_WORKDIR", "runs/tutorials/own_task")


def show(fig, name):
    """Save the figure as a record of WORKDIR (figures/, in its manifest, so that a rerun with
    overwrite=True replaces it); in a notebook also draw it."""
    path = plotting.save(fig, records.Workdir(WORKDIR).figure_path(name))
    if "ipykernel" in sys.modules:
        from IPython.display import Image, display

        display(Image(filename=str(path)))


# %% [markdown]
# The task samples its own batch from a key; the model is plain Flax.


# %%
def sample(key, batch):
    """(batch, 2 * HALF) sequences: HALF distinct tokens, then the same again."""
    keys = jax.random.split(key, batch)
    first = jax.vmap(lambda k: jax.random.permutation(k, VOCAB)[:HALF])(keys)
    return jnp.concatenate([first, first], axis=1)


class Induction(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, WIDTH)(tokens) + self.param(
            "position", nn.initializers.normal(0.02), (tokens.shape[1], WIDTH)
        )
        mask = nn.make_causal_mask(tokens)
        for _ in range(2):
            x = x + nn.MultiHeadDotProductAttention(num_heads=1, use_bias=False)(x, mask=mask)
        return nn.Dense(VOCAB, use_bias=False)(x)


model = Induction()


def objective(params, tokens):
    """Cross-entropy of the second half's next tokens (the copyable ones)."""
    logits = model.apply({"params": params}, tokens)[:, HALF:-1]
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, HALF + 1 :]).mean()


# %% [markdown]
# A `Problem` is init, a loss that draws its batch, and the learning rates, here the traced
# hyperparameter "lr" (docs/guide/own_task.md: the one way to set a learning rate).

# %%
problem = training.Problem(
    init=lambda key, hp: model.init(key, sample(key, 1))["params"],
    loss=lambda params, key, hp: (objective(params, sample(key, BATCH)), {}),
    learning_rates=lambda hp: hp["lr"],
    log_grad_norm=True,
)
grid = sweeps.Grid.make({"lr": [3e-3, 1e-2]}, seeds=range(4))
result = sweeps.run(
    problem,
    {"name": "adam"},
    {"lr": 1e-2},
    grid,
    num_steps=STEPS,
    log_every=STEPS // 4,
    workdir=WORKDIR,
    overwrite=True,
    progress=None,  # no line per chunk; the records and the summary below say what happened
)
print(
    f"{grid.size} runs x {STEPS} steps: compile {result.compile_seconds:.1f} s, "
    f"run {result.run_seconds:.1f} s; final batch loss by lr:"
)
for lr, runs in zip(grid.axes["lr"], grid.unflatten(result.losses), strict=True):
    last = runs[:, -1]
    print(f"  lr {lr:g}: {last.mean():.2g} (seeds {last.min():.2g} to {last.max():.2g})")

# %% [markdown]
# The records are in WORKDIR (config.json, metrics.jsonl, arrays.npz, summary.json); the
# figure goes beside them.

# %%
fig, axes = plotting.subplots(1, 1)
ax = axes[0, 0]
curves = grid.unflatten(result.losses)  # (lr, seed, step)
for lr, runs in zip(grid.axes["lr"], curves, strict=True):
    ax.plot(runs.mean(axis=0), label=f"lr {lr:g}")
ax.set(xlabel="step", ylabel="batch loss", yscale="log")
ax.legend()
show(fig, "loss")

# %% [markdown]
# The curvature at the initialisation and after training, on a fixed evaluation batch, in
# float64. The initialisation is not a stationary point (its gradient is far from zero), so
# its curvature says nothing about a minimum or a saddle. The trained point is nearly flat
# (eigenvalues between about -1e-4 and 1e-2) with a small gradient left: Adam is still creeping
# along the valley floor. `describe()` prints the whole reading (blocks, spectrum, verdict);
# here one line per point.

# %%
evaluation = sample(jax.random.key(10_000), 32 if TINY else 128)
best = int(np.argmin(result.losses[:, -1]))
for which in ("initial", "final"):
    point = result.point(best, (objective, evaluation), which=which, dtype=jnp.float64)
    hessian = landscape.hessian_at(point, progress=None)  # no line per chunk of columns
    low, high = hessian.eigenvalues[[0, -1]]
    gradient = landscape.gradient_at(point).norm
    print(
        f"{which:7}: loss {point.loss():.3g}, |gradient| {gradient:.2g}, "
        f"eigenvalues from {low:.2g} to {high:.2g}"
    )
