# %% [markdown]
# # Probing the Markov landscape
#
# The single-layer transformer of *Attention with Markov* on a binary Markov chain with switching
# probabilities p (0 to 1) and q (1 to 0). Theorem 2 says that with tied embeddings and
# p + q > 1 the unigram point θ_π, which ignores its input and predicts the stationary
# distribution π, is a local minimum: a trap. Theorem 3 says that without tying it is a saddle.
# Here we look at both with the probes: exact Hessians and their closed forms
# ([notes](../../notes/markov/) §6.2-6.5), a spectrum across (p, q) in one call, certified
# eigenpairs, escape directions, the Gauss-Newton split, a path, a slice and a spectral density.
#
# From the repository root, `python docs/tutorials/probing_markov.py` runs it (1-4 min on 2
# cores, nearly all of it compiling; `LANDSCAPE_TUTORIAL_TINY=1` for smaller grids). Figures go
# to `runs/tutorials/markov/` (or `$LANDSCAPE_TUTORIAL_WORKDIR`).

# %%
import os
import pathlib
import sys

import jax
import numpy as np

import landscape
from landscape import plotting
from landscape.probes import figures as probe_figures

jax.config.update("jax_enable_x64", True)  # probes in float64 (before any point is built)
TINY = bool(os.environ.get("LANDSCAPE_TUTORIAL_TINY"))
FIGURES = pathlib.Path(os.environ.get("LANDSCAPE_TUTORIAL_WORKDIR", "runs/tutorials/markov"))
SEQ_LEN = 6  # the population is all 2^N sequences: 64 here, 1024 at the default N = 10


def show(fig, name):
    """Save the figure under FIGURES; in a notebook also draw it inline."""
    path = plotting.save(fig, FIGURES / f"{name}.png")
    if "ipykernel" in sys.modules:
        from IPython.display import Image, display

        display(Image(filename=str(path)))


# %% [markdown]
# ## θ_π and θ*
#
# `theta_pi` and `theta_star` return `Point`s: parameters plus the exact population loss
# (a soft-target cross-entropy over all 2^N binary sequences). The default N = 10 (1024
# sequences) is exact too, just slower; we use N = 6 throughout, which changes none of the
# closed forms below (they do not depend on N). At (p, q) = (0.5, 0.8), θ_π's loss is the
# entropy H(π) of the stationary distribution and θ*'s the chain's entropy rate.

# %%
P, Q = 0.5, 0.8
theta_pi = landscape.markov.theta_pi(p=P, q=Q, seq_len=SEQ_LEN)
theta_star = landscape.markov.theta_star(p=P, q=Q, seq_len=SEQ_LEN)
for point in (theta_pi, theta_star):
    print(f"{point.name}: loss {point.loss():.6f} (theory {point.meta['expected_loss']:.6f})")

# %% [markdown]
# ## The exact Hessian at θ_π
#
# `hessian_at` forms the dense D x D Hessian (D = 221 here) with the parameter names kept, and
# `describe()` reads it out: each block's eigenvalues, the couplings between blocks, the
# "focus" block the theorem is about, the spectrum and a verdict next to the theorem's
# prediction.

# %%
H = landscape.hessian_at(theta_pi)
print(H.describe())

# %% [markdown]
# ## The α block against its closed form
#
# With every arbitrary block at zero (the canonical θ_π, positions p_n = 0), the curvature
# lives in α = (b, e) alone ([notes](../../notes/markov/) §6.5):
#
# - tied: π₀π₁ once (the bias b) and 2 π₀π₁ (p + q - 1), d times (the embedding e);
# - untied, α = (b, a, e): π₀π₁ once and ± π₀π₁ |p + q - 1|, d times each;
#
# and zero for every other parameter. With π₀ = q / (p + q) and π₁ = p / (p + q):

# %%
d = theta_pi.params["e"].size
pi0, pi1 = Q / (P + Q), P / (P + Q)
tied_closed_form = np.sort([pi0 * pi1] + [2 * pi0 * pi1 * (P + Q - 1)] * d)
tied_alpha = np.linalg.eigvalsh(H.block(["b", "e"]))
print("tied   α eigenvalues", tied_alpha)
print("       closed form  ", tied_closed_form)

theta_pi_untied = landscape.markov.theta_pi(p=P, q=Q, seq_len=SEQ_LEN, tied=False)
H_untied = landscape.hessian_at(theta_pi_untied)
untied_closed_form = np.sort(
    [pi0 * pi1] + [pi0 * pi1 * abs(P + Q - 1)] * d + [-pi0 * pi1 * abs(P + Q - 1)] * d
)
untied_alpha = np.linalg.eigvalsh(H_untied.block(["b", "a", "e"]))
print("untied α eigenvalues", untied_alpha)
print("       closed form  ", untied_closed_form)
print("largest |H| entry outside α:", H.focus_report().outside)
print("kinds:", H.kind().value, "(tied);", H_untied.kind().value, "(untied)")
np.testing.assert_allclose(tied_alpha, tied_closed_form, rtol=1e-10)
np.testing.assert_allclose(untied_alpha, untied_closed_form, rtol=1e-10)

# %% [markdown]
# ## The spectrum across (p, q), in one call
#
# Points of one model share one compiled program, and a list of points is one vmapped call.
# Below, the smallest eigenvalue of the tied α block on a grid of chains: it is
# min(π₀π₁, 2π₀π₁(p + q - 1)), zero on the line p + q = 1, where the trap of Theorem 2
# (p + q > 1) turns into a saddle (p + q < 1).

# %%
grid = [0.2, 0.5, 0.8] if TINY else [0.2, 0.35, 0.5, 0.65, 0.8]
chains = [(p, q) for p in grid for q in grid]
points = [landscape.markov.theta_pi(p=p, q=q, seq_len=SEQ_LEN) for p, q in chains]
hessians = landscape.hessian_at(points)  # one compiled, vmapped call for every point
smallest = np.array([np.linalg.eigvalsh(h.block(["b", "e"]))[0] for h in hessians])
predicted = np.array(
    [min(p * q / (p + q) ** 2 * np.array([1, 2 * (p + q - 1)])) for p, q in chains]
)
np.testing.assert_allclose(smallest, predicted, atol=1e-12)
print("     " + "".join(f"   q={q:<5}" for q in grid))
for i, p in enumerate(grid):
    row = smallest[i * len(grid) : (i + 1) * len(grid)]
    print(f"p={p:<4}" + "".join(f"{v:+10.4f}" for v in row))

fig, axes = plotting.subplots(1, 1, width=3.8, height=3.0)
plotting.heatmap(
    axes[0, 0],
    smallest.reshape(len(grid), len(grid)),
    row_labels=[f"p={p:g}" for p in grid],
    col_labels=[f"{q:g}" for q in grid],
    title="smallest eigenvalue of the tied α block",
    cmap="coolwarm",
    vmin=-0.3,
    vmax=0.3,
)
axes[0, 0].set_xlabel("q")
show(fig, "alpha_min_over_pq")

# %% [markdown]
# ## Certified eigenpairs
#
# `eigenpairs` returns the k largest (or smallest) eigenpairs, each with its residual
# ||Hv - λv|| from a fresh Hessian-vector product, and groups repeated eigenvalues. Above
# D = `dense_below` it runs a thick-restarted Lanczos on Hessian-vector products alone; we
# force that here (`dense_below=0`) to see it find the 4-fold eigenvalue 2π₀π₁(p + q - 1)
# with its multiplicity.

# %%
top = landscape.eigenpairs(theta_pi, k=5, which="largest", dense_below=0)
print(top.describe())
print("multiplicities:", top.multiplicities())

# %% [markdown]
# ## Escape directions at the untied saddle
#
# Untied, θ_π is a strict saddle. `escape_directions` returns the eigenvectors of the
# negative eigenvalues and checks each at second order: L(θ + εv) + L(θ - εv) - 2L(θ)
# against ε²λ (odd orders cancel, so the check holds off a critical point too).
# Theory says the directions are a = -e ([notes](../../notes/markov/) §6.3): moving the
# embedding and the head apart lowers the loss, which tying forbids.

# %%
escape = landscape.escape_directions(theta_pi_untied)
print(escape.describe())
first = escape.vectors[0]
print("a + e along the first direction:", np.abs(first["a"] + first["e"]).max())

# %% [markdown]
# ## Gauss-Newton against the remainder
#
# The Hessian of a cross-entropy of logits splits as H = G + R, with G = JᵀH_zJ positive
# semi-definite. Near θ_π the logit is x_n⟨a, e⟩ + ⟨a, p_n⟩ + b up to second order
# ([notes](../../notes/markov/) §6.4), and a = e = p_n = 0 there, so the logits' first
# derivatives vanish in every direction but b: G sees the bias alone, and the saddle's negative
# curvature lives entirely in R, out of sight of a Gauss-Newton, K-FAC or Fisher method.

# %%
split = landscape.ggn_at(theta_pi_untied)
print(split.describe())

# %% [markdown]
# ## A path from θ_π to θ*
#
# The loss along the straight line (1 - t) θ_π + t θ*. At (0.5, 0.8) θ_π is a local minimum,
# so the line must climb before it descends to the global minimum θ*: the barrier is the
# height of that climb above the higher end.

# %%
line = landscape.path(theta_pi, theta_star, np.linspace(0, 1, 21 if TINY else 61))
print(line.describe())
show(probe_figures.plot_path(line), "path")

# %% [markdown]
# ## A slice through θ_π
#
# `slice_2d` evaluates the loss on θ_π + α u + β v, here with u pointing at θ* and v random.
# Filter normalisation rescales each filter of a direction (a row of a weight matrix, a whole
# vector) to the norm of the point's filter, so that the plane's scale follows the network's.
# At θ_π every block but the bias b is zero, and rescaling to a zero norm would zero the
# direction: there the library keeps the directions as they are and says so in `notes`. Only
# the bias entries are rescaled, which is why θ* no longer lies on the plane (`project` gives
# its coordinates and its distance from the plane).

# %%
u = landscape.direction_to(theta_pi, theta_star)
v = landscape.random_direction(theta_pi, jax.random.key(0))
num = 9 if TINY else 25
plane = landscape.slice_2d(
    theta_pi, u, v, np.linspace(-0.5, 1.5, num), np.linspace(-1, 1, num), normalize="filter"
)
print(plane.describe())
alpha, beta, off_plane = plane.project(theta_star)
print(f"θ* at (α, β) = ({alpha:.3f}, {beta:.3f}), {off_plane:.3f} off the plane")
show(probe_figures.plot_slice(plane, points=[theta_star]), "slice")

# %% [markdown]
# ## A spectral density
#
# For large models the dense Hessian is out of reach; stochastic Lanczos quadrature estimates
# its eigenvalue density from Hessian-vector products alone, with standard errors over probes.
# At θ* we can hold it against the exact spectrum (the red ticks: its non-zero eigenvalues).

# %%
density = landscape.spectral_density(theta_star, num_probes=8 if TINY else 16, num_iters=30)
print(density.describe())
exact = landscape.hessian_at(theta_star).eigenvalues
zero = np.abs(exact) <= 1e-9 * np.abs(exact).max()
print(f"exact: {np.sum(~zero)} non-zero eigenvalues of D = {exact.size}:", exact[~zero])
fig = probe_figures.density_figure(density)
fig.axes[0].plot(exact[~zero], np.full(np.sum(~zero), 1e-4), "|", color="red", markersize=12)
show(fig, "spectral_density")

# %% [markdown]
# ## Next
#
# The atlas experiment runs these probes over a 4 x 4 grid of (p, q), tied and untied, and
# checks each verdict against Theorems 2-3, with figures and a summary (about a minute):
#
# ```bash
# python -m experiments.markov --config=configs/markov.py:atlas
# ```
#
# The probes' API: [Points](../../api/points/), [Probes](../../api/probes/),
# [Results](../../api/results/).
