"""landscape/engine/backend.py: the CPU-tuned formulations and the plain ones give the same
numbers, so an accelerator (which traces the plain ones) trains the same model."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import markov as markov_configs
from landscape.core import memory as core_memory
from landscape.engine import backend, memory, training
from landscape.markov import attention as markov_attention
from landscape.markov import experiment as markov


def test_the_cpu_backend_takes_the_cpu_formulations():
    assert jax.default_backend() == "cpu" and backend.current() == "cpu"
    with backend.tuning("plain"):
        assert not backend.cpu_tuned()
    assert backend.cpu_tuned()
    with pytest.raises(ValueError, match="tuning"):
        with backend.tuning("gpu"):
            pass


def test_compiler_options_are_xla_s_defaults_until_measured(monkeypatch):
    """No options on the CPU, nor on a GPU while GPU_COMPILER_OPTIONS is empty; once set, a GPU
    program gets a copy, and jax.jit takes such options per program (XLA knows its GPU options
    on every backend, so the CPU compiles with them unchanged)."""
    assert backend.compiler_options() is None
    monkeypatch.setattr(backend.jax, "default_backend", lambda: "gpu")
    assert backend.compiler_options() is None
    monkeypatch.setattr(backend, "GPU_COMPILER_OPTIONS", {"xla_gpu_autotune_level": 0})
    options = backend.compiler_options()
    assert options == {"xla_gpu_autotune_level": 0} and options is not backend.GPU_COMPILER_OPTIONS
    monkeypatch.undo()
    double = jax.jit(lambda x: 2 * x, compiler_options=options)
    assert float(double(jnp.float32(1.5))) == 3.0


def test_float32_matmuls_reach_the_compiled_dot():
    """On a GPU, JAX's default float32 dot rounds its inputs to TF32 (on an H200 that broke
    Lemma 1's zero row sums by 2.3e-4); the CLIs ask for full float32. The CPU computes float32
    either way, so what is checked here is that the request reaches the program."""
    x = jnp.ones((8, 8), jnp.float32)
    before = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", None)  # JAX's default
        assert "HIGHEST" not in jax.jit(jnp.dot).lower(x, x).as_text()
        backend.use_float32_matmuls()
        assert "HIGHEST" in jax.jit(jnp.dot).lower(x, x).as_text()
        # half-precision operands keep their dtype: the request is about float32 inputs
        half = jax.jit(jnp.dot).lower(x.astype(jnp.bfloat16), x.astype(jnp.bfloat16))
        assert "bf16" in half.as_text()
    finally:
        jax.config.update("jax_default_matmul_precision", before)


def _loss_and_grad(tuning):
    """The GPT-2 family's training loss and gradient at N = 256 (tiled attention in 4 x 4 tiles,
    looped over chunks of sequences, LayerNorm and log-softmax over short axes, on the CPU),
    traced afresh under `tuning`."""
    cfg = markov_configs.get_config("fig3_gpt")
    cfg.model.seq_len = 256
    problem = markov.make_problem(cfg)
    hp = {k: jnp.float32(markov.config_lib.get(cfg, k)) for k in markov.TRACED}
    params = problem.init(jax.random.key(0), hp)
    with backend.tuning(tuning):
        fn = jax.value_and_grad(lambda p: problem.loss(p, jax.random.key(1), hp)[0])
        program = str(jax.make_jaxpr(fn)(params))
        return jax.jit(fn)(params), program


def test_plain_formulations_give_the_cpu_ones_numbers():
    assert not markov_attention.scores_held_whole(256)  # the tiled path on the CPU
    ((loss_cpu, grad_cpu), cpu), ((loss_plain, grad_plain), plain) = (
        _loss_and_grad("cpu"),
        _loss_and_grad("plain"),
    )
    # the sequential sampler and the loop over chunks of sequences (scans) are the CPU's only
    assert cpu.count("scan[") > 0 and plain.count("scan[") == 0
    np.testing.assert_allclose(loss_plain, loss_cpu, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grad_plain), jax.tree.leaves(grad_cpu), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)


# ----------------------------------------------------------------------------- group sizes


def _chunk_jaxpr(cfg, runs):
    """The jaxpr of the compiled chunk that trains `runs` runs of `cfg` (traced, not compiled)."""
    problem = markov.make_problem(cfg)
    spec = training.step_spec(problem, cfg.optim, num_steps=cfg.train.num_steps, log_every=10)
    hparams = {k: np.full(runs, markov.config_lib.get(cfg, k), np.float32) for k in markov.TRACED}
    placed = training._place_runs(problem, hparams, np.arange(runs), None, None, None)
    init = jax.vmap(functools.partial(training.init_state, spec))
    state = jax.eval_shape(init, placed.seeds_dev, placed.hparams)
    chunk = training._chunk_program(spec, placed)
    return str(chunk.trace(state, jnp.int32(0), placed.hparams).jaxpr)


def test_plain_groups_are_what_fits_in_the_device_memory():
    """Markov Fig. 4's paper grid (245 runs a program, N = 128): groups of 2 on the CPU (a
    lax.map over 123 groups), all 245 runs in one vmap on a device with 80 GB free, and groups
    of floor(USABLE x 2 GB / run_bytes) = 20 (13 of them) on a device with 2 GB free."""
    cfg = markov_configs.get_config("fig4_paper")
    runs = 7 * 7 * 5
    problem = markov.make_problem(cfg)
    per_run = markov.run_bytes(cfg)
    # the plain step's activations: (4 B + 2 E) sequences x (3 N^2 scores + 12 N d + 12 N d)
    # floats + 3 N S logits, in float32, and the tokens
    N, d, B, E = 128, 4, 16, 64
    assert (
        per_run
        == (4 * B + 2 * E) * (3 * N * N + 24 * N * d + 3 * N * 2) * 4 + 3 * (B + E) * (N + 1) * 4
    )
    assert backend.runs_per_group(problem.runs_per_group, problem.run_bytes) == 2
    with backend.tuning("plain", device_bytes=80e9):
        assert backend.runs_per_group(problem.runs_per_group, problem.run_bytes) >= runs
    with backend.tuning("plain", device_bytes=2e9):
        assert backend.runs_per_group(problem.runs_per_group, problem.run_bytes) == int(
            backend.USABLE * 2e9 // per_run
        )
    cfg.train.update(num_steps=10, log_every=10)
    cpu = _chunk_jaxpr(cfg, runs)
    assert "length=123" in cpu  # lax.map over ceil(245 / 2) groups
    with backend.tuning("plain", device_bytes=80e9):
        plain = _chunk_jaxpr(cfg, runs)
    # one vmap: the only scans left are the steps' (no groups, tiles or sequential sampler)
    assert "length=123" not in plain and plain.count("scan[") == 2
    with backend.tuning("plain", device_bytes=2e9):
        assert "length=13" in _chunk_jaxpr(cfg, runs)  # ceil(245 / 20) groups


def test_plain_sizes_of_the_other_cpu_tunings():
    """WikiText's one run at a time, the n-gram snapshot's chunks of the test set and the Markov
    batch split are the CPU's; plain sizes them by memory."""
    from configs import ngrams as ngram_configs
    from landscape.ngrams import experiment as ngrams

    big = ngram_configs.get_config("fig4_paper")
    cpu_chunk = ngrams.snapshot_chunk(big)
    half = big.train.test_sequences // 2
    assert cpu_chunk < half
    with backend.tuning("plain", device_bytes=80e9):
        assert ngrams.snapshot_chunk(big) == half  # the half test set at once
    with backend.tuning("plain", device_bytes=1e3):
        assert ngrams.snapshot_chunk(big) == 1
    assert backend.per_batch(4, 1e9, 3) == 3
    small = markov_configs.get_config("fig3")
    assert markov.make_problem(small).batch_size is None  # N = 128: no split on the CPU
    with backend.tuning("plain"):
        assert markov.make_problem(small).batch_size == small.train.batch_size
    with pytest.raises(ValueError, match="device_bytes"):
        with backend.tuning("plain", device_bytes=0):
            pass


def test_memory_stats_of_an_accelerator(monkeypatch):
    """device_free_bytes reads the allocator's limit less its use where a device reports them,
    and the host's available memory where it does not (the CPU)."""

    class Device:
        def __init__(self, stats):
            self.stats = stats

        def memory_stats(self):
            return self.stats

    assert memory.device_free_bytes(Device({"bytes_limit": 80e9, "bytes_in_use": 5e9})) == 75e9
    monkeypatch.setattr(core_memory, "available_memory_bytes", lambda: 12e9)  # read at the call
    assert memory.device_free_bytes(Device(None)) == 12e9
    with backend.tuning("plain", device_bytes=3e9):
        assert backend.free_bytes() == 3e9


@pytest.mark.slow
def test_both_tunings_train_the_same_small_grid():
    """Markov, 2 (p, q) x 2 seeds at N = 64, batch 64 (groups of 2, slice-chain reductions and
    the sequential sampler on the CPU; one vmap, jnp reductions and the scan sampler plain): the
    same losses and snapshots to float32 rounding after 20 AdamW steps. (The tiled attention
    against the dense one: test_plain_formulations_give_the_cpu_ones_numbers.)"""
    cfg = markov_configs.get_config("fig4")
    cfg.update(num_seeds=2, variants=[], sweep={"chain": {"p": [0.2, 0.6], "q": [0.8]}})
    cfg.model.seq_len = 64
    cfg.train.update(num_steps=20, log_every=10, eval_sequences=8, batch_size=64)
    assert markov.runs_per_group(cfg) == 2
    cpu = markov.train_group(cfg, {}, progress=None)["result"]
    with backend.tuning("plain", device_bytes=8e9):
        plain = markov.train_group(cfg, {}, progress=None)["result"]
    np.testing.assert_allclose(plain.losses, cpu.losses, rtol=1e-6)
    for name in ("test_loss", "f0", "f1"):
        np.testing.assert_allclose(plain.snapshots[name], cpu.snapshots[name], rtol=1e-6)
    finals = jax.tree.leaves(plain.final_params), jax.tree.leaves(cpu.final_params)
    for a, b in zip(*finals, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
