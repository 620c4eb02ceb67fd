"""TextTransformer, the standard-parameterisation model of Figs. 7 and 10 (notes §3.7)."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.scan_snap import model


def _net(vocab=50, width=16, layers=2, **kwargs):
    net = model.TextTransformer(
        vocab, width=width, hidden=24, num_layers=layers, param_dtype=jnp.float32, **kwargs
    )
    params = net.init({"params": jax.random.key(0)}, jnp.zeros((1, 6), jnp.int32))["params"]
    return net, params


def test_shapes_causal_mask_with_the_diagonal_and_rows_summing_to_one():
    net, params = _net()
    tokens = jax.random.randint(jax.random.key(1), (3, 6), 0, 50)
    logits, maps = net.apply({"params": params}, tokens)
    chex.assert_shape(logits, (3, 6, 50))
    chex.assert_shape(maps, (2, 3, 6, 6))
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-5)
    upper = np.triu(np.ones((6, 6), bool), k=1)
    assert np.all(np.asarray(maps)[..., upper] == 0)  # no key after the query
    np.testing.assert_allclose(maps[..., 0, 0], 1.0)  # position 0 attends to itself
    assert np.all(np.asarray(maps)[..., np.arange(1, 6), np.arange(1, 6)] > 0)


def test_a_later_token_never_changes_an_earlier_prediction():
    net, params = _net()
    tokens = jax.random.randint(jax.random.key(2), (1, 6), 0, 50)
    changed = tokens.at[0, 4].set((tokens[0, 4] + 1) % 50)
    a, _ = net.apply({"params": params}, tokens)
    b, _ = net.apply({"params": params}, changed)
    np.testing.assert_array_equal(a[0, :4], b[0, :4])
    assert not np.allclose(a[0, 4:], b[0, 4:])


def test_parameters_and_their_pytorch_initialisation():
    width, hidden = 16, 24
    net, params = _net(width=width)
    layer = params["layers_0"]
    assert set(params) == {"embed", "layers_0", "layers_1", "decoder"}
    assert set(layer) == {"qkv", "out", "ffn", "ln_attention", "ln_ffn"}
    bounds = {  # U(-b, b): the tutorial's and PyTorch's defaults (§3.7)
        ("embed", "embedding"): 0.1,
        ("decoder", "kernel"): 0.1,
        ("qkv", "kernel"): math.sqrt(6 / (4 * width)),  # Xavier over the (3d, d) matrix
        ("out", "kernel"): width**-0.5,
        ("linear1", "kernel"): width**-0.5,
        ("linear1", "bias"): width**-0.5,
        ("linear2", "kernel"): hidden**-0.5,
        ("linear2", "bias"): hidden**-0.5,
    }
    leaves = {
        tuple(k.key for k in path[-2:]): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
    }
    for key, bound in bounds.items():
        values = np.abs(np.asarray(leaves[key]))
        assert values.max() <= bound and values.max() > 0.8 * bound, key
    for key in [("decoder", "bias"), ("qkv", "bias"), ("out", "bias")]:
        assert not np.any(leaves[key]), key


def test_initial_loss_is_ln_vocab_plus_width_over_600():
    """Each logit is a LayerNorm output (squared norm = width) dotted with a U(-0.1, 0.1)
    column: variance width / 300, so E[logsumexp] = ln V + width / 600 (the decoder's bias is 0
    and the target's logit has mean 0). At V = 2000, width 200: 7.9343."""
    V, width = 2000, 200
    net = model.TextTransformer(V, width=width, hidden=200, num_layers=1, dropout=0.0)
    tokens = jax.random.randint(jax.random.key(3), (8, 35), 0, V)
    targets = jax.random.randint(jax.random.key(4), (8, 35), 0, V)
    losses = []
    for seed in range(6):
        params = net.init({"params": jax.random.key(seed)}, tokens)["params"]
        losses.append(
            float(
                net.apply({"params": params}, tokens, targets, method=model.TextTransformer.loss)[0]
            )
        )
    expected = math.log(V) + width / 600
    assert expected == pytest.approx(7.9343, abs=1e-4)
    assert np.mean(losses) == pytest.approx(expected, abs=0.05)


def test_cross_entropy_gradient_written_out_equals_autodiff():
    logits = jax.random.normal(jax.random.key(5), (12, 30), jnp.float64) * 3
    labels = jax.random.randint(jax.random.key(6), (12,), 0, 30)

    def reference(x):
        return -jnp.take_along_axis(jax.nn.log_softmax(x), labels[:, None], axis=1).mean()

    chex.assert_trees_all_close(
        model.mean_cross_entropy(logits, labels), reference(logits), rtol=1e-12
    )
    chex.assert_trees_all_close(
        jax.grad(model.mean_cross_entropy)(logits, labels),
        jax.grad(reference)(logits),
        rtol=1e-10,
        atol=1e-14,
    )


def test_decoder_cross_entropy_equals_autodiff_through_the_logits():
    """The decoder's loss with its gradient written out (bias folded into the passes) against
    autodiff through log_softmax(x W + b), in float64: value, and gradients for x, W and b."""
    k = jax.random.split(jax.random.key(7), 4)
    x = jax.random.normal(k[0], (12, 6), jnp.float64)
    kernel = jax.random.normal(k[1], (6, 30), jnp.float64)
    bias = jax.random.normal(k[2], (30,), jnp.float64) * 2
    labels = jax.random.randint(k[3], (12,), 0, 30)

    def reference(x, kernel, bias):
        logp = jax.nn.log_softmax(x @ kernel + bias)
        return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()

    def fused(x, kernel, bias):
        return model.decoder_cross_entropy(x, kernel, bias, labels)

    chex.assert_trees_all_close(fused(x, kernel, bias), reference(x, kernel, bias), rtol=1e-12)
    chex.assert_trees_all_close(
        jax.grad(fused, argnums=(0, 1, 2))(x, kernel, bias),
        jax.grad(reference, argnums=(0, 1, 2))(x, kernel, bias),
        rtol=1e-10,
        atol=1e-14,
    )


@pytest.mark.parametrize("dtype", [None, pytest.param(jnp.bfloat16, marks=pytest.mark.slow)])
def test_loss_is_the_cross_entropy_of_the_logits(dtype):
    """TextTransformer.loss (the fused decoder loss; autocast in half) is the cross-entropy of
    the logits __call__ returns, in value and gradient."""
    net, params = _net(dtype=dtype)
    tokens = jax.random.randint(jax.random.key(3), (2, 7), 0, 50)
    targets = jax.random.randint(jax.random.key(4), (2, 7), 0, 50)

    def via_logits(p):
        logits, _ = net.apply({"params": p}, tokens)
        logp = jax.nn.log_softmax(logits.reshape(-1, 50))
        return -jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1).mean()

    def loss(p):
        return net.apply({"params": p}, tokens, targets, method=model.TextTransformer.loss)[0]

    tol = 1e-5 if dtype is None else 1e-2
    chex.assert_trees_all_close(loss(params), via_logits(params), rtol=tol)
    chex.assert_trees_all_close(
        jax.grad(loss)(params), jax.grad(via_logits)(params), rtol=tol, atol=tol * 1e-2
    )


def test_dropout_acts_only_in_training_mode():
    net, params = _net(dropout=0.5)
    tokens = jnp.arange(6)[None] % 50
    a, _ = net.apply({"params": params}, tokens)
    b, _ = net.apply({"params": params}, tokens)
    np.testing.assert_array_equal(a, b)
    c, _ = net.apply({"params": params}, tokens, False, rngs={"dropout": jax.random.key(7)})
    assert not np.allclose(a, c)


def test_sinusoidal_positions_and_attention_entropy():
    table = model.sinusoidal_positions(7, 6)
    pos, i = 5, 1
    assert table[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 6)), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 6)), abs=1e-6)
    T = 35
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    expected = np.mean(np.log(np.arange(1, T + 1)))  # row i: ln(i + 1)
    assert float(model.attention_entropy(uniform[None])) == pytest.approx(expected, abs=1e-5)
    assert expected == pytest.approx(math.lgamma(T + 1) / T)
    assert float(model.attention_entropy(np.eye(T)[None])) == pytest.approx(0.0, abs=1e-6)
