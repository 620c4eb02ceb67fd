"""landscape/engine/backend.py: the CPU-tuned formulations and the plain ones give the same
numbers, so an accelerator (which traces the plain ones) trains the same model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import markov as markov_configs
from landscape.engine import backend
from landscape.markov import experiment as markov
from landscape.markov import model as markov_model


def test_the_cpu_backend_takes_the_cpu_formulations():
    assert jax.default_backend() == "cpu" and backend.current() == "cpu"
    with backend.tuning("plain"):
        assert not backend.cpu_tuned()
    assert backend.cpu_tuned()
    with pytest.raises(ValueError, match="tuning"):
        with backend.tuning("gpu"):
            pass


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
    assert not markov_model.scores_held_whole(256)  # the tiled path on the CPU
    ((loss_cpu, grad_cpu), cpu), ((loss_plain, grad_plain), plain) = (
        _loss_and_grad("cpu"),
        _loss_and_grad("plain"),
    )
    # the sequential sampler and the loop over chunks of sequences (scans) are the CPU's only
    assert cpu.count("scan[") > 0 and plain.count("scan[") == 0
    np.testing.assert_allclose(loss_plain, loss_cpu, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grad_plain), jax.tree.leaves(grad_cpu), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)
