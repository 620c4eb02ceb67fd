"""Curvature engine: names and slices, exact gradients and Hessians, verdicts, Lanczos."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from landscape.point import Point, param_names, params_table
from landscape.probes import hessian as hessian_lib
from landscape.probes.curvature import hessian_at
from landscape.probes.gradient import gradient_at, hvp
from landscape.probes.lanczos import lanczos_spectrum
from landscape.probes.results import Curvature


def _random_symmetric(dim, seed):
    a = np.random.default_rng(seed).normal(size=(dim, dim))
    return (a + a.T) / np.sqrt(2 * dim)


def _quadratic_point(matrix, linear, x0, split, **kwargs):
    """0.5 x^T A x + b^T x with x = concat(u.ravel(), v), u of shape `split`."""
    size_u = int(np.prod(split))
    params = {"u": jnp.asarray(x0[:size_u].reshape(split)), "v": jnp.asarray(x0[size_u:])}

    def loss_fn(p):
        x = jnp.concatenate([p["u"].ravel(), p["v"]])
        return 0.5 * x @ matrix @ x + linear @ x

    return Point(params, loss_fn, **kwargs)


def _scalar_point(f, x, y, **kwargs):
    return Point({"x": jnp.float64(x), "y": jnp.float64(y)}, lambda p: f(p["x"], p["y"]), **kwargs)


def test_param_names_match_ravel_pytree():
    rng = np.random.default_rng(0)
    params = {
        "layer0": {"W_Q": rng.normal(size=(2, 3)), "b": rng.normal(size=(3,))},
        "Y": rng.normal(size=(4,)),
        "blocks": [{"W_K": rng.normal(size=(2, 2))}, {"W_K": rng.normal(size=(1, 5))}],
        "scale": np.float64(1.5),
    }
    flat = np.asarray(ravel_pytree(params)[0])
    names = param_names(params)
    assert [n for n, _, _ in names] == [
        "Y",
        "blocks/0/W_K",
        "blocks/1/W_K",
        "layer0/W_Q",
        "layer0/b",
        "scale",
    ]
    leaves = jax.tree_util.tree_leaves(params)
    assert names[-1][1].stop == flat.size
    for (_, s, shape), leaf in zip(names, leaves, strict=True):
        assert shape == np.shape(leaf)
        np.testing.assert_array_equal(flat[s], np.ravel(leaf))

    point = Point(params, lambda p: 0.0)
    assert point.num_params == flat.size == 2 * 3 + 3 + 4 + 4 + 5 + 1
    assert params_table(point) == params_table(params)  # a Point stands for its params
    assert params_table(params).splitlines()[-1].endswith(f"{flat.size:>9,}")
    assert point.with_params({"a": np.zeros(2)}).num_params == 2


def test_quadratic_gradient_and_hessian_blocks():
    rng = np.random.default_rng(1)
    matrix = _random_symmetric(7, seed=1)
    linear = rng.normal(size=7)
    x0 = rng.normal(size=7)
    point = _quadratic_point(matrix, linear, x0, split=(2, 2), name="quadratic")

    assert point.loss() == pytest.approx(0.5 * x0 @ matrix @ x0 + linear @ x0, rel=1e-14)
    gradient = gradient_at(point)
    np.testing.assert_allclose(gradient.vector, matrix @ x0 + linear, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(gradient.block("v"), (matrix @ x0 + linear)[4:], rtol=1e-13)
    assert gradient.norm == pytest.approx(np.linalg.norm(matrix @ x0 + linear), rel=1e-13)
    assert gradient.block_norms()["u"] == pytest.approx(np.linalg.norm((matrix @ x0 + linear)[:4]))

    hessian = hessian_at(point)
    np.testing.assert_allclose(hessian.matrix, matrix, rtol=0, atol=1e-15)
    np.testing.assert_allclose(hessian.block("u"), matrix[:4, :4], rtol=0, atol=1e-15)
    np.testing.assert_allclose(hessian.block("u", "v"), matrix[:4, 4:], rtol=0, atol=1e-15)
    np.testing.assert_allclose(hessian.block("v", "u"), matrix[4:, :4], rtol=0, atol=1e-15)
    np.testing.assert_allclose(hessian.eigenvalues, np.linalg.eigvalsh(matrix), atol=1e-13)
    with pytest.raises(KeyError, match="available: u, v"):
        hessian.block("w")


def test_block_prefix_selects_all_leaves_of_a_group():
    params = {
        "layer0": {"W_Q": jnp.ones((2,)), "b": jnp.ones((1,))},
        "layer1": {"W_Q": jnp.ones(2)},
    }
    weights = jnp.arange(1.0, 6.0)
    point = Point(params, lambda p: 0.5 * jnp.sum(weights * ravel_pytree(p)[0] ** 2))
    hessian = hessian_at(point, columns_per_batch=2)  # exercises the remainder batch
    np.testing.assert_allclose(hessian.block("layer0"), np.diag([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(hessian.block("layer0/b", "layer1"), np.zeros((1, 2)))
    np.testing.assert_allclose(hessian.block("layer1/W_Q"), np.diag([4.0, 5.0]))
    with pytest.raises(KeyError):
        hessian.block("layer")  # a prefix must end at a "/"


@pytest.mark.parametrize(
    "f, verdict",
    [
        (lambda x, y: x**2 - y**2 + x * y**3, "saddle (1 negative eigenvalue)"),
        (lambda x, y: x**2 + x * y + y**2 + x**2 * y**2, "local minimum (positive definite)"),
        (
            lambda x, y: x**2 + y**4,
            "degenerate minimum candidate (positive semi-definite with 1 zero mode)",
        ),
        (lambda x, y: -(x**2) - 3 * y**2 + x**3, "local maximum (negative definite)"),
    ],
)
def test_verdicts_at_the_origin(f, verdict):
    hessian = hessian_at(_scalar_point(f, 0.0, 0.0))
    assert gradient_at(hessian.point).norm == 0.0
    assert hessian.verdict() == verdict


def test_saddle_eigenvalues_and_tolerances():
    hessian = hessian_at(_scalar_point(lambda x, y: x**2 - y**2 + x * y**3, 0.0, 0.0))
    np.testing.assert_allclose(hessian.eigenvalues, [-2.0, 2.0])
    assert hessian.num_negative() == 1 and hessian.num_zero() == 0
    # An absolute tolerance above |λ| turns every eigenvalue into a zero mode.
    assert hessian.num_zero(tol=3.0) == 2
    assert hessian.kind(tol=3.0) is Curvature.DEGENERATE_MINIMUM
    assert "degenerate minimum candidate" in hessian.verdict(tol=3.0)


def test_hvp_equals_dense_hessian_times_vector():
    rng = np.random.default_rng(2)
    params = {
        "a": {"W": jnp.asarray(rng.normal(size=(3, 2)))},
        "c": jnp.asarray(rng.normal(size=4)),
    }

    def loss_fn(p):
        hidden = jnp.tanh(p["a"]["W"].T @ p["c"][:3])
        return jnp.sum(hidden**3) + jnp.exp(p["c"][3] * hidden[0]) + jnp.sum(p["a"]["W"] ** 4)

    point = Point(params, loss_fn)
    tangent = {
        "a": {"W": jnp.asarray(rng.normal(size=(3, 2)))},
        "c": jnp.asarray(rng.normal(size=4)),
    }
    product = ravel_pytree(hvp(point)(tangent))[0]
    hessian = hessian_at(point)
    np.testing.assert_allclose(product, hessian.matrix @ ravel_pytree(tangent)[0], rtol=1e-12)
    flat, unravel = ravel_pytree(params)
    reference = jax.jit(jax.hessian(lambda x: loss_fn(unravel(x))))(flat)
    np.testing.assert_allclose(hessian.matrix, reference, rtol=1e-12, atol=1e-14)


def test_lanczos_recovers_extreme_and_full_spectrum():
    dim = 300
    matrix = _random_symmetric(dim, seed=3)
    exact = np.linalg.eigvalsh(matrix)
    point = _quadratic_point(matrix, np.zeros(dim), np.zeros(dim), split=(10, 10))

    spectrum = lanczos_spectrum(point, num_iters=80, key=jax.random.key(1))
    assert spectrum.ritz_values.size == 80
    assert spectrum.lambda_min == pytest.approx(exact[0], rel=1e-8)
    assert spectrum.lambda_max == pytest.approx(exact[-1], rel=1e-8)
    assert spectrum.weights.sum() == pytest.approx(1.0, rel=1e-12)
    assert "negative curvature found → saddle" in spectrum.verdict()

    full = hessian_at(point, method="lanczos", num_iters=dim, key=jax.random.key(2))
    np.testing.assert_allclose(full.ritz_values, exact, rtol=0, atol=1e-8 * np.abs(exact).max())


def test_lanczos_on_a_positive_definite_point_does_not_claim_a_minimum():
    # Eigenvalues 1..5, each 10 times: the Krylov space is exhausted after 5 steps and Lanczos
    # restarts (beta = 0), so every Ritz value is still an exact eigenvalue.
    rotation = np.linalg.qr(np.random.default_rng(4).normal(size=(50, 50)))[0]
    matrix = rotation @ np.diag(np.repeat(np.arange(1.0, 6.0), 10)) @ rotation.T
    point = _quadratic_point(
        matrix, np.zeros(50), np.zeros(50), split=(5,), meta={"prediction": "minimum"}
    )
    spectrum = lanczos_spectrum(point, num_iters=20)
    np.testing.assert_allclose(spectrum.ritz_values[[0, -1]], [1.0, 5.0], rtol=1e-12)
    np.testing.assert_allclose(np.unique(np.round(spectrum.ritz_values, 8)), np.arange(1.0, 6.0))
    assert spectrum.verdict().endswith("(not a proof of a minimum)")
    assert "prediction (theory)  minimum" in spectrum.describe()


def test_describe_reports_blocks_verdict_and_prediction():
    def f(x, y):
        return x**2 - y**2 + x * y**3 + 0.5 * x * y

    point = _scalar_point(
        f, 0.0, 0.0, name="origin", meta={"prediction": "saddle (Prop. 1)", "expected_loss": 0.0}
    )
    hessian = hessian_at(point)
    report = hessian.describe()
    for text in [
        "Hessian at origin",
        "D = 2",
        "\n  x     ()",
        "\n  y     ()",
        "x × y: 0.5",
        "verdict (measured)   saddle (1 negative eigenvalue)",
        "prediction (theory)  saddle (Prop. 1)",
        "(expected 0, difference 0.00e+00)",
    ]:
        assert text in report
    assert "prediction" not in hessian_at(_scalar_point(f, 0.0, 0.0)).describe()
    assert repr(hessian) == "Hessian('origin', D=2, dtype=float64, kind='saddle')"
    assert "\n  y     ()" in gradient_at(point).describe()


def test_dense_hessian_refuses_large_dimensions():
    point = Point({"w": jnp.zeros(11)}, lambda p: jnp.sum(p["w"] ** 2), name="wide")
    with pytest.raises(ValueError, match=r"D = 11 .*max_dense_dim = 10.*method='lanczos'"):
        hessian_at(point, max_dense_dim=10)
    with pytest.raises(ValueError, match="method='newton'"):
        hessian_at(point, method="newton")


def test_joint_blocks_and_focus_verdict():
    """A list of names selects a joint block; with meta['focus_blocks'] a PSD Hessian that is
    PD on the focus and zero elsewhere is called a local minimum, with the stated argument."""

    def loss(p):
        return p["x"][0] ** 2 + 3 * p["x"][1] ** 2 + 0.5 * p["b"] ** 2 + 0.0 * p["y"].sum()

    params = {"x": jnp.zeros(2), "y": jnp.zeros(3), "b": jnp.zeros(())}
    plain = hessian_at(Point(params, loss))
    np.testing.assert_allclose(plain.block(["b", "x"]), np.diag([1.0, 2.0, 6.0]))
    assert plain.kind() is Curvature.DEGENERATE_MINIMUM
    focused = hessian_at(
        Point(
            params,
            loss,
            meta={
                "focus_blocks": ["b", "x"],
                "flat_argument": "L does not depend on y",
                "focus_prediction": [1.0, 2.0, 6.0],
            },
        )
    )
    assert focused.verdict() == (
        "local minimum (PSD: positive definite on b, x, zero elsewhere; L does not depend on y)"
    )
    text = focused.describe()
    assert "focus block (b, x)" in text and "predicted" in text
    saddle = hessian_at(
        Point(params, lambda p: loss(p) - p["y"][0] ** 2, meta={"focus_blocks": ["b", "x"]})
    )
    assert saddle.kind() is Curvature.SADDLE and "saddle (1 negative" in saddle.verdict()


def test_restrict_gives_the_block_of_the_full_hessian():
    from landscape.point import restrict

    rng = np.random.default_rng(3)
    A = rng.normal(size=(6, 6))
    A = A @ A.T

    def loss(p):
        v = jnp.concatenate([p["u"], p["w"]["x"], jnp.atleast_1d(p["b"])])
        return 0.5 * v @ A @ v + jnp.sin(v).sum()

    params = {
        "u": jnp.asarray(rng.normal(size=2)),
        "w": {"x": jnp.asarray(rng.normal(size=3))},
        "b": jnp.asarray(0.3),
    }
    full = hessian_at(Point(params, loss))
    sub = hessian_at(restrict(Point(params, loss), ["b", "w"]))
    np.testing.assert_allclose(sub.block(["b", "w"]), full.block(["b", "w"]), atol=1e-12)
    with pytest.raises(KeyError, match="no parameter named"):
        restrict(Point(params, loss), ["nope"])


def test_a_point_that_is_not_critical_gets_no_curvature_verdict():
    """A saddle at |g| = 5 whose quartic term breaks the quadratic model over the Newton step:
    'not stationary', before any curvature (notes/landscape_geometry.md §9). Without the quartic
    term the model is the loss, and the point is near-stationary, its critical point 1 away."""

    def loss(p):
        return 0.5 * p["x"] ** 2 - p["y"] ** 2 + p["x"] ** 4

    point = Point({"x": jnp.asarray(1.0), "y": jnp.asarray(0.0)}, loss, name="off-critical")
    hessian = hessian_at(point)
    np.testing.assert_allclose(hessian.eigenvalues, [-2.0, 13.0])  # a saddle's spectrum
    assert hessian.kind() is Curvature.NOT_STATIONARY
    assert "not stationary (|g| = 5.000e+00 > sqrt(eps) max(1, |L|)" in hessian.verdict()
    assert "verdict (measured)   not stationary" in hessian.describe()
    assert lanczos_spectrum(point, num_iters=2).kind() is Curvature.NOT_STATIONARY
    quadratic = hessian_at(Point(point.params, lambda p: 0.5 * p["x"] ** 2 - p["y"] ** 2))
    assert quadratic.kind() is Curvature.SADDLE
    assert quadratic.verdict() == (
        "near-stationary saddle (1 negative eigenvalue): its critical point 1 away"
    )
    at_origin = hessian_at(point.with_params({"x": jnp.asarray(0.0), "y": jnp.asarray(0.0)}))
    assert at_origin.gradient.kind() is Curvature.STATIONARY
    assert "stationary (|g| = 0.000e+00" in at_origin.gradient.verdict()
    assert at_origin.verdict() == "saddle (1 negative eigenvalue)"


class _BadOnce:
    """compiled.hessian whose first executable returns a NaN matrix (the rare XLA:CPU fault of
    docs/design/curvature.md), until its cache is cleared."""

    def __init__(self, real):
        self.real, self.bad, self.cleared = real, True, 0

    def __call__(self, *args):
        loss, grad, matrix = self.real(*args)
        return loss, grad, matrix * jnp.nan if self.bad else matrix

    def clear_cache(self):
        self.bad, self.cleared = False, self.cleared + 1


def _cubic(params, inputs):
    return jnp.sum(inputs * params["x"] ** 2) + jnp.sum(params["x"] ** 3)


def test_a_bad_executable_is_replaced_by_a_fresh_compile_and_said(monkeypatch):
    from landscape.core import compiled

    point = Point({"x": jnp.array([1.0, -2.0])}, objective=_cubic, inputs=jnp.array([0.5, 1.5]))
    fake = _BadOnce(compiled.hessian)
    monkeypatch.setattr(compiled, "hessian", fake)
    with pytest.warns(RuntimeWarning, match="a fresh compile of it gave finite ones"):
        H = hessian_at(point)
    assert fake.cleared == 1 and H.finite
    np.testing.assert_allclose(H.matrix, np.diag([2 * 0.5 + 6 * 1.0, 2 * 1.5 - 12.0]))


def test_a_nonfinite_loss_is_not_recompiled(monkeypatch):
    from landscape.core import compiled

    point = Point({"x": jnp.array([jnp.nan, 1.0])}, objective=_cubic, inputs=jnp.array([0.5, 1.5]))
    fake = _BadOnce(compiled.hessian)
    monkeypatch.setattr(compiled, "hessian", fake)
    H = hessian_at(point)
    assert fake.cleared == 0 and not H.finite and H.verdict() == "non-finite"


def test_block_extremes_of_a_large_block_are_eigvalshs():
    """describe()'s per-block λ_min, λ_max: ARPACK's Lanczos above LANCZOS_BLOCKS_ABOVE rows
    (about 5x faster than eigvalsh on the n-gram A1 block, 2048 rows) gives eigvalsh's numbers,
    on a spectrum with a 100-fold degenerate zero and clustered ends."""
    size = hessian_lib.LANCZOS_BLOCKS_ABOVE + 88
    rng = np.random.default_rng(5)
    values = np.concatenate([np.zeros(100), rng.uniform(-1, 2, size - 102), [-1.0, 2.0]])
    rotation, _ = np.linalg.qr(rng.normal(size=(size, size)))
    block = (rotation * values) @ rotation.T
    exact = np.linalg.eigvalsh(block)
    np.testing.assert_allclose(
        hessian_lib.block_extremes(block), exact[[0, -1]], rtol=0, atol=1e-12
    )
    small = block[:100, :100]
    assert hessian_lib.block_extremes(small) == tuple(np.linalg.eigvalsh(small)[[0, -1]])
