"""ggn_at: the Gauss-Newton matrix and the remainder H - G, against closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.core import operator
from landscape.engine import backend
from landscape.markov import attention as markov_attention
from landscape.markov import model as markov_model
from landscape.markov import points as markov_points
from landscape.markov import task as markov_task
from landscape.point import Point
from landscape.probes import curvature

P, Q = 0.5, 0.8
PI0PI1 = P * Q / (P + Q) ** 2


@pytest.fixture(scope="module")
def untied():
    return landscape.ggn_at(landscape.markov.theta_pi(p=P, q=Q, seq_len=6, tied=False))


def test_untied_theta_pi_negative_curvature_lives_in_the_remainder(untied):
    # Thm 3: the untied unigram point is a saddle with eigenvalues -pi0 pi1 |p+q-1| (d-fold);
    # G is a sum of J^T H_z J with H_z >= 0, so it holds none of them.
    tol = untied.hessian.tolerance()
    h = untied.hessian.eigenvalues
    np.testing.assert_allclose(h[:4], -PI0PI1 * abs(P + Q - 1), rtol=1e-9)
    assert h[4] > -tol
    assert untied.ggn_eigenvalues[0] > -tol
    assert untied.remainder_eigenvalues[0] == pytest.approx(-PI0PI1 * abs(P + Q - 1), rel=1e-9)
    assert "come from R" in untied.describe()


def test_ggn_blocks_at_theta_pi_match_closed_forms(untied):
    # logit = <a, z_n> + b with a = e = 0: J_b = 1, so G_bb = sigma'(b) = pi0 pi1, and the logit
    # has no first-order dependence on e, so G's e rows vanish.
    np.testing.assert_allclose(untied.block("b"), [[PI0PI1]], rtol=1e-12)
    assert np.abs(untied.block("e", ["b", "e", "a"])).max() == 0.0
    np.testing.assert_allclose(untied.ggn, untied.ggn.T, atol=0)


def test_remainder_equals_output_curvature_weighted_by_the_output_gradient(untied):
    # R = sum_k (dl/dz_k) d^2 z_k / d theta^2, computed here independently of H and G, as
    # products with random vectors (the Hessian of <stop_grad(dl/dz), z(theta)>).
    point = untied.hessian.point
    flat, unravel = jax.flatten_util.ravel_pytree(point.params)
    z = point.outputs(point.params, point.inputs)
    grad_z = jax.grad(point.output_loss)(z, point.inputs)

    def weighted_outputs(x):
        return jnp.vdot(grad_z, point.outputs(unravel(x), point.inputs))

    def product(v):
        return jax.jvp(jax.grad(weighted_outputs), (flat,), (v,))[1]

    vectors = jax.random.normal(jax.random.key(0), (4, flat.size), flat.dtype)
    expected = np.asarray(jax.jit(jax.vmap(product))(vectors))
    np.testing.assert_allclose(np.asarray(vectors) @ untied.remainder, expected, atol=1e-12)


def _logistic_point(key, n=40, d=5):
    x_kx, y_key, w_key = jax.random.split(key, 3)
    x_nd = jax.random.normal(x_kx, (n, d), jnp.float64)
    y_n = (jax.random.uniform(y_key, (n,)) < 0.5).astype(jnp.float64)

    def outputs(params, inputs):
        return inputs[0] @ params["w"] + params["c"]

    def output_loss(z, inputs):
        return jnp.mean(jnp.logaddexp(0.0, z) - inputs[1] * z)

    def objective(params, inputs):
        return output_loss(outputs(params, inputs), inputs)

    params = {"w": 0.3 * jax.random.normal(w_key, (d,), jnp.float64), "c": jnp.array(0.1)}
    return Point(
        params, objective=objective, inputs=(x_nd, y_n), outputs=outputs, output_loss=output_loss
    )


@pytest.mark.parametrize("sliced", [False, True])
def test_logistic_regression_ggn_is_the_hessian(sliced, monkeypatch):
    # outputs linear in the params: R = 0 and G = X^T diag(sigma'(z)) X / n, with X = [x, 1];
    # sliced: the loss declared a mean over its 40 rows, formed over 4 slices of 10 (the
    # Hessian's population_parts, COLUMN_BYTES lowered to a quarter of a loss's traffic)
    point = _logistic_point(jax.random.key(3))
    if sliced:
        point = Point(
            point.params, objective=point.objective, inputs=point.inputs, outputs=point.outputs,
            output_loss=point.output_loss, meta={"population": "mean"},
        )  # fmt: skip
        moved = curvature._bytes_moved(point)
        monkeypatch.setattr(curvature, "COLUMN_BYTES", moved / 3.5)
        assert curvature.population_parts(point) == (4, True)
    result = landscape.ggn_at(point, progress=None)
    x_nd = np.asarray(point.inputs[0])
    z = x_nd @ np.asarray(point.params["w"]) + float(point.params["c"])
    s = 1 / (1 + np.exp(-z))
    design = np.concatenate([np.ones((len(z), 1)), x_nd], axis=1)  # "c" sorts before "w"
    expected = design.T @ (design * (s * (1 - s))[:, None]) / len(z)
    np.testing.assert_allclose(result.ggn, expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(result.remainder, 0.0, atol=1e-14)


def test_a_list_equals_one_at_a_time():
    points = [_logistic_point(jax.random.key(k)) for k in (1, 2)]
    points[1] = Point(  # one model: the first point's functions, the second's data
        points[0].params,
        objective=points[0].objective,
        inputs=points[1].inputs,
        outputs=points[0].outputs,
        output_loss=points[0].output_loss,
    )
    listed = landscape.ggn_at(points)
    for point, result in zip(points, listed, strict=True):
        np.testing.assert_allclose(result.ggn, landscape.ggn_at(point).ggn, rtol=1e-12)


def test_a_point_without_the_split_is_refused_in_one_sentence():
    point = Point({"w": jnp.ones(3)}, lambda p: jnp.sum(p["w"] ** 2))
    with pytest.raises(ValueError, match="does not split its loss"):
        landscape.ggn_at(point)
    with pytest.raises(TypeError, match="both outputs"):
        Point(point.params, objective=lambda p, i: 0.0, inputs=None, outputs=lambda p, i: 0.0)


def test_a_split_that_does_not_compose_to_the_objective_is_refused():
    good = _logistic_point(jax.random.key(0))
    bad = Point(
        good.params,
        objective=good.objective,
        inputs=good.inputs,
        outputs=good.outputs,
        output_loss=lambda z, inputs: 2.0 * good.output_loss(z, inputs),
    )
    with pytest.raises(ValueError, match="must compose to the objective"):
        landscape.ggn_at(bad)


def _reference_ggn(point):
    """G = Jᵀ (∇²_z ℓ) J with J by reverse mode (jax.jacrev, row by row) and ∇²_z ℓ by
    jax.hessian: no forward-mode product through the model, traced afresh."""
    flat, unravel = jax.flatten_util.ravel_pytree(point.params)
    z = point.outputs(point.params, point.inputs)
    jacobian = jax.jacrev(lambda x: point.outputs(unravel(x), point.inputs).ravel())(flat)
    hz = jax.hessian(lambda u: point.output_loss(u.reshape(z.shape), point.inputs))(z.ravel())
    return np.asarray(jacobian.T @ hz @ jacobian)


def _gpt_point(seq_len, num_sequences):
    """A GPT-2-family Markov model (pre-LN: the hand-written LayerNorm and, beyond 64 positions,
    the tiled attention with its hand-written backward pass) at a random init."""
    model = markov_model.MarkovModel(
        family="gpt", d=4, seq_len=seq_len, layer_norm=True, param_dtype=jnp.float64
    )
    params = markov_model.init_params(jax.random.key(3), model, jnp.float64)
    params = jax.tree.map(lambda x: x + 0.3 * jnp.sin(jnp.arange(x.size).reshape(x.shape)), params)
    kernel = markov_task.binary_kernel(P, Q)
    inputs = markov_points.population_inputs(
        model, kernel, None, population="mc", num_sequences=num_sequences
    )
    return markov_points.population_point(model, params, inputs, "gpt, random", {})


@pytest.mark.slow
def test_ggn_goes_through_hand_written_backward_passes_at_n_128():
    """At N = 128 the CPU attention is tiled with a hand-written backward pass (a custom_vjp,
    which has no forward mode), and the GPT-2 family's LayerNorm has one too: G equals Jᵀ H_z J
    from the plain formulation (full masked softmax, JAX's own derivatives) to 1e-10."""
    assert not markov_attention.scores_held_whole(128)
    gpt = _gpt_point(128, num_sequences=2)
    result = landscape.ggn_at(gpt, progress=None)
    with backend.tuning("plain"):
        reference = _reference_ggn(gpt)
    assert np.abs(reference).max() > 1e-2
    np.testing.assert_allclose(result.ggn, reference, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_ggn_at_theta_pi_at_n_128():
    """θ_π at the papers' N = 128 (tiled attention): every logit equals b, so G_bb = π0 π1 and
    the e rows of G vanish (notes/landscape_geometry.md §7)."""
    theta_pi = landscape.markov.theta_pi(P, Q, seq_len=128, num_sequences=4)
    ggn = landscape.ggn_at(theta_pi, progress=None)
    np.testing.assert_allclose(ggn.block("b"), [[PI0PI1]], rtol=1e-12)
    assert np.abs(ggn.block("e", ["b", "e"])).max() == 0.0


@pytest.mark.slow
def test_ggn_at_theta_pi_at_n_1024():
    """The Markov papers' N = 1024 (D = 4307, formed in chunks with progress lines)."""
    lines = []
    theta_pi = landscape.markov.theta_pi(P, Q, seq_len=1024, num_sequences=2)
    ggn = landscape.ggn_at(theta_pi, progress=lines.append)
    np.testing.assert_allclose(ggn.block("b"), [[PI0PI1]], rtol=1e-12)
    assert np.abs(ggn.block("e", ["b", "e"])).max() == 0.0
    assert any(line.startswith("Gauss-Newton matrix of theta_pi") for line in lines)


def test_ggn_at_refuses_a_large_model_naming_its_own_way_out():
    point = landscape.Point(
        {"w": jnp.zeros(50)},
        objective=lambda p, x: jnp.mean((x @ p["w"]) ** 2),
        inputs=jnp.ones((3, 50)),
        outputs=lambda p, x: x @ p["w"],
        output_loss=lambda z, x: jnp.mean(z**2),
    )
    with pytest.raises(
        ValueError, match=r"pass ggn_at\(point, max_dense_dim=50\) if [0-9.e-]+ GB fit"
    ):
        landscape.ggn_at(point, max_dense_dim=49)
    with pytest.raises(ValueError, match=r"or probe G matrix-free: .* with matrix='ggn'"):
        landscape.ggn_at(point, max_dense_dim=49)
    assert landscape.ggn_at(point, max_dense_dim=50, progress=None).point is point


# ---------------------------------------------------------------- matrix-free: matrix="ggn"


def _tanh_outputs(params, data):
    return jnp.tanh(data[0] @ params["w1"]) @ params["w2"]


def _softmax_loss(z, data):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), data[1][:, None], axis=1))


def _tanh_objective(params, data):
    return _softmax_loss(_tanh_outputs(params, data), data)


@pytest.fixture(scope="module")
def tanh_features():
    # a nonlinear model (D = 72, float32): G != H, and G's dense form from ggn_at to compare
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    params = {
        "w1": jnp.asarray(rng.standard_normal((6, 8)) * 0.7, jnp.float32),
        "w2": jnp.asarray(rng.standard_normal((8, 3)), jnp.float32),
    }
    point = Point(
        params, objective=_tanh_objective, inputs=(x, y), outputs=_tanh_outputs,
        output_loss=_softmax_loss, name="tanh features",
    )  # fmt: skip
    return point, landscape.ggn_at(point, progress=None)


def test_ggn_products_equal_the_dense_ggn_to_float32_rounding(tanh_features):
    point, dense = tanh_features
    split = operator.gauss_newton(point.outputs, point.output_loss)
    basis = jnp.eye(point.num_params, dtype=jnp.float32)
    columns = np.asarray(operator.products(split, point.params, point.inputs, basis))
    scale = np.abs(dense.ggn).max()
    np.testing.assert_allclose(columns, dense.ggn, atol=1e-6 * scale)
    assert np.abs(dense.remainder).max() > 0.1 * scale  # a model where G is not H


def test_trace_lanczos_and_slq_of_ggn_match_its_eigenvalues(tanh_features):
    point, dense = tanh_features
    exact = np.linalg.eigvalsh(dense.ggn.astype(np.float64))
    dim = point.num_params
    tr = landscape.trace(point, num_probes=3 * dim + 3, progress=None, matrix="ggn")
    assert tr.value == pytest.approx(np.trace(dense.ggn), rel=1e-5)  # the sketch spans all of G
    hessian_trace = landscape.trace(point, num_probes=3 * dim + 3, progress=None)
    assert hessian_trace.value == pytest.approx(np.trace(dense.hessian.matrix), rel=1e-5)
    assert abs(tr.value - hessian_trace.value) > 0.01 * tr.value
    spectrum = landscape.lanczos_spectrum(point, num_iters=dim, progress=None, matrix="ggn")
    assert spectrum.lambda_max == pytest.approx(exact[-1], rel=1e-5)
    assert abs(spectrum.lambda_min - exact[0]) < 1e-5 * exact[-1]  # G is PSD: ~0 here
    assert "no verdict" in spectrum.verdict() and spectrum.summary()["matrix"] == "ggn"
    density = landscape.spectral_density(point, 2, dim, progress=None, matrix="ggn")
    assert density.nodes.max() == pytest.approx(exact[-1], rel=1e-5)
    assert density.describe().startswith("Gauss-Newton spectral density")


def test_ggn_probes_refuse_a_point_without_the_split_in_one_sentence():
    point = Point({"w": jnp.ones(3)}, lambda p: jnp.sum(p["w"] ** 4), name="quartic")
    calls = (
        lambda: landscape.trace(point, 4, progress=None, matrix="ggn"),
        lambda: landscape.spectral_density(point, 2, 3, progress=None, matrix="ggn"),
        lambda: landscape.lanczos_spectrum(point, 3, progress=None, matrix="ggn"),
    )
    for call in calls:
        with pytest.raises(ValueError, match=r"\(matrix='ggn'\): quartic does not split its loss"):
            call()
    with pytest.raises(ValueError, match="matrix = 'gn': must be one of 'hessian', 'ggn'"):
        landscape.trace(point, 4, progress=None, matrix="gn")


def test_eigenpairs_of_ggn_are_the_dense_ggns(tanh_features):
    """The top 4 eigenpairs of G, by Lanczos and densely, are those of ggn_at's G (float32
    rounding), certified by G's own products; the result is the user's point's and says G."""
    point, dense = tanh_features
    values, vectors = np.linalg.eigh(dense.ggn.astype(np.float64))
    scale = values[-1]
    for dense_below in (0, 3000):
        pairs = landscape.eigenpairs(
            point, 4, "largest", dense_below=dense_below, progress=None, matrix="ggn"
        )
        np.testing.assert_allclose(pairs.values, values[::-1][:4], rtol=1e-4)
        assert np.all(pairs.residuals < 1e-4 * scale)
        for v, u in zip(pairs.flat_vectors, vectors[:, ::-1].T, strict=False):
            assert abs(v @ u) > 1 - 1e-3
        products = pairs.flat_vectors @ dense.ggn  # G symmetric: rows of G v
        residuals = np.linalg.norm(products - pairs.values[:, None] * pairs.flat_vectors, axis=1)
        np.testing.assert_allclose(pairs.residuals, residuals, atol=1e-5 * scale)
        assert pairs.point is point and pairs.summary()["matrix"] == "ggn"
        assert pairs.describe().startswith("Eigenpairs of the Gauss-Newton matrix at tanh")
    hessian = landscape.eigenpairs(point, 1, "largest", dense_below=0, progress=None)
    assert abs(hessian.values[0] - values[-1]) > 1e-3 * scale  # H's top is not G's


def test_hvp_and_hvp_flat_of_ggn_are_products_with_the_dense_ggn(tanh_features):
    point, dense = tanh_features
    v = np.random.default_rng(1).standard_normal(point.num_params).astype(np.float32)
    expected = dense.ggn @ v
    scale = np.abs(expected).max()
    x0, matvec = landscape.hvp_flat(point, matrix="ggn")
    np.testing.assert_allclose(np.asarray(matvec(v)), expected, atol=1e-5 * scale)
    np.testing.assert_allclose(
        np.asarray(landscape.hvp(point, matrix="ggn")(v)), expected, atol=1e-5 * scale
    )
    tree = jax.tree.map(np.asarray, landscape.trees.unravel_numpy(point.params, v))
    product = landscape.hvp(point, matrix="ggn")(tree)
    flat = np.concatenate([np.ravel(product["w1"]), np.ravel(product["w2"])])
    np.testing.assert_allclose(flat, expected, atol=1e-5 * scale)
    hessian = np.asarray(landscape.hvp_flat(point)[1](v))
    assert np.abs(hessian - expected).max() > 1e-2 * scale  # H v is not G v here


def test_ggn_over_a_dataset_in_batches_is_the_one_batch_ggn(tanh_features):
    """32 examples in 4 batches of 8: G of the batches' mean (products accumulated batch by
    batch) is the one-batch G, through every probe that takes matrix="ggn", and ggn_at's."""
    point, dense = tanh_features
    batched = Point(
        point.params, objective=_tanh_objective, batches=landscape.batches(point.inputs, 8),
        outputs=_tanh_outputs, output_loss=_softmax_loss, name="tanh features, 4 batches",
    )  # fmt: skip
    v = np.random.default_rng(2).standard_normal(point.num_params).astype(np.float32)
    scale = np.abs(dense.ggn).max()
    np.testing.assert_allclose(
        np.asarray(landscape.hvp_flat(batched, matrix="ggn")[1](v)),
        dense.ggn @ v,
        atol=1e-5 * scale * np.linalg.norm(v),
    )
    one = landscape.lanczos_spectrum(point, 20, progress=None, matrix="ggn")
    split = landscape.lanczos_spectrum(batched, 20, progress=None, matrix="ggn")
    np.testing.assert_allclose(split.ritz_values, one.ritz_values, atol=1e-5 * scale)
    np.testing.assert_allclose(
        landscape.trace(batched, 12, progress=None, matrix="ggn").value,
        landscape.trace(point, 12, progress=None, matrix="ggn").value,
        rtol=1e-5,
    )
    top = landscape.eigenpairs(batched, 3, "largest", dense_below=0, progress=None, matrix="ggn")
    exact = np.linalg.eigvalsh(dense.ggn.astype(np.float64))[::-1][:3]
    np.testing.assert_allclose(top.values, exact, rtol=1e-4)
    np.testing.assert_allclose(landscape.ggn_at(batched, progress=None).ggn, dense.ggn, atol=1e-6)


def test_eigenpairs_and_hvp_of_ggn_refuse_a_point_without_the_split_in_one_sentence():
    point = Point({"w": jnp.ones(3)}, lambda p: jnp.sum(p["w"] ** 4), name="quartic")
    calls = (
        lambda: landscape.eigenpairs(point, 1, progress=None, matrix="ggn"),
        lambda: landscape.hvp(point, matrix="ggn"),
        lambda: landscape.hvp_flat(point, matrix="ggn"),
    )
    for call in calls:
        with pytest.raises(ValueError, match=r"\(matrix='ggn'\): quartic does not split its loss"):
            call()


def test_paired_trace_samples_give_the_difference_its_error_bar(tanh_features):
    """tr H - tr G from the same Hutchinson probes: the paired samples' mean is the difference
    of the two estimates, its error bar their spread, and the dense tr R lies within 4 of them;
    Hutch++ and unequal probe counts are refused in one sentence."""
    point, dense = tanh_features
    key = jax.random.key(3)
    h = landscape.trace(point, 400, key, method="hutchinson", progress=None)
    g = landscape.trace(point, 400, key, method="hutchinson", progress=None, matrix="ggn")
    assert h.samples.shape == g.samples.shape == (400,)
    difference, stderr = h.paired_difference(g)
    assert difference == pytest.approx(h.value - g.value, rel=1e-9)
    samples = h.samples - g.samples
    assert stderr == pytest.approx(samples.std(ddof=1) / 20, rel=1e-9)
    assert abs(difference - np.trace(dense.remainder)) < 4 * stderr
    with pytest.raises(ValueError, match="pair two Hutchinson estimates of one key"):
        landscape.trace(point, 12, progress=None).paired_difference(g)
    with pytest.raises(ValueError, match="400 probes against 10"):
        h.paired_difference(landscape.trace(point, 10, key, method="hutchinson", progress=None))
