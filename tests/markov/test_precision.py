"""Mixed precision the Flax way (landscape/engine/precision.py, notes/markov.md §13):
param_dtype float32 master weights, a float16 / bfloat16 computation dtype as torch.autocast
without a gradient scaler. On a fixed batch the half-precision gradients are float32's within the
half type's rounding; where gradients are tiny (a small init, as on the unigram plateau at
N = 1024) float16 flushes them to zero and bfloat16 (float32's exponent range) does not.

Tolerance: a gradient entry is a sum of products through ~a dozen roundings to the half type
(the qkv, W_O, W_1, W_2 and head products of two blocks, the activations, the value mix), each
off by at most the unit roundoff u (2^-11 for float16, 2^-8 for bfloat16) relative to the terms
it sums. The errors of small entries are set by the size of those terms, so the bound is
relative to the gradient's scale (its largest entry): |g_half - g_32| <= 16 u max|g_32|.
Measured (d = 8, N = 64, 2 layers): float16 1.4e-3 (gpt), 1.9e-3 (theory) = 3-4 u; bfloat16
5.2e-3, 2.8e-2 = 1.3-7 u.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from configs import markov
from landscape.engine import config as config_lib
from landscape.engine import precision, training
from landscape.markov import experiment
from landscape.markov import model as M

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
FAMILIES = {
    "gpt": dict(
        family="gpt", d=8, seq_len=64, num_layers=2, num_heads=2, layer_norm=True, activation="gelu"
    ),
    "theory": dict(family="theory", d=8, seq_len=64, num_layers=2, num_heads=2),
}


def batch(seed=0, length=65):
    return np.random.default_rng(seed).integers(0, 2, (8, length))


def perturbed_init(model, scale=0.3, seed=0):
    """The GPT-2 init plus N(0, scale^2) (float32): attention far from uniform, every path on."""
    rng = np.random.default_rng(seed)
    params = M.init_params(jax.random.key(1), model)
    return jax.tree.map(lambda a: (a + scale * rng.normal(size=a.shape)).astype(np.float32), params)


def loss_fn(model, x_BN):
    def loss(params):
        log_probs = model.apply({"params": params}, x_BN[:, :-1])
        return -jnp.take_along_axis(log_probs, x_BN[:, 1:, None], axis=-1).mean()

    return loss


class HalfPrecisionTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.product(family=("gpt", "theory"), dtype=("float16", "bfloat16"))
    def test_half_gradients_are_float32_within_rounding(self, family, dtype):
        full = M.MarkovModel(**FAMILIES[family])
        half = M.MarkovModel(**FAMILIES[family], dtype=dtype)
        params, x_BN = perturbed_init(full), batch()
        loss32, grads32 = jax.jit(jax.value_and_grad(loss_fn(full, x_BN)))(params)
        loss, grads = self.variant(jax.value_and_grad(loss_fn(half, x_BN)))(params)
        chex.assert_tree_all_finite(grads)
        chex.assert_trees_all_equal_shapes_and_dtypes(grads, params)  # float32 master grads
        assert loss.dtype == jnp.float32  # the loss in float32
        u = UNIT_ROUNDOFF[dtype]
        scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads32))
        chex.assert_trees_all_close(grads, grads32, rtol=0, atol=16 * u * scale)
        error = max(
            float(jnp.max(jnp.abs(a - b)))
            for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grads32), strict=True)
        )
        assert error > 0.1 * u * scale  # the half computation really ran
        assert abs(float(loss) - float(loss32)) < 16 * u * float(loss32)

    @chex.variants(with_jit=True)  # jit only: un-jitted, the GPT case costs 20 s for the same check
    @parameterized.parameters("gpt", "theory")
    def test_float16_flushes_tiny_gradients_to_zero(self, family):
        """GPT-2 init scaled by 1e-3: float16 flushes most gradient entries to zero (products of
        small weights fall below its 6e-8 subnormal floor); bfloat16 has float32's range."""
        fractions = {}
        for dtype in (None, "float16", "bfloat16"):
            model = M.MarkovModel(**FAMILIES[family], dtype=dtype)
            tiny = jax.tree.map(lambda a: a * 1e-3, M.init_params(jax.random.key(1), model))
            grads = self.variant(jax.grad(loss_fn(model, batch())))(tiny)
            fractions[dtype] = float(training.grad_zero_fraction(grads))
        assert fractions["float16"] > 0.5 > fractions[None] + 0.4
        assert fractions["bfloat16"] < fractions[None] + 0.01

    @chex.variants(with_jit=True, without_jit=True)
    def test_half_forward_dtypes(self):
        """Half matmuls, float32 log-probabilities that still normalise, float32 attention."""
        model = M.MarkovModel(**FAMILIES["gpt"], num_states=3, dtype="float16")
        params = perturbed_init(model)
        x_BN = np.random.default_rng(1).integers(0, 3, (4, 64))
        log_probs = self.variant(lambda p: model.apply({"params": p}, x_BN))(params)
        chex.assert_shape(log_probs, (4, 64, 3))
        chex.assert_type(log_probs, jnp.float32)
        chex.assert_trees_all_close(jnp.exp(log_probs).sum(-1), jnp.ones((4, 64)), atol=1e-5)
        att = self.variant(
            lambda p: model.apply({"params": p}, x_BN, 1, method=M.MarkovModel.attention_weights)
        )(params)
        chex.assert_type(att, jnp.float32)
        chex.assert_trees_all_close(att.sum(-1), jnp.ones((4, 2, 64)), atol=1e-5)


def test_model_dtype_fields_are_checked():
    assert M.MarkovModel(dtype="float16") == M.MarkovModel(dtype=jnp.float16)
    assert hash(M.MarkovModel(dtype="bfloat16")) == hash(M.MarkovModel(dtype=jnp.bfloat16))
    with pytest.raises(ValueError, match="dtype = 'int8': must be one of"):
        M.MarkovModel(dtype="int8")
    with pytest.raises(ValueError, match="param_dtype = 'float16': must be one of float32"):
        M.MarkovModel(param_dtype="float16")


def test_config_precision_switch():
    """model.dtype: "" = train.dtype; float16 sets Problem.log_grad_zeros; the Flax fields."""
    cfg = markov.get_config("fig3_gpt")
    assert cfg.model.dtype == ""
    model = M.from_config(cfg)
    assert model.dtype == jnp.float32 and model.param_dtype == jnp.float32
    assert not experiment.make_problem(cfg).log_grad_zeros
    cfg.model.dtype = "float16"
    experiment.validate(cfg)
    model = M.from_config(cfg)
    assert model.dtype == jnp.float16 and model.param_dtype == jnp.float32
    assert experiment.make_problem(cfg).log_grad_zeros
    assert "float16 autocast" in experiment.model_table(cfg)
    for bad, message in (
        ("float8", "config.model.dtype = 'float8'"),
        ("float64", "config.model.dtype = 'float64'"),
    ):
        cfg.model.dtype = bad
        with pytest.raises(config_lib.ConfigError, match=message):
            experiment.validate(cfg)
    assert precision.COMPUTE_DTYPES[0] == ""


def test_float16_training_records_grad_zero_fraction():
    """A short float16 run: float32 master weights, the metric grad_zero_fraction per step."""
    cfg = markov.get_config("fig3")
    cfg.sweep, cfg.variants = {}, []
    cfg.model.dtype = "float16"
    cfg.train.update(num_steps=20, log_every=10)
    result = experiment.train_group(cfg, {}, progress=None)["result"]
    chex.assert_tree_all_finite(result.losses)
    chex.assert_type(jax.tree.leaves(result.final_params), jnp.float32)
    zeros = np.asarray(result.metrics["grad_zero_fraction"])
    chex.assert_shape(zeros, result.losses.shape)
    assert np.all((zeros >= 0) & (zeros <= 1))
