"""The precision switch of the n-gram models (landscape/engine/precision.py): param_dtype for the
parameters, dtype for the computation, half types as autocast (softmax and the loss in float32)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from configs import ngrams
from landscape.engine import config as config_lib
from landscape.ngrams import estimators as est
from landscape.ngrams import experiment, task
from landscape.ngrams import model as M

# Unit roundoff u = 2^-(mantissa bits + 1): bfloat16 keeps 8 significant bits, float16 11.
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11}

CASES = {
    "simplified": dict(kind="simplified"),  # Fig 3's model
    "transformer": dict(kind="transformer", mlp=True),  # Figs 4 and 7
    "disentangled": dict(kind="disentangled"),
}


@pytest.fixture(scope="module")
def batch():
    """256 sequences of Fig 3's task (S = 5, n = 3, T = 32, alpha = 0.5), soft targets in
    float32."""
    x_BT, target_BS, _ = task.sample(jax.random.key(5), 5, 3, 32, 0.5, 256)
    return x_BT, target_BS.astype(jnp.float32)


def _loss_and_grad(model, params, x_BT, target_BS):
    def loss(p):
        probs = model.apply({"params": p}, x_BT)
        return jnp.mean(est.cross_entropy(probs, target_BS, 1e-8)), probs

    (value, probs), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return value, grads, probs.dtype


_SLOW = ("transformer", "float16")


@pytest.mark.parametrize(
    "case, dtype",
    [  # bfloat16 beyond the simplified model, and the transformer in float16 (20 s): slow
        pytest.param(
            case,
            dtype,
            marks=[pytest.mark.slow]
            if (dtype == "bfloat16" and case != "simplified") or (case, dtype) == _SLOW
            else [],
        )
        for case in CASES
        for dtype in ("bfloat16", "float16")
    ],
)
def test_half_precision_is_within_rounding_of_float32(case, dtype, batch):
    """Loss and gradient with model.dtype = bfloat16 / float16 on a fixed batch against float32.

    Tolerances, with u the half type's unit roundoff (bfloat16 2^-8 = 3.9e-3, float16 2^-11 =
    4.9e-4): every matmul input (parameters cast to the half type, activations) and output is
    rounded once to relative error <= u, and a gradient entry passes through a few such roundings
    (forward and backward), so its error is a small multiple of u times the gradient's scale:
    measured 1.0-1.6 u for the whole gradient vector and <= 2.2 u for the largest entry error
    relative to the largest entry; we allow 4 u. The loss is a mean over 256 sequences whose
    rounding errors are independent and average out (measured <= 0.04 u relative); we allow u.
    Softmax and the loss run in float32 (autocast), so probs are float32 and no overflow occurs.
    """
    x_BT, target_BS = batch
    u = UNIT_ROUNDOFF[dtype]
    base = M.NgramModel(num_states=5, seq_len=32, **CASES[case])
    half = base.clone(dtype=dtype)
    params = half.init(jax.random.key(1), M.dummy_tokens(half))["params"]
    # the parameters stay in param_dtype (float32) whatever the computation dtype
    chex.assert_trees_all_equal_structs(params, M.init_params(jax.random.key(1), base))
    chex.assert_type(jax.tree_util.tree_leaves(params), jnp.float32)
    # move off the init's special values (A1 = 0: uniform heads; zero readout) so every block
    # carries a gradient and the attention is not uniform
    if case == "simplified":
        params["A1"] = 2.0 * jax.random.normal(jax.random.key(2), params["A1"].shape, jnp.float32)
    else:
        params["readout"] = jax.random.normal(
            jax.random.key(2), params["readout"].shape, jnp.float32
        ) / np.float32(np.sqrt(params["readout"].shape[0]))
    loss32, grad32, probs32 = _loss_and_grad(base, params, x_BT, target_BS)
    loss_h, grad_h, probs_h = _loss_and_grad(half, params, x_BT, target_BS)
    assert probs32 == jnp.float32 and probs_h == jnp.float32  # softmax in float32
    chex.assert_tree_all_finite((loss_h, grad_h))
    chex.assert_type(jax.tree_util.tree_leaves(grad_h), jnp.float32)  # grads in param_dtype
    chex.assert_trees_all_close(loss_h, loss32, rtol=u, atol=0)
    scale = float(jnp.max(jnp.abs(ravel_pytree(grad32)[0])))
    chex.assert_trees_all_close(grad_h, grad32, rtol=0, atol=4 * u * scale)
    flat_h, flat32 = ravel_pytree(grad_h)[0], ravel_pytree(grad32)[0]
    assert float(jnp.linalg.norm(flat_h - flat32)) <= 4 * u * float(jnp.linalg.norm(flat32))
    # not vacuous: the half computation does round (it is not float32 in disguise)
    assert float(jnp.max(jnp.abs(flat_h - flat32))) > 0


def test_float32_and_float64_computation_is_the_params_dtype(batch):
    """dtype None computes in the dtype of the parameters passed in (float64 params: float64
    probs), and dtype = the params' dtype gives the same numbers bit for bit."""
    x_BT, _ = batch
    model = M.NgramModel(num_states=5, seq_len=32)
    params64 = M.init_params(jax.random.key(0), model, jnp.float64)
    chex.assert_type(jax.tree_util.tree_leaves(params64), jnp.float64)
    probs = model.apply({"params": params64}, x_BT)
    chex.assert_type(probs, jnp.float64)
    chex.assert_trees_all_equal(
        model.clone(dtype="float64").apply({"params": params64}, x_BT), probs
    )


def test_config_model_dtype_builds_the_precision():
    cfg = ngrams.get_config("smoke")
    assert cfg.model.dtype == ""
    assert experiment.model_of(cfg).dtype == jnp.float32
    assert experiment.model_of(cfg).param_dtype == jnp.float32
    cfg.model.dtype = "bfloat16"
    experiment.validate(cfg)
    model = experiment.model_of(cfg)
    assert model.dtype == jnp.bfloat16 and model.param_dtype == jnp.float32
    problem = experiment.make_problem(cfg)
    assert problem.log_grad_zeros
    params = jax.jit(problem.init)(jax.random.key(0), {})
    chex.assert_type(jax.tree_util.tree_leaves(params), jnp.float32)
    cfg.model.dtype = ""
    assert not experiment.make_problem(cfg).log_grad_zeros
    bad = config_lib.with_fields(cfg, {"model.dtype": "float8"})
    with pytest.raises(config_lib.ConfigError, match="config.model.dtype"):
        experiment.validate(bad)
