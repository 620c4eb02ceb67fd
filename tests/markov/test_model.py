"""Markov transformers: shapes, causality, the §3.1 equivalence, theta_pi / theta_star
predictions, float64 Hessian (notes/markov.md §3, §6.1-6.5, §6.9, §7 C3, C4, C11, C12).

Helpers build parameters in numpy, and tests share model instances, so that each test compiles
as little as possible (a JAX compile costs ~0.3 s here; the file should stay under 20 s).
"""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from jax.flatten_util import ravel_pytree

from landscape.markov import attention
from landscape.markov import model as M


def random_params(model, seed, scale=0.5):
    """Every leaf N(0, scale^2) in numpy (LN gains 1 + N(0, scale^2)): far from the GPT-2 init,
    so attention is far from uniform and every path of the model matters."""
    rng = np.random.default_rng(seed)
    shapes = M.param_shapes(model)

    def draw(path, shape):
        base = 1.0 if path[-1].key.startswith("ln_") else 0.0
        return base + scale * rng.normal(size=shape)

    return jax.tree_util.tree_map_with_path(draw, shapes, is_leaf=M._is_shape)


def blocks(params):
    """The per-layer parameter dicts block_0, block_1, ... in layer order."""
    return [
        params[f"block_{layer}"] for layer in range(sum(k.startswith("block_") for k in params))
    ]


def set_blocks(params, **values):
    """params with every block's named matrices set to a constant (broadcast)."""
    for block in blocks(params):
        for name, value in values.items():
            block[name] = np.full(block[name].shape, value, float)
    return params


def tokens(seed, batch, length, num_states=2):
    return np.random.default_rng(seed).integers(0, num_states, (batch, length))


def prob_one(params, x_BN, model):
    return np.exp(np.asarray(M.log_probs(params, x_BN, model))[..., 1])


def full_softmax_mix(q_BNHM, k_BNHM, v_BNHM):
    """numpy reference: softmax_i(<q_n, k_i> / sqrt(m)) over i <= n, times v (notes §3.1)."""
    N, m = q_BNHM.shape[1], q_BNHM.shape[-1]
    scores = np.einsum("bnhm,bihm->bhni", q_BNHM, k_BNHM) / math.sqrt(m)
    scores = np.where(np.tri(N, dtype=bool), scores, -np.inf)
    att = np.exp(scores - scores.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    return np.einsum("bhni,bihm->bnhm", att, v_BNHM), att


# Shared models (equal instances hit the same jit cache).
THEORY = M.MarkovModel(d=4, seq_len=30)  # tied, 1 layer, r = 16
THEORY_UNTIED = M.MarkovModel(d=4, seq_len=30, tied=False)


# ---------------------------------------------------------------- shapes and counts (§3.2)


@pytest.mark.parametrize("tied, expected", [(True, 4310), (False, 4318)])
def test_gpt_parameter_count_of_table_1(tied, expected):
    """d = 4, N = 1024, 1 layer, LN: wte 8 + wpe 4096 + ln_1 4 + c_attn 48 + c_proj 16 + ln_2 4
    + c_fc 64 + c_proj 64 + ln_f 4 + lm_head bias 2 = 4310 (+ 8 untied lm_head), notes §3.2."""
    model = M.MarkovModel(
        family="gpt", d=4, seq_len=1024, tied=tied, activation="gelu", layer_norm=True
    )
    params = jax.eval_shape(functools.partial(M.init_params, model=model), jax.random.key(0))
    assert M.num_params(model) == expected
    assert sum(leaf.size for leaf in jax.tree_util.tree_leaves(params)) == expected
    flax_params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), int))["params"]
    chex.assert_trees_all_equal_shapes_and_dtypes(flax_params, params)


def _leaf(tree, name):
    """The leaf of a nested dict at a "/"-separated path, e.g. "block_1/W_1"."""
    return functools.reduce(lambda t, k: t[k], name.split("/"), tree)


def test_model_init_is_the_flax_module_with_init_params_law():
    """model.init (a draw per leaf, Flax's own) and init_params (one draw cut into leaves, the
    training init) make the same tree, shapes and dtypes, with the same law; param_dtype float64
    makes float64 parameters."""
    model = M.MarkovModel(
        family="gpt", d=32, seq_len=256, num_layers=2, layer_norm=True, param_dtype=jnp.float64
    )
    x_BN = jnp.zeros((1, 8), int)
    flax_params = model.init(jax.random.key(0), x_BN)["params"]
    params = M.init_params(jax.random.key(0), model, jnp.float64)
    chex.assert_trees_all_equal_shapes_and_dtypes(flax_params, params)
    chex.assert_type(jax.tree.leaves(flax_params), jnp.float64)
    for name in ("wpe", "block_1/W_1", "block_1/W_O"):
        std = 0.02 / (2 if name.endswith("W_O") else 1)
        assert abs(np.std(_leaf(flax_params, name)) / std - 1) < 0.1
        assert abs(np.std(_leaf(params, name)) / std - 1) < 0.1
    chex.assert_trees_all_equal(flax_params["head_bias"], params["head_bias"])
    chex.assert_trees_all_equal(flax_params["block_0"]["ln_2"], params["block_0"]["ln_2"])


def test_theory_parameter_count_and_names():
    """Tied theory model at paper scale has D - d = 4293 parameters (notes §7 Spec)."""
    assert M.num_params(M.MarkovModel(d=4, seq_len=1024)) == 4293
    assert M.num_params(M.MarkovModel(d=4, seq_len=1024, tied=False)) == 4293 + 4
    shapes = M.param_shapes(M.MarkovModel(d=4, seq_len=8, tied=False, num_heads=2))
    assert shapes["b"] == () and shapes["e"] == (4,) and shapes["a"] == (4,)
    assert shapes["pos"] == (8, 4)
    assert shapes["block_0"] == {
        "W_Q": (4, 4),
        "W_K": (4, 4),
        "W_V": (4, 4),
        "W_O": (4, 4),
        "W_1": (16, 4),
        "W_2": (4, 16),
    }
    multi = M.param_shapes(M.MarkovModel(num_states=5, d=8, seq_len=8, tied=False))
    assert (multi["b"], multi["E"], multi["A"]) == ((5,), (5, 8), (5, 8))
    gpt = M.param_shapes(M.MarkovModel(family="gpt", d=4, seq_len=8, mlp_width=6))
    assert "ln_f" not in gpt and "ln_1" not in gpt["block_0"]  # 'Markov-Simple': no LN
    assert gpt["block_0"]["W_1"] == (6, 4) and gpt["head_bias"] == (2,)


def test_gpt2_init_statistics():
    """N(0, 0.02^2) weights, W_O and W_2 N(0, (0.02 / sqrt(2 * 2 layers))^2), biases 0, gains 1;
    the theory family uses the same rule (notes §3.2, §11.4)."""
    model = M.MarkovModel(
        family="gpt",
        d=64,
        seq_len=1024,
        num_layers=2,
        tied=False,
        layer_norm=True,
        activation="gelu",
    )
    params = M.init_params(jax.random.key(0), model, jnp.float64)
    layers = blocks(params)
    pooled = {
        0.02: [params["wpe"], params["wte"], params["lm_head"]]
        + [b[n] for b in layers for n in ("W_Q", "W_K", "W_V", "W_1")],
        0.01: [b[n] for b in layers for n in ("W_O", "W_2")],
    }
    for std, arrays in pooled.items():
        for array in arrays:  # every leaf alone, and each pool as a whole
            assert array.dtype == jnp.float64
            assert abs(np.std(array) / std - 1) < 4 / math.sqrt(array.size) + 0.01
        values = np.concatenate([np.ravel(a) for a in arrays])
        assert abs(values.std() / std - 1) < 0.02
        assert abs(values.mean()) < 4 * std / math.sqrt(values.size)
    gains = [params["ln_f"]] + [b[n] for b in layers for n in ("ln_1", "ln_2")]
    assert all(np.all(np.asarray(g) == 1.0) for g in gains)
    assert np.all(np.asarray(params["head_bias"]) == 0.0)
    theory = M.init_params(jax.random.key(1), M.MarkovModel(d=64, seq_len=256, num_layers=2))
    assert theory["pos"].dtype == jnp.float32 and float(theory["b"]) == 0.0
    assert abs(np.std(np.asarray(theory["pos"])) / 0.02 - 1) < 0.03
    w_2 = np.concatenate([np.ravel(b["W_2"]) for b in blocks(theory)])
    assert abs(w_2.std() / 0.01 - 1) < 0.03


# ---------------------------------------------------------------- attention and causality

CAUSAL_MODELS = [
    M.MarkovModel(
        family="gpt",
        num_states=3,
        d=8,
        seq_len=100,
        num_layers=2,
        num_heads=2,
        activation="gelu",
        layer_norm=True,
    ),
    M.MarkovModel(family="theory", d=8, seq_len=100, num_layers=2, num_heads=4, tied=False),
]


@pytest.mark.parametrize("model", CAUSAL_MODELS, ids=["gpt-LN-S3", "theory-S2"])
def test_causality(model):
    """Changing the tokens after n leaves every prediction at positions <= n unchanged (and does
    change later ones); N = 100 spans 4 tiles of the block-causal attention, with padding;
    2 layers, several heads."""
    params = random_params(model, 0)
    x_BN = tokens(1, 4, 100, model.num_states)
    base_BNS = np.asarray(M.log_probs(params, x_BN, model))
    for cut in (0, 31, 32, 63, 98):
        changed_BN = x_BN.copy()
        changed_BN[:, cut + 1 :] = (x_BN[:, cut + 1 :] + 1) % model.num_states
        new_BNS = np.asarray(M.log_probs(params, changed_BN, model))
        np.testing.assert_allclose(
            new_BNS[:, : cut + 1], base_BNS[:, : cut + 1], rtol=0, atol=1e-12
        )
        assert np.max(np.abs(new_BNS[:, cut + 1 :] - base_BNS[:, cut + 1 :])) > 1e-3


@pytest.mark.parametrize("length", [1, 7, 40, 300])
def test_block_causal_attention_equals_full_softmax(length):
    """`attention.causal_mix` (lower-triangular tile pairs, normalised after mixing, padded when
    the tile does not divide N) equals the full masked softmax times v (notes §3.1, §6.9)."""
    rng = np.random.default_rng(length)
    q, k, v = (3.0 * rng.normal(size=(2, length, 2, 3)) for _ in range(3))
    expected, _ = full_softmax_mix(q, k, v)
    np.testing.assert_allclose(jax.jit(attention.causal_mix)(q, k, v), expected, rtol=0, atol=1e-12)


def _full_mix(q, k, v):
    N, m = q.shape[1], q.shape[-1]
    scores = jnp.einsum("bnhm,bihm->bhni", q, k) / math.sqrt(m)
    scores = jnp.where(np.tri(N, dtype=bool), scores, -jnp.inf)
    return jnp.einsum("bhni,bihm->bnhm", jax.nn.softmax(scores, axis=-1), v)


@pytest.mark.parametrize("scores_in_cache", [2**19, 1])
def test_block_causal_attention_gradient_equals_full_softmax(scores_in_cache, monkeypatch):
    """The hand-written backward pass of `attention.causal_mix` (N = 300: padded tiles; in one
    go, or looped over single sequences) equals JAX's gradient of the full masked softmax."""
    monkeypatch.setattr(attention, "_SCORES_IN_CACHE", scores_in_cache)
    rng = np.random.default_rng(3)
    q, k, v, g = (3.0 * rng.normal(size=(2, 300, 2, 3)) for _ in range(4))

    def grad(mix):
        return jax.jit(jax.grad(lambda *qkv: jnp.sum(mix(*qkv) * g), argnums=(0, 1, 2)))

    chex.assert_trees_all_close(
        grad(attention.causal_mix)(q, k, v), grad(_full_mix)(q, k, v), rtol=0, atol=1e-11
    )


def test_block_causal_attention_hessian_vector_product():
    """Forward-over-reverse (the HVPs behind Lanczos spectra at N = 1024) goes through the
    custom backward pass and equals the full softmax's, in every argument."""
    rng = np.random.default_rng(4)
    q, k, v, g, dq, dk, dv = (rng.normal(size=(2, 100, 1, 4)) for _ in range(7))

    def loss(mix):
        return lambda *qkv: jnp.sum(jnp.sin(mix(*qkv)) * g)

    def hvp(mix):
        return jax.jvp(jax.grad(loss(mix), argnums=(0, 1, 2)), (q, k, v), (dq, dk, dv))[1]

    expected = hvp(_full_mix)
    assert min(np.max(np.abs(e)) for e in expected) > 1e-2
    chex.assert_trees_all_close(hvp(attention.causal_mix), expected, rtol=0, atol=1e-11)


@pytest.mark.parametrize("d", [8, 40])
def test_layer_norm_and_its_hand_written_derivatives(d):
    """`_layer_norm` (slice sums for short axes, custom backward) is PyTorch's gain-only
    LayerNorm in numpy; its gradient and forward-over-reverse products equal JAX's derivatives
    of the textbook formula."""
    rng = np.random.default_rng(d)
    x, w, dx = (2.0 * rng.normal(size=(3, 5, d)) for _ in range(3))
    gain, dgain = rng.normal(size=d), rng.normal(size=d)
    centred = x - x.mean(-1, keepdims=True)
    expected = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + M.LN_EPS) * gain
    np.testing.assert_allclose(M._layer_norm(x, gain), expected, rtol=0, atol=1e-12)

    def textbook(x, gain):
        centred = x - jnp.mean(x, -1, keepdims=True)
        return centred / jnp.sqrt(jnp.mean(centred**2, -1, keepdims=True) + M.LN_EPS) * gain

    def loss(ln):
        return lambda x, gain: jnp.sum(jnp.sin(ln(x, gain)) * w)

    def grad(ln):
        return jax.grad(loss(ln), argnums=(0, 1))

    def hvp(ln):
        return jax.jvp(grad(ln), (x, gain), (dx, dgain))[1]

    want = (grad(textbook)(x, gain), hvp(textbook))
    assert min(np.max(np.abs(w)) for w in jax.tree.leaves(want)) > 1e-2
    chex.assert_trees_all_close(
        (grad(M._layer_norm)(x, gain), hvp(M._layer_norm)), want, rtol=0, atol=1e-11
    )


@pytest.mark.parametrize("num_states", [2, 5, 40])
def test_log_softmax_by_slices(num_states):
    """`_log_softmax_last` (slice max and sum for short axes) equals jax.nn.log_softmax, value and
    gradient, also for logits of +-300 (the max shift keeps it finite)."""
    rng = np.random.default_rng(num_states)
    logits = rng.normal(size=(3, 7, num_states)) * np.array([1.0, 100.0, 300.0])[:, None, None]
    w = rng.normal(size=logits.shape)
    np.testing.assert_allclose(
        M._log_softmax_last(logits), jax.nn.log_softmax(logits), rtol=0, atol=1e-12
    )

    def loss(f):
        return jax.grad(lambda z: jnp.sum(f(z) * w))(logits)

    want = loss(jax.nn.log_softmax)
    assert np.max(np.abs(want)) > 1e-2
    np.testing.assert_allclose(loss(M._log_softmax_last), want, rtol=0, atol=1e-12)


def test_attention_weights_and_ratio():
    """attention_weights of layer 1 is the causal softmax of its input; attention_ratio of layer 0
    is ||W_O att W_V x|| / ||x + W_O att W_V x||, rebuilt in numpy (theory, 2 heads)."""
    model = M.MarkovModel(d=4, seq_len=50, num_heads=2, num_layers=2)
    params = random_params(model, 3)
    x_BN = tokens(4, 3, 50)
    x_BND = x_BN[..., None] * params["e"] + params["pos"]
    block = params["block_0"]

    def heads(w):
        return (x_BND @ w.T).reshape(3, 50, 2, 2)

    mixed_BNHM, att_BHNN = full_softmax_mix(
        heads(block["W_Q"]), heads(block["W_K"]), heads(block["W_V"])
    )
    attended_BND = mixed_BNHM.reshape(3, 50, 4) @ block["W_O"].T
    ratio_BN = np.linalg.norm(attended_BND, axis=-1) / np.linalg.norm(x_BND + attended_BND, axis=-1)
    np.testing.assert_allclose(M.attention_ratio(params, x_BN, model), ratio_BN, atol=1e-12)
    np.testing.assert_allclose(M.attention_weights(params, x_BN, model), att_BHNN, atol=1e-12)
    att_BHNN = np.asarray(M.attention_weights(params, x_BN, model, layer=1))
    assert att_BHNN.shape == (3, 2, 50, 50)
    assert np.all(att_BHNN[..., ~np.tri(50, dtype=bool)] == 0.0)
    np.testing.assert_allclose(att_BHNN.sum(-1), 1.0, atol=1e-12)
    assert np.min(np.abs(np.diff(att_BHNN[..., 10, :11], axis=-1))) > 0  # not uniform


# ---------------------------------------------------------------- the §3.1 equivalence


class ApplyTest(chex.TestCase):
    """model.apply with and without jit (a bug in a static branch or a traced shape could hide
    behind jit): the §3.1 equivalence and theta_pi's prediction."""

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(True, False)
    def test_gpt_without_layer_norm_is_the_theory_model(self, tied):
        """gpt (no LN, ReLU, S = 2) = theory model with e = wte[1] - wte[0], p_n = wte[0] +
        wpe[n], b = head_bias[1] - head_bias[0] (a = lm_head[1] - lm_head[0] untied), same
        blocks (§3.1)."""
        common = dict(d=4, seq_len=40, num_layers=2, num_heads=2, tied=tied)
        gpt = M.MarkovModel(family="gpt", **common)
        theory = M.MarkovModel(family="theory", **common)
        g = random_params(gpt, 5)
        t = {
            "e": g["wte"][1] - g["wte"][0],
            "pos": g["wte"][0] + g["wpe"],
            "b": g["head_bias"][1] - g["head_bias"][0],
            **{name: g[name] for name in ("block_0", "block_1")},
        }
        if not tied:
            t["a"] = g["lm_head"][1] - g["lm_head"][0]
        chex.assert_trees_all_equal_structs(t, random_params(theory, 0))
        x_BN = tokens(6, 4, 40)

        def apply(model, method=None):
            return self.variant(lambda p, x: model.apply({"params": p}, x, method=method))

        logit_gpt = apply(gpt, M.MarkovModel.logit_binary)(g, x_BN)
        chex.assert_shape(logit_gpt, (4, 40))
        chex.assert_trees_all_close(
            apply(theory, M.MarkovModel.logit_binary)(t, x_BN), logit_gpt, rtol=0, atol=1e-12
        )
        assert np.std(logit_gpt) > 0.1  # a non-trivial, input-dependent logit
        if tied:
            chex.assert_trees_all_close(
                apply(theory)(t, x_BN), apply(gpt)(g, x_BN), rtol=0, atol=1e-12
            )

    @chex.variants(with_jit=True, without_jit=True)
    def test_theta_pi_loss_and_gradient(self):
        """The population loss of theta_pi through model.apply: H(pi), gradient exactly zero in
        every block, finite (notes §6.2, C3)."""
        from landscape.markov import points

        point = points.theta_pi(0.5, 0.8, seq_len=6, pos="random", rest="random")
        loss, grads = self.variant(jax.value_and_grad(point.loss_fn))(point.params)
        assert abs(float(loss) - point.meta["expected_loss"]) < 1e-14
        chex.assert_tree_all_finite(grads)
        chex.assert_trees_all_close(grads, jax.tree.map(jnp.zeros_like, grads), atol=1e-14)


# ---------------------------------------------------------------- theta_pi and theta_star


@pytest.mark.parametrize(
    "model",
    [THEORY, M.MarkovModel(d=4, seq_len=30, num_layers=2, num_heads=2, tied=False)],
    ids=["tied-1-layer", "untied-2-layers-2-heads"],
)
def test_theta_pi_predicts_the_unigram(model):
    """e = a = 0, W_O = W_2 = 0, b = log(p/q), everything else random: f = p/(p+q) at every
    position and input (Thm 2 (ii), notes §6.2, C3)."""
    p, q = 0.5, 0.8
    params = set_blocks(random_params(model, 7), W_O=0.0, W_2=0.0)
    params.update(e=np.zeros(4), b=np.asarray(math.log(p / q)))
    if not model.tied:
        params["a"] = np.zeros(4)
    f_BN = prob_one(params, tokens(8, 5, 30), model)
    np.testing.assert_allclose(f_BN, p / (p + q), rtol=0, atol=1e-12)


def test_multi_state_unigram_point():
    """S = 5: E = 0, W_O = W_2 = 0, b = log pi gives pi at every position (notes §6.8)."""
    model = M.MarkovModel(num_states=5, d=4, seq_len=20)
    pi_S = np.array([0.1, 0.2, 0.3, 0.15, 0.25])
    params = set_blocks(random_params(model, 9), W_O=0.0, W_2=0.0)
    params.update(E=np.zeros((5, 4)), b=np.log(pi_S))
    log_probs = np.asarray(M.log_probs(params, tokens(10, 3, 20, 5), model))
    np.testing.assert_allclose(np.exp(log_probs), np.broadcast_to(pi_S, (3, 20, 5)), atol=1e-12)


def kernel_predictions(params, model, seed=11):
    """(f where x_n = 0, f where x_n = 1) over a random batch."""
    x_BN = tokens(seed, 6, model.seq_len)
    f_BN = prob_one(params, x_BN, model)
    return f_BN[x_BN == 0], f_BN[x_BN == 1]


@pytest.mark.parametrize("model", [THEORY, THEORY_UNTIED], ids=["tied", "untied"])
def test_theta_star_b1(model):
    """p + q <= 1 (B.1, Eq. 7): e = a = 1 sqrt(log((1-p)(1-q)/(pq)) / d), p_n = 0, W_O = W_2 = 0,
    b = log(p/(1-p)), rest random, gives f = p at x_n = 0 and 1 - q at x_n = 1 (C11)."""
    p, q, d = 0.2, 0.3, 4
    e_D = np.full(d, math.sqrt(math.log((1 - p) * (1 - q) / (p * q)) / d))
    assert abs(e_D[0] - 0.7473) < 1e-4  # notes §6.1 example
    params = set_blocks(random_params(model, 12), W_O=0.0, W_2=0.0)
    params.update(e=e_D, pos=np.zeros((30, d)), b=np.asarray(math.log(p / (1 - p))))
    if not model.tied:
        params["a"] = e_D
    f_zero, f_one = kernel_predictions(params, model)
    np.testing.assert_allclose(f_zero, p, atol=1e-12)
    np.testing.assert_allclose(f_one, 1 - q, atol=1e-12)


def theta_star_b2(p, q, d, r, w, seed=13):
    """B.2 (Eq. 10): e = a = 1, p_n = -1/2, W_O = 0, W_1 = w 1_r 1_d^T, W_2 = -W_1^T,
    b = log(p/(1-p)) + d/2, everything else random."""
    model = THEORY if r == 4 * d else M.MarkovModel(d=d, seq_len=30, mlp_width=r)
    params = set_blocks(random_params(model, seed), W_O=0.0, W_1=w, W_2=-w)
    params.update(
        e=np.ones(d), pos=np.full((30, d), -0.5), b=np.asarray(math.log(p / (1 - p)) + d / 2)
    )
    return kernel_predictions(params, model)


@pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.9, 0.6)])
def test_theta_star_b2_needs_the_dr_correction(p, q):
    """w = sqrt(2/(d r) (1 - log((1-p)(1-q)/(pq)) / d)) gives the kernel for r = d and r = 4 d;
    the paper's sqrt(2/d^2 (...)) is right only for r = d (notes §6.1, §6.9, C11, C12)."""
    d = 4
    bracket = 1 - math.log((1 - p) * (1 - q) / (p * q)) / d
    if (p, q) == (0.5, 0.8):  # notes §6.1 example
        assert abs(math.sqrt(2 / (d * d) * bracket) - 0.4103) < 1e-4
        assert abs(math.sqrt(2 / (d * 4 * d) * bracket) - 0.2051) < 1e-4
    for r in (d, 4 * d):
        f_zero, f_one = theta_star_b2(p, q, d, r, math.sqrt(2 / (d * r) * bracket))
        np.testing.assert_allclose(f_zero, p, atol=1e-12)
        np.testing.assert_allclose(f_one, 1 - q, atol=1e-12)
    f_zero, f_one = theta_star_b2(p, q, d, 4 * d, math.sqrt(2 / d**2 * bracket))
    np.testing.assert_allclose(f_zero, p, atol=1e-12)  # x_n = 0: ReLU is off
    assert np.min(np.abs(f_one - (1 - q))) > 0.1  # the erratum (C12)


# ---------------------------------------------------------------- float64, vmap, Hessian


def test_population_hessian_at_theta_pi_tied():
    """float64 Hessian through the whole model (masked softmax included): exact population loss
    over all 2^5 sequences at the canonical theta_pi (p_n = 0, rest 0), (p, q) = (0.5, 0.8):
    the (b, e) block is pi0 pi1 diag(1, 2(p+q-1) I) = diag(0.236686, 0.142012 I), every other
    entry 0 (notes §6.5, C4)."""
    p, q, N, d = 0.5, 0.8, 5, 2
    model = M.MarkovModel(d=d, seq_len=N, mlp_width=3)
    params = jax.tree_util.tree_map(np.zeros, M.param_shapes(model), is_leaf=M._is_shape)
    params["b"] = np.asarray(math.log(p / q))
    x_XN = np.array(np.meshgrid(*[[0, 1]] * N, indexing="ij")).reshape(N, -1).T
    kernel = np.array([[1 - p, p], [q, 1 - q]])
    weight_X = np.where(x_XN[:, 0] == 1, p / (p + q), q / (p + q))
    weight_X = weight_X * np.prod(kernel[x_XN[:, :-1], x_XN[:, 1:]], axis=1)
    target_XN = p + x_XN * (1 - p - q)
    flat, unravel = ravel_pytree(params)

    def loss(flat):
        log_probs_XNS = M.log_probs(unravel(flat), x_XN, model)
        ce_XN = -(target_XN * log_probs_XNS[..., 1] + (1 - target_XN) * log_probs_XNS[..., 0])
        return jnp.sum(weight_X[:, None] * ce_XN) / N

    hessian = np.asarray(jax.jit(jax.hessian(loss))(flat))
    chex.assert_type(hessian, np.float64)
    chex.assert_shape(hessian, (flat.size, flat.size))
    chex.assert_tree_all_finite(hessian)
    names = ["b", "block_0", "e", "pos"]  # ravel_pytree: sorted keys
    sizes = [1, M.num_params(model) - 1 - d - N * d, d, N * d]
    start = dict(zip(names, np.cumsum([0] + sizes[:-1]), strict=True))
    alpha = np.r_[start["b"], start["e"] : start["e"] + d]
    pi0pi1 = p * q / (p + q) ** 2
    assert abs(pi0pi1 - 0.236686) < 1e-6
    expected = pi0pi1 * np.diag([1.0] + [2 * (p + q - 1)] * d)
    np.testing.assert_allclose(hessian[np.ix_(alpha, alpha)], expected, rtol=0, atol=1e-14)
    rest = np.ones(flat.size, bool)
    rest[alpha] = False
    assert np.max(np.abs(hessian[rest])) < 1e-14


def test_vmap_over_runs_matches_single_runs():
    """Runs vmapped over (params, tokens) equal single runs (float32, the training dtype)."""
    model = M.MarkovModel(family="gpt", d=4, seq_len=16, activation="gelu", layer_norm=True)
    runs = [random_params(model, seed) for seed in range(3)]
    params = jax.tree_util.tree_map(lambda *a: np.stack(a).astype(np.float32), *runs)
    x_RBN = tokens(3, 6, 16).reshape(3, 2, 16)
    batched = jax.vmap(M.log_probs, in_axes=(0, 0, None))(params, x_RBN, model)
    singles = [
        M.log_probs(jax.tree_util.tree_map(lambda a, run=run: a[run], params), x_RBN[run], model)
        for run in range(3)
    ]
    chex.assert_type(singles, jnp.float32)
    chex.assert_trees_all_close(list(batched), singles, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(family="bert"), "family"),
        (dict(num_states=1), "num_states"),
        (dict(d=0), "d = 0"),
        (dict(seq_len=0), "seq_len"),
        (dict(num_layers=0), "num_layers"),
        (dict(num_heads=0), "num_heads"),
        (dict(family="gpt", d=4, num_heads=3), "num_heads"),
        (dict(d=6, num_heads=4), "num_heads"),
        (dict(mlp_width=0), "mlp_width"),
        (dict(activation="tanh"), "activation"),
        (dict(family="theory", layer_norm=True), "layer_norm"),
    ],
)
def test_bad_model_sentences(kwargs, field):
    with pytest.raises(ValueError, match=field) as error:
        M.MarkovModel(**kwargs)
    message = str(error.value)
    assert message.startswith(field.split()[0]) and message.endswith(".") and "\n" not in message


def test_bad_call_sentences():
    """Errors raised while tracing (shapes, layer, S) name the argument; eval_shape compiles
    nothing."""
    model = M.MarkovModel(d=4, seq_len=8)
    params = jax.tree_util.tree_map(np.zeros, M.param_shapes(model), is_leaf=M._is_shape)

    def trace(fn, x, **kw):
        return jax.eval_shape(functools.partial(fn, model=model, **kw), params, x)

    with pytest.raises(ValueError, match="at most seq_len = 8"):
        trace(M.log_probs, tokens(0, 2, 9))
    with pytest.raises(ValueError, match="expected"):
        trace(M.log_probs, np.zeros(8, int))
    with pytest.raises(ValueError, match="layer = 1"):
        trace(M.attention_weights, tokens(0, 2, 8), layer=1)
    three = M.MarkovModel(num_states=3, d=4, seq_len=8)
    with pytest.raises(ValueError, match="num_states = 3"):
        jax.eval_shape(
            functools.partial(M.logit_binary, model=three),
            random_params(three, 0),
            tokens(0, 2, 8, 3),
        )
