"""n-gram models (notes/ngrams.md §3): parameter counts, NumPy loop references, init, attention.

The references below are written from the notes' formulas with per-token Python loops and share
no code with landscape/ngrams/model.py: App. B.1 for "simplified", the §3.3 update for
"transformer", Def. 2.2 for "disentangled" (conftest enables float64).
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from landscape import point
from landscape.ngrams import estimators as est
from landscape.ngrams import model as M
from landscape.ngrams import task

# --------------------------------------------------------------------------------------------------
# NumPy references (per-token loops, notes §3)
# --------------------------------------------------------------------------------------------------


def _softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def _onehot(i, n):
    v = np.zeros(n)
    v[i] = 1.0
    return v


def _layers(p):
    """The layer dicts of a general model's params, in order ("layers/0", "layers/1", ...)."""
    return [p["layers"][str(i)] for i in range(len(p["layers"]))]


def ref_simplified(p, x_BT, model):
    """App. B.1: r1[i] = [r0[i], sum_{j<=i} a^(1,h)_(j,i) V1^h r0[j] ...],
    a2(i, T) = softmax_i <K2 r1[i], Q2 r1[T]>, p = sum_i a2(i, T) e_{x_i}."""
    S, T, m = model.num_states, model.seq_len, model.num_heads
    A1 = np.asarray(p["A1"])
    V1 = np.asarray(p["V1"]) if "V1" in p else np.stack([np.eye(S)] * m)
    Q2, K2 = np.asarray(p["Q2"]), np.asarray(p["K2"])
    out = []
    for seq in np.asarray(x_BT):
        r0 = [_onehot(s, S) for s in seq]
        r1 = []
        for i in range(T):
            blocks = [r0[i]]
            for h in range(m):
                a = _softmax(A1[h, i, : i + 1])  # a^(1,h)_(j,i), j <= i
                blocks.append(sum(a[j] * (V1[h] @ r0[j]) for j in range(i + 1)))
            r1.append(np.concatenate(blocks))
        t = T - 1
        a2 = _softmax([(K2 @ r1[i]) @ (Q2 @ r1[t]) for i in range(t + 1)])
        out.append(sum(a2[i] * r0[i] for i in range(t + 1)))
    return np.array(out)


def _r0_general(p, seq, model):
    S, T = model.num_states, model.seq_len
    if model.embedding == "learned":
        Wte, Wpe = np.asarray(p["embed"]["token"]), np.asarray(p["embed"]["position"])
        return [Wte[seq[t]] + Wpe[t] for t in range(T)]
    return [np.concatenate([_onehot(seq[t], S), _onehot(t, T)]) for t in range(T)]


def _mu_lin(x, W, b):
    n_in, n_out = W.shape
    return x @ W * math.sqrt(n_out / n_in) + b * math.sqrt(n_out)


def ref_transformer(p, x_BT, model):
    """§3.3: Delta[t] = sum_h sum_{j<=t} a_h(t, j) H[j] V_h with a_h(t, .) = softmax_j
    (H[t] Q_h) . (H[j] K_h); Delta <- MLP(Delta); H <- H + Delta; p = softmax(H[T] W)."""
    T = model.seq_len
    out = []
    for seq in np.asarray(x_BT):
        H = _r0_general(p, seq, model)
        for layer in _layers(p):
            Q, K, V = (np.asarray(layer[k]) for k in "QKV")
            new = []
            for t in range(T):
                delta = np.zeros_like(H[t])
                for h in range(Q.shape[0]):
                    a = _softmax([(H[t] @ Q[h]) @ (H[j] @ K[h]) for j in range(t + 1)])
                    delta = delta + sum(a[j] * (H[j] @ V[h]) for j in range(t + 1))
                if "mlp" in layer:
                    mp = {k: np.asarray(v) for k, v in layer["mlp"].items()}
                    hidden = np.maximum(_mu_lin(delta, mp["W_in"], mp["b_in"]), 0.0)
                    delta = _mu_lin(hidden, mp["W_out"], mp["b_out"])
                new.append(H[t] + delta)
            H = new
        out.append(_softmax(H[T - 1] @ np.asarray(p["readout"])))
    return np.array(out)


def ref_disentangled(p, x_BT, model):
    """Def. 2.2 literally: Q_def = Q^T, K_def = K^T, V_def = V^T, U = readout^T;
    r_l[t] = [r_{l-1}[t], sum_{j<=t} a_h(t, j) V_def r_{l-1}[j] for each head],
    a_h(t, .) = softmax_j (Q_def r[t]) . (K_def r[j]); p = softmax(U r_L[T])."""
    T = model.seq_len
    out = []
    for seq in np.asarray(x_BT):
        r = _r0_general(p, seq, model)
        for layer in _layers(p):
            Qd = [q.T for q in np.asarray(layer["Q"])]
            Kd = [k.T for k in np.asarray(layer["K"])]
            Vd = [v.T for v in np.asarray(layer["V"])]
            new = []
            for t in range(T):
                blocks = [r[t]]
                for h in range(len(Qd)):
                    a = _softmax([(Qd[h] @ r[t]) @ (Kd[h] @ r[j]) for j in range(t + 1)])
                    blocks.append(sum(a[j] * (Vd[h] @ r[j]) for j in range(t + 1)))
                new.append(np.concatenate(blocks))
            r = new
        U = np.asarray(p["readout"]).T
        out.append(_softmax(U @ r[T - 1]))
    return np.array(out)


REFERENCES = {
    "simplified": ref_simplified,
    "transformer": ref_transformer,
    "disentangled": ref_disentangled,
}


def random_params(model, seed):
    """Every leaf random (zero-initialised blocks included), O(1) attention logits."""
    rng = np.random.default_rng(seed)
    shapes = M.param_shapes(model)

    def draw(path, shape):
        name = path[-1].key
        if name == "A1":
            std = 2.0
        elif len(shape) == 1:  # biases: b sqrt(d) ~ 0.3
            std = 0.3 / math.sqrt(shape[0])
        elif name == "readout":
            std = 1.0 / math.sqrt(shape[0])
        else:
            std = 1.0 / math.sqrt(shape[-2])
        return jnp.asarray(std * rng.standard_normal(shape))

    return jax.tree_util.tree_map_with_path(draw, shapes, is_leaf=M._is_shape)


PROBS = jax.jit(M.probs, static_argnums=2)  # one compile per model (eager compiles per op)
STREAM = jax.jit(M.residual_stream, static_argnums=(2, 3))
ATTENTION = jax.jit(M.attention_maps, static_argnums=2)


@pytest.fixture(scope="module")
def fig4_data():
    """512 sequences of the Fig 4 task (S = 3, n = 3, T = 32, alpha = 1): (x_BT, target_BS). One
    sampler compile for the whole file; every T = 32 test uses these shapes (jit cache hits)."""
    x_BT, target_BS, _ = task.sample(jax.random.key(5), 3, 3, 32, 1.0, 512, dtype=jnp.float64)
    return x_BT, target_BS


def _tokens(S, T, B, seed):
    return jnp.asarray(np.random.default_rng(seed).integers(0, S, size=(B, T)), dtype=jnp.int32)


# --------------------------------------------------------------------------------------------------
# Parameter layout and counts
# --------------------------------------------------------------------------------------------------


def test_param_counts_by_hand():
    # simplified S = 5, T = 32, m = 2, d_h = 15: A1 2 32^2 + V1 2 5^2 + Q2, K2 2 (15 x 15) = 2548
    assert M.num_params(M.NgramModel()) == 2548
    # transformer one-hot S = 3, T = 32: d = 35, heads (2, 1) = 3 heads, each Q, K, V 35 x 35:
    # 3 x 3 x 1225 = 11025, readout W 35 x 3 = 105: 11130
    onehot = M.NgramModel(kind="transformer", num_states=3, seq_len=32)
    assert M.num_params(onehot) == 11130
    # learned: + W_te 3 x 35 + W_pe 32 x 35 = 105 + 1120: 12355
    learned = M.NgramModel(kind="transformer", num_states=3, seq_len=32, embedding="learned")
    assert M.num_params(learned) == 12355
    # MLP: + 2 layers x (2 x 35^2 + 2 x 35) = 2 x 2520 = 5040: 16170
    mlp = M.NgramModel(kind="transformer", num_states=3, seq_len=32, mlp=True)
    assert M.num_params(mlp) == 16170
    # disentangled S = 3, T = 32, heads (2, 1): d0 = 35, d1 = 3 x 35 = 105, d2 = 2 x 105 = 210;
    # layer 1: 2 heads x 3 x 35^2 = 7350, layer 2: 3 x 105^2 = 33075, readout 210 x 3 = 630: 41055
    dis = M.NgramModel(kind="disentangled", num_states=3, seq_len=32)
    assert dis.residual_widths == (35, 105, 210) and dis.width == 210
    assert M.num_params(dis) == 41055


def test_layout_names_and_init_statistics():
    model = M.NgramModel(
        kind="transformer", num_states=3, seq_len=32, mlp=True, embedding="learned", init_scale=2.0
    )
    params = M.init_params(jax.random.key(0), model, jnp.float64)
    names = {name: shape for name, _, shape in point.param_names(params)}
    assert names == {
        "embed/position": (32, 35),
        "embed/token": (3, 35),
        "layers/0/K": (2, 35, 35),
        "layers/0/Q": (2, 35, 35),
        "layers/0/V": (2, 35, 35),
        "layers/0/mlp/W_in": (35, 35),
        "layers/0/mlp/W_out": (35, 35),
        "layers/0/mlp/b_in": (35,),
        "layers/0/mlp/b_out": (35,),
        "layers/1/K": (1, 35, 35),
        "layers/1/Q": (1, 35, 35),
        "layers/1/V": (1, 35, 35),
        "layers/1/mlp/W_in": (35, 35),
        "layers/1/mlp/W_out": (35, 35),
        "layers/1/mlp/b_in": (35,),
        "layers/1/mlp/b_out": (35,),
        "readout": (35, 3),
    }
    assert sum(math.prod(s) for s in names.values()) == M.num_params(model)
    # init_scale N(0, 1)/sqrt(d) for Q, K, V (3675 draws each: std within 6%, ~5 sigma)
    std = 2.0 / math.sqrt(35)
    for key in "QKV":
        drawn = np.concatenate([np.ravel(params["layers"][str(i)][key]) for i in range(2)])
        assert abs(drawn.std() / std - 1) < 0.06 and abs(drawn.mean()) < 0.02
    for key in ("token", "position"):
        assert abs(np.std(params["embed"][key]) * math.sqrt(35) - 1) < 0.15
    assert abs(np.std(params["readout"]) * math.sqrt(35) - 1) < 0.3
    mlp0, mlp1 = params["layers"]["0"]["mlp"], params["layers"]["1"]["mlp"]
    assert abs(np.std(mlp0["W_in"]) * math.sqrt(35) - 1) < 0.06
    for mp in (mlp0, mlp1):  # last MLP map and biases start at 0
        assert not np.any(mp["W_out"]) and not np.any(mp["b_in"]) and not np.any(mp["b_out"])
    # independent keys: the two layers' MLPs (and every block) differ (no shared-key quirk)
    assert not np.allclose(mlp0["W_in"], mlp1["W_in"])
    assert not np.allclose(params["layers"]["0"]["Q"][0], params["layers"]["0"]["K"][0])
    # disentangled (S = 3, T = 6: d0 = 9, d1 = 27, d2 = 54): zero readout by default, Q/K/V
    # scaled by the layer's input width
    dis = M.NgramModel(kind="disentangled", num_states=3, seq_len=6)
    dparams = M.init_params(jax.random.key(1), dis, jnp.float64)
    assert not np.any(dparams["readout"]) and dparams["readout"].shape == (54, 3)
    assert dparams["layers"]["1"]["V"].shape == (1, 27, 27)
    assert abs(np.std(dparams["layers"]["1"]["V"]) * math.sqrt(27) - 1) < 0.15


# --------------------------------------------------------------------------------------------------
# Forward pass against the loop references
# --------------------------------------------------------------------------------------------------

REFERENCE_CASES = [
    dict(kind="simplified", num_heads=2),
    dict(kind="simplified", num_heads=3, learn_value=False, head_dim=4),
    dict(kind="transformer"),
    dict(kind="transformer", mlp=True),
    dict(kind="transformer", embedding="learned"),
    dict(kind="transformer", embedding="learned", mlp=True),
    dict(kind="transformer", layer_heads=(2, 1, 2), head_dim=5, mlp=True),
    dict(kind="disentangled"),
    dict(kind="disentangled", layer_heads=(1, 2, 1), head_dim=4, readout_init="random"),
]


def _case_name(kwargs) -> str:
    """A test-method suffix: "kind_transformer__layer_heads_2_1_2__..." (identifier characters)."""
    text = "__".join(f"{k}_{v}" for k, v in kwargs.items())
    return "".join(ch if ch.isalnum() else "_" for ch in text)


class ForwardAndGradient(chex.TestCase):
    """The model and its loss with and without jit (chex variants): a bug hiding behind jit (a
    Python-side branch on traced values, a static field lost by Flax's clone) shows as one
    variant failing."""

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*[(_case_name(kw), kw) for kw in REFERENCE_CASES])
    def test_probs_match_loop_reference(self, kwargs):
        """model.apply == the per-token NumPy loop of the notes' formulas to 1e-10 (float64,
        random params, random sequences; S = 3, T = 6)."""
        model = M.NgramModel(num_states=3, seq_len=6, **kwargs)
        params = random_params(model, seed=len(str(kwargs)))
        x_BT = _tokens(3, 6, 3, seed=7)
        got = self.variant(lambda p, x: model.apply({"params": p}, x))(params, x_BT)
        want = REFERENCES[model.kind](params, x_BT, model)
        chex.assert_shape(got, (3, 3))
        chex.assert_type(got, jnp.float64)
        chex.assert_trees_all_close(got, want, rtol=0, atol=1e-10)
        chex.assert_trees_all_close(got.sum(-1), np.ones(3), rtol=0, atol=1e-12)
        assert np.abs(want - want.mean(0)).max() > 1e-3  # the check is not vacuous

    @chex.variants(with_jit=True, without_jit=True)
    def test_loss_and_grad(self):
        """value_and_grad of the loss: finite, every block moves, and two coordinates match a
        central difference of the NumPy reference loss."""
        model = M.NgramModel(
            kind="transformer", num_states=3, seq_len=6, mlp=True, embedding="learned"
        )
        params = random_params(model, seed=3)
        x_BT = _tokens(3, 6, 4, seed=1)
        target = jnp.asarray(np.random.default_rng(0).dirichlet(np.ones(3), 4))

        def loss(p):
            return est.cross_entropy(model.apply({"params": p}, x_BT), target, floor=0.0).mean()

        value, grads = self.variant(jax.value_and_grad(loss))(params)
        chex.assert_tree_all_finite((value, grads))
        chex.assert_trees_all_equal_shapes(grads, params)
        assert all(np.any(g != 0) for g in jax.tree_util.tree_leaves(grads))  # every block

        def ref_loss(p):
            return -np.mean(
                np.sum(np.asarray(target) * np.log(ref_transformer(p, x_BT, model)), -1)
            )

        chex.assert_trees_all_close(value, ref_loss(params), rtol=0, atol=1e-12)
        eps = 1e-6
        for block, index in (("Q", (1, 2, 3)), ("V", (0, 4, 5))):

            def shifted(sign, block=block, index=index):
                layer = dict(params["layers"]["0"])
                layer[block] = np.array(layer[block])
                layer[block][index] += sign * eps
                return ref_loss(dict(params, layers={"0": layer, "1": params["layers"]["1"]}))

            fd = (shifted(1) - shifted(-1)) / (2 * eps)
            chex.assert_trees_all_close(
                grads["layers"]["0"][block][index], fd, rtol=1e-6, atol=1e-10
            )


# --------------------------------------------------------------------------------------------------
# Initialisation behaviour
# --------------------------------------------------------------------------------------------------


def test_zero_readout_is_uniform(fig4_data):
    """readout = 0: probs exactly 1/S, so the (floor-free) loss is exactly log S, whatever the
    attention does (a transformer with its readout zeroed; disentangled init by default)."""
    x_BT, target_BS = fig4_data
    model = M.NgramModel(kind="transformer", num_states=3, seq_len=32)
    zero = M.NgramModel(kind="transformer", num_states=3, seq_len=32, readout_init="zero")
    assert zero.readout_init == "zero" and model.readout_init == "random"
    assert M.param_shapes(zero) == M.param_shapes(model)
    params = M.init_params(jax.random.key(0), model, jnp.float64)  # shares the jit cache
    params["readout"] = jnp.zeros_like(params["readout"])  # what readout_init = "zero" draws
    dis = M.NgramModel(kind="disentangled", num_states=3, seq_len=6)
    dis_params = M.init_params(jax.random.key(1), dis, jnp.float64)
    dis_params["layers"] = random_params(dis, seed=1)["layers"]  # attention far from uniform
    dis_target = np.random.default_rng(2).dirichlet(np.ones(3), 3)
    for p, t in (
        (PROBS(params, x_BT, model), target_BS),
        (PROBS(dis_params, _tokens(3, 6, 3, seed=7), dis), dis_target),
    ):
        p = np.asarray(p)
        assert np.all(p == p[0, 0]) and abs(p[0, 0] - 1 / 3) < 1e-16
        loss = np.asarray(est.cross_entropy(p, t, floor=0.0))
        np.testing.assert_allclose(loss, math.log(3), rtol=1e-14, atol=0)


@pytest.mark.parametrize("embedding", ["one_hot", "learned"])
def test_random_readout_initial_loss(embedding, fig4_data):
    """Fig 4 setup (S = 3, n = 3, T = 32, alpha = 1) at init: loss 1.05-1.35 (notes: 1.13-1.22)."""
    model = M.NgramModel(kind="transformer", num_states=3, seq_len=32, embedding=embedding)
    x_BT, target_BS = fig4_data
    losses = []
    for seed in range(3):
        params = M.init_params(jax.random.key(seed), model, jnp.float64)
        losses.append(float(est.cross_entropy(PROBS(params, x_BT, model), target_BS).mean()))
    assert all(1.05 < loss < 1.35 for loss in losses), losses
    assert max(losses) - min(losses) > 1e-4  # seeds differ


@pytest.mark.parametrize("embedding", ["one_hot", "learned"])
def test_mlp_variant_at_init_is_the_embedding_readout(embedding):
    """mlp = True at init: both layers add exactly 0, so p = softmax(r0[T] W) (notes §3.3)."""
    model = M.NgramModel(kind="transformer", num_states=3, seq_len=6, mlp=True, embedding=embedding)
    params = M.init_params(jax.random.key(2), model, jnp.float64)
    x_BT = _tokens(3, 6, 3, seed=7)  # reference-test shapes: jit cache hits
    r0_T = np.asarray(M.embed(params, x_BT, model))[:, -1]
    want = np.asarray(jax.nn.softmax(r0_T @ params["readout"], axis=-1))
    np.testing.assert_allclose(PROBS(params, x_BT, model), want, rtol=0, atol=1e-15)
    # not vacuous: the same attention blocks without the MLPs do move the output
    plain = M.NgramModel(kind="transformer", num_states=3, seq_len=6, embedding=embedding)
    plain_params = dict(
        params, layers={i: {k: layer[k] for k in "QKV"} for i, layer in params["layers"].items()}
    )
    assert np.abs(np.asarray(PROBS(plain_params, x_BT, plain)) - want).max() > 1e-3


# --------------------------------------------------------------------------------------------------
# Attention, causality
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["transformer", "disentangled"])
def test_attention_maps_are_causal_and_the_stream_is_causal(kind):
    T = 6
    model = M.NgramModel(kind=kind, num_states=3, seq_len=T)
    params = random_params(model, seed=11)
    x_BT = _tokens(3, T, 3, seed=7)
    att = np.asarray(M.layer1_attention(params, model, x_BT))
    assert att.shape == (3, 2, T, T)
    maps = ATTENTION(params, x_BT, model)
    assert [m.shape for m in maps] == [(3, 2, T, T), (3, 1, T, T)]
    np.testing.assert_allclose(maps[0], att, rtol=0, atol=1e-14)
    upper, lower = np.triu_indices(T, 1), np.tril_indices(T)
    for a in (np.asarray(m) for m in maps):
        np.testing.assert_allclose(a.sum(-1), 1.0, rtol=0, atol=1e-12)
        assert np.all(a[..., upper[0], upper[1]] == 0) and np.all(a[..., lower[0], lower[1]] > 0)
        assert np.abs(a[..., lower[0], lower[1]] - att[0, 0, lower[0], lower[1]]).max() > 1e-3
    # the last-row-only output equals row T of the all-positions stream
    full = np.asarray(STREAM(params, x_BT, model, all_positions=True))
    np.testing.assert_allclose(
        PROBS(params, x_BT, model),
        jax.nn.softmax(full[:, -1] @ params["readout"], axis=-1),
        rtol=0,
        atol=1e-12,
    )
    # changing x_3 (0-based) leaves rows 0..2 of r_L exactly unchanged and changes rows 3..T-1
    changed = np.array(x_BT)
    changed[:, 3] = (changed[:, 3] + 1) % 3
    full2 = np.asarray(STREAM(params, changed, model, all_positions=True))
    np.testing.assert_array_equal(full2[:, :3], full[:, :3])
    assert np.all(np.abs(full2[:, 3:] - full[:, 3:]).max(-1) > 1e-6)
    # and the output at T reads the first token
    first = np.array(x_BT)
    first[:, 0] = (first[:, 0] + 1) % 3
    diff = np.abs(np.asarray(PROBS(params, first, model) - PROBS(params, x_BT, model)))
    assert np.all(diff.max(-1) > 1e-8)


def test_simplified_previous_token_heads_compute_the_bigram_estimator():
    """Simplified model with A1 = c on offset -1, V1 = I, Q2 reading block 0 (x_T) and K2 block 1
    (x_{i-1}): for large c the output is the padded bigram estimator (notes §4.4), so it depends
    on x_1 only through key 1's padded history; head_offset_attention reads (1, 0, 0)."""
    S, T, c = 3, 16, 60.0
    model = M.NgramModel(num_states=S, seq_len=T, num_heads=2, head_dim=S)
    offset1 = np.eye(T, k=-1)
    params = {
        "A1": jnp.asarray(c * np.stack([offset1, offset1])),
        "V1": jnp.asarray(np.stack([np.eye(S)] * 2)),
        "Q2": jnp.asarray(np.hstack([np.eye(S), np.zeros((S, 2 * S))])),
        "K2": jnp.asarray(c * np.hstack([np.zeros((S, S)), np.eye(S), np.zeros((S, S))])),
    }
    np.testing.assert_array_equal(
        M.layer1_attention(params, model, x_BT=None), M.layer1_attention(params, model)
    )
    offsets = np.asarray(M.head_offset_attention(M.layer1_attention(params, model)))
    np.testing.assert_allclose(offsets, [[1, 0, 0], [1, 0, 0]], rtol=0, atol=1e-20)
    x_BT = _tokens(S, T, 64, seed=4)
    counts, matches = est.kgram_counts(x_BT, S, 2, padded=True)
    keep = np.asarray(matches) > 0
    got = np.asarray(PROBS(params, x_BT, model))[keep]
    want = np.asarray(est.padded_kgram_estimate(x_BT, S, 2))[keep]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # changing x_1 changes the output exactly where the padded count moves
    flipped = np.array(x_BT)
    flipped[:, 0] = (flipped[:, 0] + 1) % S
    got2 = np.asarray(PROBS(params, flipped, model))
    want2 = np.asarray(est.padded_kgram_estimate(flipped, S, 2))
    both = keep & (np.asarray(est.kgram_counts(flipped, S, 2, padded=True)[1]) > 0)
    np.testing.assert_allclose(got2[both], want2[both], rtol=0, atol=1e-12)
    moved = np.abs(want2 - np.asarray(est.padded_kgram_estimate(x_BT, S, 2))).max(-1) > 0
    assert np.any(moved & both) and np.any(~moved & both)


def test_head_offset_attention_hand_built():
    T = 5
    prev = np.eye(T, k=-1)
    prev[0, 0] = 1.0  # row 0 can only attend to itself
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    half = 0.5 * np.eye(T, k=-1) + 0.5 * np.eye(T, k=-2)  # rows >= 2: half on -1, half on -2
    half[0, 0], half[1, 0] = 1.0, 1.0
    att = np.stack([prev, uniform, half])
    got = np.asarray(M.head_offset_attention(att))
    want = [
        [1, 0, 0],
        [(1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4, (1 / 3 + 1 / 4 + 1 / 5) / 3, (1 / 4 + 1 / 5) / 2],
        [(1 + 0.5 * 3) / 4, 0.5, 0],
    ]
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(
        M.head_offset_attention(att, offsets=(2,)),
        [[0], [(1 / 3 + 1 / 4 + 1 / 5) / 3], [0.5]],
        rtol=0,
        atol=1e-15,
    )
    # (B, m, T, T): averaged over the batch
    batch = np.stack([att, att[[1, 2, 0]]])
    np.testing.assert_allclose(
        M.head_offset_attention(batch),
        (np.asarray(want) + np.asarray(want)[[1, 2, 0]]) / 2,
        rtol=0,
        atol=1e-15,
    )


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(kind="catformer"), "kind"),
        (dict(num_states=1), "num_states"),
        (dict(seq_len=1.5), "seq_len"),
        (dict(num_heads=0), "num_heads"),
        (dict(head_dim=0), "head_dim"),
        (dict(kind="transformer", head_dim=2.0), "head_dim"),
        (dict(kind="transformer", embedding="onehot"), "embedding"),
        (dict(kind="disentangled", embedding="learned"), "embedding"),
        (dict(embedding="learned"), "embedding"),
        (dict(kind="transformer", mlp="yes"), "mlp"),
        (dict(kind="disentangled", mlp=True), "mlp"),
        (dict(kind="transformer", readout_init="normal"), "readout_init"),
        (dict(readout_init="zero"), "readout_init"),
        (dict(layer_heads=(2, 1)), "layer_heads"),
        (dict(kind="transformer", layer_heads=()), "layer_heads"),
        (dict(kind="disentangled", layer_heads=(2, 0)), "layer_heads"),
        (dict(kind="disentangled", layer_heads=3), "layer_heads"),
        (dict(kind="transformer", learn_value=False), "learn_value"),
        (dict(init_scale="1"), "init_scale"),
    ],
)
def test_bad_model_fields(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field} = ") as info:
        M.NgramModel(**kwargs)
    assert str(info.value).count(".") >= 1 and "\n" not in str(info.value)


def test_layer_heads_normalisation_and_bad_calls():
    a = M.NgramModel(kind="disentangled", layer_heads=[3, 1])
    assert (
        a.layer_heads == (3, 1)
        and a.num_heads == 3
        and hash(a) == hash(M.NgramModel(kind="disentangled", num_heads=3))
    )
    assert M.NgramModel(kind="transformer").layer_heads == (2, 1)
    assert M.NgramModel().layer_heads is None and M.NgramModel().readout_init is None
    model = M.NgramModel(kind="transformer", num_states=3, seq_len=6)
    params = M.init_params(jax.random.key(0), model)
    with pytest.raises(ValueError, match=r"^x_BT = None"):
        M.layer1_attention(params, model)
    with pytest.raises(ValueError, match=r"^x has 5 positions"):
        M.probs(params, jnp.zeros((2, 5), jnp.int32), model)
    with pytest.raises(ValueError, match=r"^offsets = "):
        M.head_offset_attention(np.zeros((2, 6, 6)), offsets=(0, 1))
    with pytest.raises(ValueError, match=r"^offsets = "):
        M.head_offset_attention(np.zeros((2, 6, 6)), offsets=(6,))
    with pytest.raises(ValueError, match=r"^att has shape"):
        M.head_offset_attention(np.zeros((6, 6)))


# --------------------------------------------------------------------------------------------------
# The authors' model variants (notes §8): V1 fixed to the identity, the pre-fix layer-2 width
# --------------------------------------------------------------------------------------------------


def test_fixed_value_matrix_is_the_identity():
    """learn_value = False (the authors' `value_matrix_int = 0`): no V1 parameter, and the
    output equals the learned-V1 model's with V1 = I on every head."""
    S, T = 5, 16
    fixed = M.NgramModel(num_states=S, seq_len=T, num_heads=2, learn_value=False)
    learned = M.NgramModel(num_states=S, seq_len=T, num_heads=2)
    params = M.init_params(jax.random.key(3), fixed)
    assert set(params) == {"A1", "Q2", "K2"}
    params = {**params, "A1": jax.random.normal(jax.random.key(4), (2, T, T))}  # not uniform
    with_identity = {**params, "V1": jnp.stack([jnp.eye(S)] * 2)}
    x_BT = _tokens(S, T, 32, seed=5)
    np.testing.assert_allclose(
        PROBS(params, x_BT, fixed), PROBS(with_identity, x_BT, learned), rtol=1e-6, atol=1e-7
    )


def test_prefix_width_5_is_the_corrected_model_with_zero_rows():
    """head_dim = S = 5 (the authors' Simpleformer before commit 767e22c: Q (1, 15, 5), Kt
    (1, 5, 15)): Q2, K2 are (5, 15), and the output equals the width-15 model's with Q2, K2
    padded by zero rows (the extra query/key coordinates add nothing to the scores)."""
    S, T = 5, 16
    narrow = M.NgramModel(num_states=S, seq_len=T, num_heads=2, head_dim=S)
    wide = M.NgramModel(num_states=S, seq_len=T, num_heads=2)
    params = M.init_params(jax.random.key(6), narrow)
    assert params["Q2"].shape == params["K2"].shape == (5, 15) and wide.head_dim == 15
    # the same initial scale as the authors' (N(0, 1) / sqrt(15) in both versions)
    assert (
        abs(float(np.std(np.concatenate([params["Q2"], params["K2"]]))) * math.sqrt(15) - 1) < 0.25
    )
    params = {**params, "A1": jax.random.normal(jax.random.key(7), (2, T, T))}

    def pad(m):
        return jnp.concatenate([m, jnp.zeros((10, 15))])

    padded = {**params, "Q2": pad(params["Q2"]), "K2": pad(params["K2"])}
    x_BT = _tokens(S, T, 32, seed=8)
    np.testing.assert_allclose(
        PROBS(params, x_BT, narrow), PROBS(padded, x_BT, wide), rtol=1e-6, atol=1e-7
    )
