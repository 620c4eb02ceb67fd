"""Recall model: closed forms vs token level (notes/assoc_recall.md §2-§4.2, checks C1-C3, C7)."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.engine import precision
from landscape.recall import model as M
from landscape.recall import task

RM = M.RecallModel


def apply_loss_tokens(params, tokens, target, model):
    return model.apply({"params": params}, tokens, target, method=RM.loss_tokens)


def apply_loss_collisions(params, y, model):
    return model.apply({"params": params}, y, method=RM.loss_collisions)


def apply_forward(params, tokens, model):
    return model.apply({"params": params}, tokens)


def apply_population_loss(params, model):
    return model.apply({"params": params}, method=RM.population_loss)


loss_tokens = jax.jit(apply_loss_tokens, static_argnums=3)
forward = jax.jit(apply_forward, static_argnums=2)


@functools.cache
def sample(k, n_r, batch, shuffle, seed=0):
    """Shared samples: the sampler compiles once per shape, so tests reuse two settings."""
    tokens, target = task.sample_tokens(jax.random.key(seed), k, n_r, batch, shuffle)
    return jnp.asarray(np.asarray(tokens)), jnp.asarray(np.asarray(target))


K4 = (4, 4, 2048, True)  # k = |R| = 4, shuffled blocks
K3 = (3, 3, 64, False)  # k = |R| = 3, lexicographic


def head(batch, n):
    return tuple(jnp.asarray(np.asarray(a)[:n]) for a in batch)


def per_sample(fn, params, model):
    """fn(params, batch..., model) evaluated on each sample alone, as a (B,) array."""
    return jax.jit(jax.vmap(lambda *row: fn(params, *(r[None] for r in row), model)))


def random_params(model, seed, focus=0.0):
    """beta ~ 1.2 + 0.5 N(0, 1), w ~ 1.5 N(0, 1) + focus e_h (head h towards offset h, windowed)."""
    rng = np.random.default_rng(seed)
    beta = 1.2 + 0.5 * rng.normal(size=model.num_heads)
    w = 1.5 * rng.normal(size=(model.num_heads, model.window_len))
    w += focus * np.eye(model.num_heads, model.window_len)
    return M.init_params(model, jnp.asarray(beta), jnp.asarray(w))


class TestModelVariants(chex.TestCase):
    """Closed forms and token-level losses, with and without jit (chex variants)."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_C1_closed_form_equals_token_level_average_over_all_queries(self):
        """notes §3 box, C1: mean_q A (1 - s_q) from the token model = A (1 - softmax(S)_q), 1e-12.

        s does not depend on f, so s_q is read off as p(r_0) for f = 1{pi = q} (r_0 at q, r_1
        elsewhere); the exact E_f[l | q] is then 1 - s_q - (1 - s_q)/|R|. gamma and block order are
        irrelevant (notes §1, §2.2).
        """
        k, n_r = 4, 4
        base = M.RecallModel(k, n_r)
        params = random_params(base, 0, focus=2.0)
        closed = float(self.variant(apply_population_loss, static_argnums=1)(params, base))
        n = math.factorial(k)
        responses = jnp.asarray(1 - np.eye(n, dtype=int))  # row q: f = r_0 at q, r_1 elsewhere
        rng = np.random.default_rng(1)
        orders = [None, jnp.asarray(np.stack([rng.permutation(n) for _ in range(n)]))]
        for gamma in (0.0, 0.7):
            model = M.RecallModel(k, n_r, gamma=gamma)
            for order in orders:
                tokens = task.build_tokens(k, responses, jnp.arange(n), order)
                s_q = np.asarray(
                    self.variant(apply_forward, static_argnums=2)(params, tokens, model)
                )[:, k]
                token_level = np.mean(1 - s_q - (1 - s_q) / n_r)
                assert abs(token_level - closed) < 1e-12, (gamma, token_level, closed)
        assert 0.05 < closed < 0.65  # well below the plateau L_0


def test_C1_monte_carlo_token_loss():
    """C1: the token-level DP mean over N fresh sequences is within ~4 x 0.4/sqrt(N)."""
    model = M.RecallModel(4, 4)
    params = random_params(model, 2)
    tokens, target = sample(*K4, seed=5)
    num = len(target)
    mc = float(loss_tokens(params, tokens, target, model))
    assert abs(mc - float(apply_population_loss(params, model))) < 4 * 0.4 / np.sqrt(num)


@pytest.mark.parametrize("loss", ["dp", "ce"])
@pytest.mark.parametrize("num_heads", [3, 4])
def test_fast_path_equals_token_level_sample_by_sample(loss, num_heads):
    """notes §1: the loss depends on a sample only through y = collisions_of(tokens)."""
    model = M.RecallModel(4, 4, num_heads=num_heads, loss=loss, gamma=0.3, scale=2.0)
    params = random_params(model, 3)
    tokens, target = sample(*K4, seed=6)
    y = task.collisions_of(tokens, 4)
    from_tokens = per_sample(apply_loss_tokens, params, model)(tokens, target)
    from_y = per_sample(apply_loss_collisions, params, model)(y)
    chex.assert_shape([from_tokens, from_y], [(len(target),)] * 2)
    chex.assert_trees_all_close(from_y, from_tokens, rtol=0, atol=1e-12)
    assert float(jnp.std(from_y)) > 1e-3
    chex.assert_trees_all_close(M.loss_collisions(params, y, model), from_tokens.mean(), atol=1e-12)


def closed_form_gradient(params, model):
    """notes §3: G_{h,i}, dL/dbeta_h = 2c beta_h sum_i a G, dL/dw = c beta^2 a (G - sum_j a G)."""
    beta, w = np.asarray(params["beta"]), np.asarray(params["w"])
    c, A = model.scale, model.response_weight
    a = np.exp(w - w.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    match = task.match_tensor(model.k, model.num_heads)
    S = np.einsum("hi,phi->p", c * beta[:, None] ** 2 * a, match)
    P = np.exp(S - S.max())
    P /= P.sum()
    G = -A * P[0] * (match[0] - np.einsum("p,phi->hi", P, match))
    d_beta = 2 * c * beta * np.sum(a * G, axis=1)
    d_w = c * beta[:, None] ** 2 * a * (G - np.sum(a * G, axis=1, keepdims=True))
    return {"beta": d_beta, "w": d_w}


@pytest.mark.parametrize("num_heads", [3, 4])
def test_C2_population_gradient(num_heads):
    """C2: autodiff vs central differences (1e-8) and vs the closed form of notes §3 (1e-12)."""
    model = M.RecallModel(4, 4, num_heads=num_heads, scale=1.3)
    params = random_params(model, 0, focus=2.0)
    grad = jax.grad(apply_population_loss)(params, model)
    exact = closed_form_gradient(params, model)
    chex.assert_trees_all_equal_shapes_and_dtypes(grad, params)
    chex.assert_trees_all_close(grad, exact, rtol=0, atol=1e-12)
    loss = jax.jit(apply_population_loss, static_argnums=1)
    step = 1e-5
    for name in ("beta", "w"):
        flat = np.asarray(params[name]).ravel()
        diffs = []
        for j in range(flat.size):
            bumped = [
                dict(
                    params,
                    **{
                        name: jnp.asarray(flat + s * step * np.eye(flat.size)[j]).reshape(
                            params[name].shape
                        )
                    },
                )
                for s in (1, -1)
            ]
            diffs.append((loss(bumped[0], model) - loss(bumped[1], model)) / (2 * step))
        np.testing.assert_allclose(np.ravel(grad[name]), diffs, rtol=0, atol=1e-8)
    assert np.abs(exact["w"]).max() > 1e-2 and np.abs(exact["beta"]).max() > 1e-2


@pytest.mark.parametrize("loss", ["dp", "ce"])
@pytest.mark.parametrize(
    "variant",
    [
        dict(),
        dict(window=False, exact_query=False, response_only=False),
        dict(window=False, exact_query=False, response_only=False, qk="full", num_heads=2),
    ],
)
def test_C3_sum_law_per_sample(loss, variant):
    """notes §4.1.1: 1^T dl/dw^h = 0 per sample, any loss, windowed or windowless."""
    k = 3
    model = M.RecallModel(k, 3, loss=loss, **variant)
    params = random_params(model, 5)
    if model.qk == "full":
        params["qk"] = jnp.asarray(np.random.default_rng(6).normal(size=params["qk"].shape))
    tokens, target = head(sample(*K3, seed=7), 16)
    grads = jax.jit(
        jax.vmap(
            jax.grad(lambda p, t, y: apply_loss_tokens(p, t[None], y[None], model)),
            in_axes=(None, 0, 0),
        )
    )(params, tokens, target)
    chex.assert_tree_all_finite(grads)
    g_BHW = np.asarray(grads["w"])
    chex.assert_shape(g_BHW, (16, model.num_heads, model.window_len))
    assert np.abs(g_BHW).max() > 1e-3
    np.testing.assert_allclose(g_BHW.sum(axis=2), 0.0, rtol=0, atol=1e-13)


def hand_built(model, c, super_diagonal=True):
    """notes §2.1 / App. A.2: w^i = c e_i (offset i) and Q^T K = c (B ⊗ I~_k)."""
    offsets = np.arange(1, model.num_heads + 1)
    w = np.zeros((model.num_heads, model.window_len))
    w[np.arange(model.num_heads), offsets - 1 if model.window else offsets] = c
    scaled = M.RecallModel(model.k, model.num_responses, model.num_heads, scale=c)
    qk = M.coupling_matrix(scaled, jnp.ones(model.num_heads), super_diagonal)
    return M.init_params(model, jnp.ones(model.num_heads), jnp.asarray(w), qk)


def test_hand_built_solution_of_the_original_model():
    """notes §2.1 erratum: super-diagonal B gives DP ~ 2e-4 at c = 10; sub-diagonal ~ 1.0.

    'Original' = every simplification off: causal relative w in R^l with offset 0, the skip
    R^0 = X concatenated, learned query R^g_{l-1}, softmax over all positions and p = X^T s.
    """
    original = M.RecallModel(4, 4, window=False, exact_query=False, response_only=False, qk="full")
    tokens, target = sample(4, 4, 256, False, seed=8)  # lexicographic, as in §1
    solved = float(loss_tokens(hand_built(original, 10.0), tokens, target, original))
    wrong = float(loss_tokens(hand_built(original, 10.0, False), tokens, target, original))
    assert 1.5e-4 < solved < 3e-4, solved  # measured 2.00e-4
    assert 0.99 < wrong <= 1.0, wrong
    p = np.asarray(forward(hand_built(original, 10.0), tokens, original))
    np.testing.assert_array_equal(p.argmax(axis=1), target)


def test_simplified_switches_reduce_to_the_simplified_model():
    """A0/A2 off with a saturated layer 1, and qk = 'full' at its default (= B(beta^2) ⊗ I~)."""
    k, n_r = 3, 3
    tokens, target = sample(*K3, seed=9)
    simplified = M.RecallModel(k, n_r, gamma=0.2, scale=1.7)
    params = random_params(simplified, 7)
    reference = np.asarray(forward(params, tokens, simplified))
    assert np.all(reference[:, :k] == 0) and np.allclose(reference.sum(axis=1), 1.0)
    full = M.RecallModel(k, n_r, gamma=0.2, scale=1.7, qk="full")
    full_params = M.init_params(full, params["beta"], params["w"])
    np.testing.assert_allclose(forward(full_params, tokens, full), reference, atol=1e-13)
    # Windowless with offsets outside 1..k at logit -1e3: exp underflows to 0, so the same model.
    windowless = M.RecallModel(k, n_r, gamma=0.2, scale=1.7, window=False)
    w_far = np.full((k, windowless.window_len), -1e3)
    w_far[:, 1 : k + 1] = params["w"]
    far_params = M.init_params(windowless, params["beta"], jnp.asarray(w_far))
    np.testing.assert_allclose(forward(far_params, tokens, windowless), reference, atol=1e-13)
    # Learned query: with w^h = 1e3 e_h, R^h_{l-1} = e_{x_{l-1-h}}, the exact query (A2).
    focused = M.init_params(simplified, params["beta"], 1e3 * jnp.eye(k))
    learned = M.RecallModel(k, n_r, gamma=0.2, scale=1.7, exact_query=False)
    np.testing.assert_allclose(
        forward(focused, tokens, learned), forward(focused, tokens, simplified), atol=1e-13
    )


def test_plateau_levels():
    """notes §3 / C7: L_0 = A (1 - 1/k!) = 0.71875 at w = beta = 0; L_m with m heads saturated."""
    model = M.RecallModel(4, 4)
    zero = M.init_params(model, jnp.zeros(4))
    assert abs(float(apply_population_loss(zero, model)) - 0.71875) < 1e-15
    tokens, target = sample(*K4, seed=10)
    mc = float(loss_tokens(zero, tokens, target, model))
    assert abs(mc - 0.71875) < 4 * 0.4 / np.sqrt(len(target))
    expected = [0.71875, 0.625, 0.375, 0.0]
    for m in range(4):
        beta = jnp.where(jnp.arange(4) < m, 8.0, 0.0)  # c beta^2 = 64 >> 1
        params = M.init_params(model, beta, 60.0 * jnp.eye(4))
        assert abs(float(apply_population_loss(params, model)) - expected[m]) < 1e-12


def test_jit_vmap_and_layer1_attention():
    model = M.RecallModel(3, 2, num_heads=2)
    params = random_params(model, 8)
    a = M.layer1_attention(params, model)
    assert a.shape == (2, 3) and np.allclose(a.sum(axis=1), 1.0)
    y = task.collisions_of(sample(*K3)[0], 3)
    fast = jax.jit(M.loss_collisions, static_argnums=2)
    assert np.isfinite(float(fast(params, y, model)))
    batched = jax.vmap(lambda b: M.population_loss(dict(params, beta=b), model))
    assert batched(jnp.ones((5, 2))).shape == (5,)
    assert params["w"].dtype == jnp.float64


@pytest.mark.parametrize(
    "fields, name",
    [
        (dict(k=3, num_responses=3, num_heads=1), "num_heads"),
        (dict(k=3, num_responses=3, num_heads=4), "num_heads"),
        (dict(k=1, num_responses=3), "k"),
        (dict(k=3, num_responses=1), "num_responses"),
        (dict(k=3, num_responses=3, loss="mse"), "loss"),
        (dict(k=3, num_responses=3, qk="qk"), "qk"),
    ],
)
def test_bad_model_fields(fields, name):
    with pytest.raises(ValueError, match=f"^{name} = "):
        M.RecallModel(**fields)


def test_closed_forms_refuse_other_models():
    params = M.init_params(M.RecallModel(3, 3), jnp.ones(3))
    with pytest.raises(ValueError, match="no closed form"):
        M.population_loss(params, M.RecallModel(3, 3, loss="ce"))
    y = jnp.ones((4, 6))
    for variant in (dict(window=False), dict(exact_query=False), dict(response_only=False)):
        with pytest.raises(ValueError, match="simplified model"):
            M.loss_collisions(params, y, M.RecallModel(3, 3, **variant))


def test_flax_init_names_shapes_and_dtypes():
    """RecallModel.init: {"params": {"w", "beta"}} (or {"w", "qk"}), the Hessian block names of
    init_params, in param_dtype, at the plateau w = beta = 0 (L_0)."""
    for fields in (
        dict(),
        dict(window=False, exact_query=False, response_only=False, qk="full", num_heads=2),
    ):
        for dtype in (jnp.float32, jnp.float64):
            model = RM(3, 3, param_dtype=dtype, **fields)
            tokens = jnp.zeros((1, model.seq_len), jnp.int32)
            variables = model.init(jax.random.key(0), tokens)
            assert list(variables) == ["params"]
            built = M.init_params(model, jnp.zeros(model.num_heads, dtype))
            if model.qk == "full":
                built["qk"] = built["qk"].astype(dtype)
            chex.assert_trees_all_equal_shapes_and_dtypes(variables["params"], built)
            chex.assert_trees_all_equal(variables["params"], built)
    params = RM(4, 4).init(jax.random.key(0), method=RM.population_loss)["params"]
    assert abs(float(apply_population_loss(params, RM(4, 4))) - 0.71875) < 1e-7


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("loss", ["dp", "ce"])
def test_half_precision_autocast_is_float32_within_rounding(half, loss):
    """model.dtype = half: on a fixed batch the token loss, its gradients and the collision loss
    agree with float32 within half-precision rounding; parameters and gradients stay float32.

    Under autocast the layer-1 attention a (probabilities <= 1), the one-hots (exact) and
    beta^2 are rounded to half (relative eps/2 each, eps = 2^-7 for bfloat16 and 2^-10 for
    float16) and the layer-2 logit sum_h c beta_h^2 <a^h, e> accumulates H = 3 such terms in
    half: the logits move by ~ 2 eps |logit| with |logit| <= c sum_h beta_h^2 ~ 5 here, i.e. by
    ~ 10 eps. DP and CE are 1-Lipschitz in max-norm of the logits (the softmax in float32), so we
    allow 16 eps absolute on the loss and the gradients (scaled by their own size)."""
    model = RM(3, 3, loss=loss, gamma=0.3, scale=1.3)
    params = jax.tree.map(lambda x: x.astype(jnp.float32), random_params(model, 3))
    tokens, target = sample(*K3, seed=7)
    y = task.collisions_of(tokens, 3)
    prec = precision.of("float32", half)
    eps = float(jnp.finfo(prec.dtype).eps)
    mixed_model = model.clone(dtype=prec.dtype, param_dtype=prec.param_dtype)

    def both(p, m):
        return jax.value_and_grad(apply_loss_tokens)(p, tokens, target, m), apply_loss_collisions(
            p, y.astype(jnp.float32), m
        )

    reference = jax.jit(both, static_argnums=1)(params, model)
    mixed = jax.jit(both, static_argnums=1)(params, mixed_model)
    chex.assert_tree_all_finite(mixed)
    chex.assert_trees_all_equal_shapes_and_dtypes(mixed, reference)  # float32 throughout
    (ref_loss, ref_grad), ref_y = reference
    (loss_h, grad_h), y_h = mixed
    chex.assert_trees_all_close((loss_h, y_h), (ref_loss, ref_y), rtol=0, atol=16 * eps)
    scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(ref_grad))
    chex.assert_trees_all_close(grad_h, ref_grad, rtol=0, atol=16 * eps * scale)
    assert float(jnp.abs(loss_h - ref_loss)) > 0  # it did run in half
    variables = mixed_model.init(jax.random.key(0), tokens[:1])
    chex.assert_trees_all_equal_dtypes(variables["params"], params)  # param_dtype
    # the closed-form population loss stays exact (float32) under autocast
    pop = apply_population_loss(params, mixed_model.clone(loss="dp"))
    assert pop.dtype == jnp.float32
    chex.assert_trees_all_close(
        pop, apply_population_loss(params, model.clone(loss="dp")), rtol=1e-6
    )
