"""The matrix-free probes at the sizes of real models (D >= 10^5), against closed forms: a least-
squares model whose Hessian is X^T X / n (its nonzero eigenvalues those of the small X X^T / n),
one batch and the same data in batches; the accuracy knob; blocks by memory, with progress."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.core import blocks, eigen_search, hvp, krylov_schur, operator
from landscape.probes import spectra, traces

N, D = 48, 100_000  # examples, parameters: H = X^T X / N has rank N


def _least_squares(params, data):
    x, y = data
    return 0.5 * jnp.mean((x @ params["w"] - y) ** 2)


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((N, D)) * np.linspace(0.2, 1.0, N)[:, None] / 300).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    exact = np.linalg.eigvalsh(x.astype(np.float64) @ x.T.astype(np.float64) / N)[::-1]
    params = {"w": jnp.zeros(D, jnp.float32)}
    one = landscape.Point(params, objective=_least_squares, inputs=(x, y), name="one batch")
    batched = landscape.Point(
        params,
        objective=_least_squares,
        batches=landscape.batches((x, y), batch_size=12),
        name="4 batches",
    )
    return one, batched, exact, float(np.sum(x.astype(np.float64) ** 2) / N)


def test_top_eigenvalues_certified_at_d_1e5(model):
    one, _, exact, _ = model
    found = landscape.eigenpairs(one, 5, "largest", dense_below=0, progress=None)
    assert found.method == "lanczos" and found.converged
    np.testing.assert_allclose(found.values, exact[:5], rtol=2e-5)
    assert np.all(found.residuals <= 1e-4 * found.scale)  # fresh HVPs, float32 rounding


def test_rtol_asks_for_less_and_reports_what_it_got(model):
    one, _, exact, _ = model
    tight = landscape.eigenpairs(one, 5, "largest", dense_below=0, progress=None)
    loose = landscape.eigenpairs(one, 5, "largest", dense_below=0, progress=None, rtol=1e-2)
    assert loose.num_hvps <= tight.num_hvps
    assert loose.tol == 1e-2
    # a Ritz value is within its residual of an eigenvalue; here each within 1e-2 * scale
    assert np.all(np.abs(loose.values - exact[:5]) <= 1e-2 * exact[0])
    assert np.all(np.isfinite(loose.residuals))


def test_trace_and_density_at_d_1e5(model):
    one, _, exact, trace = model
    assert abs(trace - exact.sum()) < 1e-6 * trace  # tr(X^T X / N) = ||X||_F^2 / N
    hutchinson = landscape.trace(one, num_probes=40, method="hutchinson", progress=None)
    assert abs(hutchinson.value - trace) < 4 * hutchinson.stderr
    plus = landscape.trace(one, num_probes=150, progress=None)  # sketch of rank 50 >= N
    assert abs(plus.value - trace) < 1e-4 * trace  # the range is caught whole: exact part
    density = landscape.spectral_density(one, num_probes=4, num_iters=60, progress=None)
    mass, stderr = density.mass(0.5 * exact[-1], 2 * exact[0])  # N nonzero eigenvalues of D
    assert abs(mass - N / D) < 4 * stderr + 1e-5


def test_a_dataset_in_batches_equals_one_batch(model):
    one, batched, _, _ = model
    assert np.isclose(one.loss(), batched.loss(), rtol=1e-6)
    g1, g4 = landscape.gradient_at(one), landscape.gradient_at(batched)
    np.testing.assert_allclose(g4.vector, g1.vector, rtol=1e-5, atol=1e-9)
    v = jnp.asarray(np.random.default_rng(1).standard_normal(D), jnp.float32)
    h1, h4 = landscape.hvp(one)(v), landscape.hvp(batched)(v)
    np.testing.assert_allclose(h4, h1, rtol=1e-4, atol=1e-6 * float(jnp.abs(h1).max()))
    top1 = landscape.eigenpairs(one, 3, "largest", dense_below=0, progress=None)
    top4 = landscape.eigenpairs(batched, 3, "largest", dense_below=0, progress=None)
    np.testing.assert_allclose(top4.values, top1.values, rtol=1e-5)
    t1 = landscape.trace(one, 30, method="hutchinson", progress=None)
    t4 = landscape.trace(batched, 30, method="hutchinson", progress=None)
    assert np.isclose(t4.value, t1.value, rtol=1e-5)  # the same probes: equal to rounding


def test_batches_keep_or_drop_a_short_last_batch():
    x = np.zeros((10, 3), np.float32)
    ragged = landscape.batches(x, batch_size=4)  # its mean: tests/probes/test_unequal_batches.py
    assert (ragged.stack.shape, ragged.last.shape) == ((2, 4, 3), (2, 3))
    assert landscape.batches(x, batch_size=4, drop_remainder=True).shape == (2, 4, 3)
    with pytest.raises(ValueError, match="batch_size = 11 is larger than the n = 10 examples"):
        landscape.batches(x, batch_size=11, drop_remainder=True)
    with pytest.raises(TypeError, match="not both"):
        landscape.Point({"w": jnp.zeros(3)}, objective=_least_squares, inputs=(x,), batches=(x,))
    with pytest.raises(TypeError, match="give objective= too"):
        landscape.Point({"w": jnp.zeros(3)}, loss_fn=lambda p: 0.0, batches=(x,))


def test_products_run_in_blocks_by_memory_with_progress(model, monkeypatch):
    one, _, _, _ = model
    monkeypatch.setattr(hvp, "ROWS_MAPPED_FROM", np.inf)  # vmapped, as on an accelerator
    lines = []
    each = blocks.product_bytes(one)
    monkeypatch.setattr(blocks.memory, "device_free_bytes", lambda: 2 * 7.5 * each)
    monkeypatch.setattr(blocks, "LONG_SECONDS", 0.0)
    together = landscape.trace(one, 20, method="hutchinson", progress=None)
    apart = landscape.trace(one, 20, method="hutchinson", progress=lines.append)
    assert lines[0].startswith("trace: 20 products need about")
    # memory holds 7 at once: blocks of 6, the size class below (`sizes.bucket`), the last padded
    assert "4 blocks of 6" in lines[0] and "of 20 products" in lines[1]
    assert apart.value == pytest.approx(together.value, rel=1e-6)  # probes by index, not block


def test_products_made_one_at_a_time_take_blocks_that_memory_does_not_limit(model, monkeypatch):
    # on the CPU (D = 10^5 >= ROWS_MAPPED_FROM) a Hutchinson block holds one product whatever
    # its size: 60 products in blocks of 24, though memory would hold 7 at once vmapped
    one, _, _, _ = model
    lines = []
    each = blocks.product_bytes(one)
    monkeypatch.setattr(blocks.memory, "device_free_bytes", lambda: 2 * 7.5 * each)
    monkeypatch.setattr(blocks, "LONG_SECONDS", 0.0)
    mapped = landscape.trace(one, 60, method="hutchinson", progress=lines.append)
    assert [line.split(" |")[0] for line in lines] == [
        f"trace: {n} of 60 products" for n in (24, 48)
    ]
    monkeypatch.setattr(hvp, "ROWS_MAPPED_FROM", np.inf)
    vmapped = landscape.trace(one, 60, method="hutchinson", progress=None)
    assert mapped.value == pytest.approx(vmapped.value, rel=1e-5)  # the same probes


def test_the_memory_estimate_is_within_2x_of_xla(model):
    # XLA's own count of the block programs' temporaries (the inputs are held once, outside)
    one, _, _, _ = model
    objective, inputs = one.shared
    args = (objective, one.params, inputs, jax.random.key(0))
    state = traces.TraceState(np.zeros((0, D), np.float32), np.float32(0), np.zeros(8, np.float32))
    indices = np.arange(8, dtype=np.int32)
    forms = traces.trace_block.lower(*args, state, np.int32(traces.REST), indices, False)
    slq = spectra.slq_block.lower(*args, indices, 30, "rademacher", False)
    basis = 30 * D * 4  # an SLQ probe's Lanczos basis
    held = 1 if hvp.rows_mapped(D) else 8  # Hutchinson's products one at a time (the CPU)
    for program, estimate in (
        (forms, held * blocks.product_bytes(one)),
        (slq, 8 * blocks.product_bytes(one, basis)),
    ):
        analysis = program.compile().memory_analysis()
        if analysis is None:
            pytest.skip("this backend gives no memory analysis")
        assert 0.5 <= estimate / analysis.temp_size_in_bytes <= 2.0


def _search_bytes(point, k, ncv):
    """XLA's count of the search program's memory: its vectors in and out (donated: the same
    buffers) and its temporaries, the point's own params and data left out (held once)."""
    objective, inputs = point.shared
    settings = krylov_schur.Settings(k, ncv - k, D, "largest", 1e-5, 10)
    plan = krylov_schur.plan(settings, krylov_schur.init(settings), np.dtype(np.float32))
    vectors = jax.device_put(np.zeros((ncv, D), np.float32))
    program = eigen_search.advance.lower(
        objective, point.params, inputs, vectors, plan, jax.random.key(0), "largest"
    )
    analysis = program.compile().memory_analysis()
    if analysis is None:
        pytest.skip("this backend gives no memory analysis")
    own = sum(x.nbytes for x in jax.tree.leaves((point.params, inputs)))
    return analysis.argument_size_in_bytes - own + analysis.temp_size_in_bytes


def test_the_lanczos_search_estimate_is_within_2x_of_xla(model):
    one, _, _, _ = model
    measured = _search_bytes(one, 5, 20)
    estimate = eigen_search.lanczos_search_bytes(D, 20, 4) + blocks.product_bytes(one)
    assert 0.5 <= estimate / measured <= 2.0
    # the search holds its ncv vectors and a fixed few: 20 more cost 20 vectors, and at most
    # what the estimate adds for them (a restart's block of the rotation grows with them)
    grown = _search_bytes(one, 5, 40) - measured
    step = eigen_search.lanczos_search_bytes(D, 40, 4) - eigen_search.lanczos_search_bytes(D, 20, 4)
    assert 20 * D * 4 <= grown <= step


def test_eigen_certificates_use_the_linearised_rows():
    # the certificate program: H v for K rows at once equals K single products
    point = landscape.Point({"w": jnp.arange(1.0, 6.0)}, lambda p: jnp.sum(p["w"] ** 4) / 12)
    vectors = jnp.eye(5)
    rows = operator.products(*point.shared[:1], point.params, point.shared[1], vectors)
    np.testing.assert_allclose(np.diag(np.asarray(rows)), np.arange(1.0, 6.0) ** 2, rtol=1e-6)


def test_lanczos_says_its_memory_and_refuses_what_does_not_fit(monkeypatch):
    point = landscape.Point({"w": jnp.zeros(10_000)}, lambda p: jnp.sum(p["w"] ** 2))
    basis = 30 * 10_000 * blocks.itemsize(point)  # the Lanczos basis, full reorthogonalisation
    monkeypatch.setattr(blocks.memory, "device_free_bytes", lambda: 4 * basis)
    lines = []
    spectrum = landscape.lanczos_spectrum(point, 30, progress=lines.append)
    assert lines == [lines[0]] and lines[0].startswith("lanczos_spectrum: about")
    assert spectrum.lambda_max == pytest.approx(2.0)
    lines.clear()  # a search that asks for more vectors than fit holds fewer, and says so
    found = landscape.eigenpairs(point, 2, "largest", dense_below=0, ncv=80, progress=lines.append)
    assert re.fullmatch(
        r"eigenpairs: 80 Lanczos vectors \(asked for\) need about .*; the search holds (\d+) "
        r"\(ncv=\1\), in more runs",
        lines[0],
    )
    assert 20 < int(re.search(r"ncv=(\d+)", lines[0]).group(1)) < 80
    np.testing.assert_allclose(found.values, 2.0, rtol=1e-12)
    assert found.converged
    with pytest.raises(MemoryError, match=r"Lanczos vectors needs about .* a smaller k"):
        landscape.eigenpairs(point, 60, "largest", dense_below=0, progress=None)


def test_a_progress_that_is_not_a_function_is_one_sentence(model):
    one, _, _, _ = model
    for call in (landscape.trace, landscape.spectral_density, landscape.lanczos_spectrum):
        with pytest.raises(TypeError, match=r"progress = 3: must be a function of one line"):
            call(one, 4, progress=3)


# ---------------------------------------------------------------- Gauss-Newton products


def _linear(params, data):
    return data[0] @ params["w"]


def _squared_error(z, data):
    return 0.5 * jnp.mean((z - data[1]) ** 2)


def test_ggn_of_least_squares_is_x_t_x_over_n_at_d_1e5(model):
    # squared error: H_z = I / N and the model is linear, so G = H = X^T X / N
    one, _, exact, trace = model
    split = landscape.Point(
        one.params, objective=_least_squares, inputs=one.inputs, outputs=_linear,
        output_loss=_squared_error, name="least squares, split",
    )  # fmt: skip
    plus = landscape.trace(split, num_probes=150, progress=None, matrix="ggn")
    assert plus.matrix == "ggn" and plus.describe().startswith("Gauss-Newton trace")
    assert abs(plus.value - trace) < 1e-4 * trace  # ||X||_F^2 / N, the range caught whole
    spectrum = landscape.lanczos_spectrum(split, num_iters=60, progress=None, matrix="ggn")
    np.testing.assert_allclose(spectrum.ritz_values[::-1][:5], exact[:5], rtol=1e-4)
    assert spectrum.kind() is landscape.Curvature.INCONCLUSIVE  # G judges no point


def _softmax_outputs(params, data):
    return data[0] @ params["w"]


def _cross_entropy(z, data):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), data[1][:, None], axis=1))


def _linear_softmax(params, data):
    return _cross_entropy(_softmax_outputs(params, data), data)


def test_ggn_of_a_linear_softmax_model_is_its_hessian_at_d_1e5():
    # a linear model: the outputs' own curvature vanishes, so H = G = J^T H_z J exactly
    rng = np.random.default_rng(2)
    features, classes = 10_000, 10  # D = 10^5
    x = (rng.standard_normal((N, features)) / 30).astype(np.float32)
    y = rng.integers(0, classes, N)
    w = jnp.asarray(rng.standard_normal((features, classes)) / 10, jnp.float32)
    point = landscape.Point(
        {"w": w}, objective=_linear_softmax, inputs=(x, y), outputs=_softmax_outputs,
        output_loss=_cross_entropy,
    )  # fmt: skip
    vectors = jnp.asarray(rng.standard_normal((3, point.num_params)), jnp.float32)
    split = operator.gauss_newton(point.outputs, point.output_loss)
    hessian = np.asarray(operator.products(_linear_softmax, point.params, (x, y), vectors))
    ggn = np.asarray(operator.products(split, point.params, (x, y), vectors))
    scale = np.abs(hessian).max()
    np.testing.assert_allclose(ggn, hessian, atol=1e-5 * scale)  # float32 rounding
    assert scale > 0
