# %% [markdown]
# # Your own task on the engine: in-context induction
#
# Sequences of 6 distinct tokens out of 16, then the same 6 again; a 2-layer attention-only
# transformer learns to copy the second half from the first (an induction head). We train
# 4 seeds x 2 learning rates as one program, keep the records in a workdir, draw the loss
# curves there, and compare the Hessian at initialisation with the Hessian after training.
# `python docs/tutorials/own_task.py` (about a minute on 2 cores; `LANDSCAPE_TUTORIAL_TINY=1`
# for a seconds-long check). The guide: docs/guide/own_task.md.

# %%
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import landscape
from landscape import plotting, sweeps, training

landscape.setup(x64=True)  # a device per core, compilation cache, float32 matmuls, float64 probes
TINY = bool(os.environ.get("LANDSCAPE_TUTORIAL_TINY"))
VOCAB, HALF, BATCH = 16, 6, 32
WIDTH, STEPS = (8, 40) if TINY else (16, 1200)
WORKDIR = os.environ.get("LANDSCAPE_TUTORIAL_WORKDIR", "runs/tutorials/own_task")


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
)

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
plotting.save(fig, f"{WORKDIR}/figures/loss.png")

# %% [markdown]
# The curvature at the initialisation and after training, on a fixed evaluation batch, in
# float64. Expect the initialisation to be "not stationary" (|g| ~ 0.1) and the trained point
# to be nearly flat (eigenvalues between about -1e-4 and 1e-2) with a small gradient left:
# Adam is still creeping along the valley floor.

# %%
evaluation = sample(jax.random.key(10_000), 32 if TINY else 128)
best = int(np.argmin(result.losses[:, -1]))
for which in ("initial", "final"):
    point = result.point(best, (objective, evaluation), which=which, dtype=jnp.float64)
    hessian = landscape.hessian_at(point)
    print(f"{point.name}: loss {point.loss():.3g}, eigenvalues", hessian.eigenvalues[[0, -1]])
    print(hessian.describe().splitlines()[-1])
