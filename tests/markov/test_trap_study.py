"""The trap study at the authors' recipe and precision (notes/markov.md §13): the
OneCycle schedule against PyTorch's formula, float16 autocast against an emulation written here,
the Wilson interval, and the study end to end at a tiny size."""

import csv
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import markov
from landscape.engine import config as config_lib
from landscape.engine import records, training
from landscape.markov import experiment, trap_study
from landscape.markov import model as M
from tests.arrays import load_npz


def torch_onecycle(step, total, pct_start, div_factor=100.0, final_div_factor=0.05):
    """torch.optim.lr_scheduler.OneCycleLR.get_lr (anneal_strategy="cos", three_phase=False,
    max_lr = 1), as its source reads: two phases with float end steps, cosine annealing."""
    initial = 1.0 / div_factor
    phases = [
        dict(end=float(pct_start * total) - 1, start_lr=initial, end_lr=1.0),
        dict(end=float(total) - 1, start_lr=1.0, end_lr=initial / final_div_factor),
    ]
    start_step = 0.0
    for i, phase in enumerate(phases):
        if step <= phase["end"] or i == len(phases) - 1:
            pct = (step - start_step) / (phase["end"] - start_step)
            return phase["end_lr"] + (phase["start_lr"] - phase["end_lr"]) / 2 * (
                math.cos(math.pi * pct) + 1
            )
        start_step = phase["end"]


@pytest.mark.parametrize("total", [400, 500])
def test_onecycle_matches_pytorch(total):
    """The Markov authors' OneCycleLR(max_lr=lr, pct_start=0.02, div_factor=1e2,
    final_div_factor=0.05, anneal_strategy="cos", cycle_momentum=False) (notes §3.3, §13)."""
    cfg = markov.get_config("fig3_paper" if total == 400 else "fig1_paper")
    assert cfg.train.num_steps == total and cfg.optim.schedule == "onecycle"
    optim = cfg.optim.copy_and_resolve_references()
    optim.warmup_steps = int(round(cfg.train.warmup_fraction * total))
    multiplier = training.schedule(optim, total)
    peak = int(0.02 * total) - 1  # 7 at 400 iterations, 9 at 500
    for step in (0, 1, 3, peak, peak + 1, total // 2, total - 2, total - 1):
        np.testing.assert_allclose(
            float(multiplier(step)),
            torch_onecycle(step, total, 0.02),
            rtol=2e-6,
            err_msg=f"step {step}",
        )
    assert float(multiplier(0)) == pytest.approx(0.01)  # lr / 100
    assert float(multiplier(peak)) == pytest.approx(1.0)
    assert float(multiplier(total - 1)) == pytest.approx(0.2)  # lr / 5
    # the warm-up is a half cosine, not a line: at step 1 of 400, 0.059 (a line gives 0.151)
    if total == 400:
        assert float(multiplier(1)) == pytest.approx(0.0590205, rel=1e-5)


def test_wilson_interval():
    """Wilson's score interval: 0 of 10 -> [0, 0.278], 5 of 10 -> [0.237, 0.763]."""
    np.testing.assert_allclose(trap_study.wilson(0, 10), (0.0, 0.27753), atol=1e-5)
    np.testing.assert_allclose(trap_study.wilson(5, 10), (0.23659, 0.76341), atol=1e-5)
    np.testing.assert_allclose(trap_study.wilson(10, 10), (0.72247, 1.0), atol=1e-5)
    for n in range(1, 40):  # exact ends: the figure's error bars must not go negative
        assert trap_study.wilson(0, n)[0] == 0.0 and trap_study.wilson(n, n)[1] == 1.0


# ----------------------------------------------------------------------------- float16 autocast


def _layer_norm(x, gain):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * gain


def autocast_loss(params, x_BN, half, num_layers):
    """A 1-head GPT-2 (pre-LN, tied head with bias, exact GELU) under torch.autocast(half), written
    from its rules: Linear layers and the head in `half`, LayerNorm, softmax and the loss in
    float32, the residual stream float32, the attention output cast to `half`."""

    def linear(h, W):
        return h.astype(half) @ W.astype(half).T

    tokens, targets = x_BN[:, :-1], x_BN[:, 1:]
    N = tokens.shape[1]
    z = params["wte"][tokens] + params["wpe"][:N]
    for layer in range(num_layers):
        w = params[f"block_{layer}"]
        h = _layer_norm(z, w["ln_1"])
        q, k, v = (linear(h, w[name]).astype(jnp.float32) for name in ("W_Q", "W_K", "W_V"))
        scores = jnp.einsum("bnd,bid->bni", q, k) / math.sqrt(q.shape[-1])
        scores = jnp.where(np.tri(N, dtype=bool), scores, -jnp.inf)
        mixed = jnp.einsum("bni,bid->bnd", jax.nn.softmax(scores, axis=-1), v).astype(half)
        y = z + linear(mixed, w["W_O"])
        hidden = jax.nn.gelu(linear(_layer_norm(y, w["ln_2"]), w["W_1"]), approximate=False)
        z = y + linear(hidden, w["W_2"])
    logits = (
        linear(_layer_norm(z, params["ln_f"]), params["wte"]) + params["head_bias"].astype(half)
    ).astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(log_probs, targets[..., None], axis=-1).mean()


def test_float16_flushes_the_entries_an_emulation_flushes():
    """At a small-weight point (the GPT-2 init x 0.1: the MLP, value and output gradients partly
    below float16's subnormal floor, the query and key gradients entirely), the model's float16
    mode has exactly the zero gradient entries of the emulation above, entry by entry, and
    float32 has none of them. (At x 0.05 the position embeddings' float32 sums also cancel to
    exactly zero in a few entries, 1e-12 apart between the two codes: not a float16 flush.)"""
    cfg = dict(
        family="gpt", d=8, seq_len=64, num_layers=2, num_heads=1, layer_norm=True, activation="gelu"
    )
    half = M.MarkovModel(**cfg, dtype="float16")
    params = jax.tree.map(lambda a: a * 0.1, M.init_params(jax.random.key(3), half))
    x_BN = jnp.asarray(np.random.default_rng(0).integers(0, 2, (16, 65)))

    def model_loss(model):
        def loss(p):
            log_probs = model.apply({"params": p}, x_BN[:, :-1])
            return -jnp.take_along_axis(log_probs, x_BN[:, 1:, None], axis=-1).mean()

        return loss

    grads = jax.jit(jax.grad(model_loss(half)))(params)
    emulated = jax.jit(jax.grad(autocast_loss), static_argnums=(2, 3))(params, x_BN, jnp.float16, 2)
    grads32 = jax.jit(jax.grad(model_loss(half.clone(dtype=jnp.float32))))(params)
    zeros = jax.tree.map(lambda g: np.asarray(g == 0), grads)
    chex.assert_trees_all_equal(zeros, jax.tree.map(lambda g: np.asarray(g == 0), emulated))
    flushed = sum(int(z.sum()) for z in jax.tree.leaves(zeros))
    assert flushed > 500  # 855 of 2696 entries
    partly = [z.mean() for z in jax.tree.leaves(zeros) if 0 < z.mean() < 1]
    assert len(partly) >= 6  # the mask is sharp: leaves flushed in part
    assert not any(np.any(np.asarray(g) == 0) for g in jax.tree.leaves(grads32))
    probe = trap_study.half_vs_float32(half, params, x_BN, "float16")
    total = sum(z.size for z in jax.tree.leaves(zeros))
    assert probe["flushed"] == pytest.approx(flushed / total)
    assert probe["per_parameter"]["block_0/W_Q"] == 1.0 and probe["per_parameter"]["wte"] == 0.0
    assert 0 < probe["cosine"] < 1


# ----------------------------------------------------------------------------- end to end


def tiny_trap_config():
    """fig1_paper's recipe at a CPU-test size (N = 32): 2 depths x float16 (the precision the
    plateau probe examines) x 3 seeds, 60 steps; two programs."""
    cfg = markov.get_config("fig1_paper")
    cfg.num_seeds = 3
    cfg.model.seq_len = 32
    cfg.train.update(num_steps=60, log_every=10, eval_sequences=8)
    cfg.sweep = {"model": {"num_layers": [1, 2], "dtype": ["float16"]}}
    return cfg


@pytest.mark.slow
def test_trap_study_end_to_end(tmp_path):
    """Claims with counts and intervals per (depth, precision), the depth contrast, the escape
    steps and the plateau probe; the per-run table and both figures."""
    cfg = tiny_trap_config()
    workdir = records.Workdir.open(tmp_path / "trap")
    summary = experiment.run(cfg, workdir, progress=None)
    claims = summary["claims"]
    cells = [
        c
        for c in claims
        if "trapped at H(pi)" in c["claim"] or "escapes to the entropy rate" in c["claim"]
    ]
    assert len(cells) == 2
    for c in cells:
        k, n = c["measured"]["trapped"], c["measured"]["runs"]
        assert n == 3 and 0 <= k <= 3
        assert c["measured"]["95% interval"] == pytest.approx(
            [round(x, 3) for x in trap_study.wilson(k, n)]
        )
    assert sum("depth escapes the trap" in c["claim"] for c in claims) == 1
    for c in cells:  # the escape steps: a trapped run never crossed the midpoint
        escapes = c["measured"]["escape step"]
        assert escapes["runs"] == 3 and escapes["escaped"] <= 3 - c["measured"]["trapped"]
    table = (tmp_path / "trap" / "trap_runs.csv").read_text().splitlines()
    assert len(table) == 1 + 6 and "escape_step" in table[0]
    with open(tmp_path / "trap" / "trap_cells.csv") as f:
        per_cell = list(csv.DictReader(f))
    assert [int(row["layers"]) for row in per_cell] == [1, 2]
    for row, c in zip(per_cell, cells, strict=True):  # the claims' counts and intervals
        k, n = int(row["trapped"]), int(row["runs"])
        assert (k, n) == (c["measured"]["trapped"], 3)
        interval = [float(row["wilson_low"]), float(row["wilson_high"])]
        np.testing.assert_allclose(interval, trap_study.wilson(k, n), rtol=1e-12)
    for name in ("trap_curves", "trap_fractions"):
        assert (tmp_path / "trap" / "figures" / f"{name}.png").stat().st_size > 10_000
    # the runs table's trapped verdicts follow the criterion from the arrays
    arrays = load_npz(tmp_path / "trap" / "arrays.npz")
    for i, c in enumerate(cells):
        loss = arrays[f"cell{i}_snapshot_test_loss"][:, -1]
        f0, f1 = (arrays[f"cell{i}_snapshot_f{s}"][:, -1] for s in (0, 1))
        pi = np.array([0.8, 0.5]) / 1.3  # stationary law of (p, q) = (0.5, 0.8)
        unigram = -np.sum(pi * np.log(pi))  # H(pi) = 0.6663
        trapped = (np.abs(loss - unigram) < 0.005) & (np.abs(f0 - f1) < 0.02)
        assert c["measured"]["trapped"] == int(trapped.sum())


def test_trap_configs_validate():
    """The shipped studies: 12 and 3 programs of 10 seeds, one chain, the authors' recipe."""
    shipped = (("fig1_paper", 12), ("fig3_paper", 3), ("fig3_paper_long", 3), ("trap_gpu", 6))
    for variant, programs in shipped:
        cfg = markov.get_config(variant)
        experiment.validate(cfg)
        assert len(config_lib.structural_cells(cfg, experiment.TRACED)) == programs
        assert cfg.num_seeds >= 10 and cfg.optim.lr in (2e-3, 1e-3)
    gpu = markov.get_config("trap_gpu")  # depth 1 and 2 x 3 precisions, 50 seeds a cell
    assert gpu.num_seeds == 50 and sorted(gpu.sweep.model.num_layers) == [1, 2]
    assert trap_study.wilson(25, 50)[1] - trap_study.wilson(25, 50)[0] < 2 * 0.14
    bad = markov.get_config("fig3_paper")
    bad.sweep.chain = {"p": [0.5, 0.2]}
    with pytest.raises(config_lib.ConfigError, match="without chain.p / chain.q axes"):
        experiment.validate(bad)
