"""Results are data: every probe result has point, finite, describe(), summary() (one flat row of
plain numbers and strings) and a one-line repr; kind() gives the verdict as a `Curvature`."""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import landscape
from landscape import Curvature

PLAIN = (str, int, float, bool, type(None))


def _quadratic(eigenvalues, at=None, name="q"):
    """0.5 x^T diag(eigenvalues) x: the origin is a critical point with that spectrum; `at`
    moves the point (gradient diag(eigenvalues) @ at)."""
    diag = jnp.asarray(eigenvalues, jnp.float64)
    x0 = jnp.zeros(diag.size) if at is None else jnp.asarray(at, jnp.float64)
    return landscape.Point(
        {"x": x0},
        name=name,
        objective=_half_weighted_square,
        inputs=diag,
        outputs=_outputs,
        output_loss=_output_loss,
    )


def _half_weighted_square(params, diag):
    return _output_loss(_outputs(params, diag), diag)


def _outputs(params, diag):
    return params["x"]


def _output_loss(z, diag):
    return 0.5 * jnp.sum(diag * z**2)


def _row_is_plain(row):
    assert isinstance(row, dict) and row
    bad = {k: type(v).__name__ for k, v in row.items() if not isinstance(v, PLAIN)}
    assert not bad, f"summary values that are not plain numbers or strings: {bad}"


@pytest.mark.parametrize(
    "eigenvalues, kind",
    [
        ([1.0, 2.0, 3.0], Curvature.MINIMUM),
        ([0.0, 2.0, 3.0], Curvature.DEGENERATE_MINIMUM),
        ([-1.0, 2.0, 3.0], Curvature.SADDLE),
        ([-1.0, -2.0, -3.0], Curvature.MAXIMUM),
        ([-1.0, 0.0, -3.0], Curvature.DEGENERATE_MAXIMUM),
    ],
)
def test_the_hessians_kind_is_its_spectrums(eigenvalues, kind):
    hessian = landscape.hessian_at(_quadratic(eigenvalues), progress=None)
    assert hessian.kind() is kind
    row = hessian.summary()
    _row_is_plain(row)
    negative = sum(v < 0 for v in eigenvalues)
    assert row["kind"] == kind.value and row["num_negative"] == negative
    assert row["lambda_min"] == min(eigenvalues) and row["lambda_max"] == max(eigenvalues)
    assert row["num_zero"] == eigenvalues.count(0.0) and row["grad_norm"] == 0.0


def test_not_stationary_and_non_finite_come_before_the_spectrum():
    moved = landscape.hessian_at(_quadratic([1.0, 2.0], at=[1.0, 0.0]), progress=None)
    assert moved.gradient.norm == 1.0 and moved.gradient.kind() is Curvature.NOT_STATIONARY
    assert moved.gradient.kind(tol=1.5) is Curvature.STATIONARY  # a tolerance of the user's
    # a quadratic's model is exact: the Newton step -x reaches its minimum (notes §9)
    assert moved.kind() is Curvature.MINIMUM
    assert moved.summary()["stationary"] == "near" and moved.summary()["critical_distance"] == 1.0
    # L = x^4 at x = 1: the model predicts -2/3 at the step -1/3, the loss changes by -0.80
    quartic = landscape.Point({"x": jnp.ones(())}, lambda p: p["x"] ** 4, name="quartic")
    far = landscape.hessian_at(quartic, progress=None)
    assert far.kind() is Curvature.NOT_STATIONARY and far.summary()["stationary"] == "no"
    nan = landscape.Point({"x": jnp.zeros(2)}, lambda p: jnp.sum(jnp.log(p["x"] - 1.0)), name="nan")
    broken = landscape.hessian_at(nan, progress=None)
    assert broken.kind() is Curvature.NON_FINITE and broken.summary()["finite"] is False
    assert broken.summary()["kind"] == "non-finite"


def test_lanczos_proves_saddles_only():
    saddle = landscape.lanczos_spectrum(_quadratic([-1.0, 1.0, 2.0]), num_iters=3)
    assert saddle.kind() is Curvature.SADDLE
    assert saddle.lambda_min == pytest.approx(-1.0) and saddle.lambda_max == pytest.approx(2.0)
    positive = landscape.lanczos_spectrum(_quadratic([1.0, 2.0, 3.0]), num_iters=3)
    assert positive.kind() is Curvature.INCONCLUSIVE  # Ritz values never prove a minimum
    _row_is_plain(positive.summary())


def test_a_grid_of_points_is_a_table_with_one_row_per_point():
    """theta_pi over (p, q): kind, loss and gradient from the closed forms (Thm 2, tied: a minimum
    where p + q > 1, a saddle where p + q < 1; L = H(pi), the unigram entropy, notes §6)."""
    cells = [(0.3, 0.4), (0.6, 0.8), (0.2, 0.3)]
    grid = [landscape.markov.theta_pi(p=p, q=q, d=2, seq_len=4) for p, q in cells]
    table = pd.DataFrame([h.summary() for h in landscape.hessian_at(grid, progress=None)])
    assert list(table.p) == [0.3, 0.6, 0.2] and list(table.q) == [0.4, 0.8, 0.3]
    assert list(table.kind) == ["saddle", "minimum", "saddle"]
    pi1 = np.array([p / (p + q) for p, q in cells])
    entropy = -(pi1 * np.log(pi1) + (1 - pi1) * np.log(1 - pi1))
    np.testing.assert_allclose(table.loss, entropy, rtol=1e-12)
    assert (table.grad_norm < 1e-12).all() and (
        table.num_negative[table.kind == "saddle"] > 0
    ).all()
    for column in ("lambda_min", "lambda_max", "num_negative", "dim", "dtype", "point"):
        assert column in table


def _every_result():
    """One of each result type, at a small saddle."""
    point = _quadratic([-1.0, 0.5, 2.0, 3.0], name="saddle")
    other = _quadratic([-1.0, 0.5, 2.0, 3.0], at=[0.1, 0.2, 0.3, 0.4], name="moved")
    key = jax.random.key(0)
    hessian = landscape.hessian_at(point, progress=None)
    return [
        landscape.gradient_at(point),
        hessian,
        landscape.lanczos_spectrum(point, num_iters=4),
        landscape.spectral_density(point, num_probes=3, num_iters=4, key=key),
        landscape.trace(point, num_probes=4, key=key),
        landscape.diagonal(point, num_probes=4, key=key),
        landscape.eigenpairs(point, k=2),
        landscape.escape_directions(point),
        landscape.path(point, other, ts=np.linspace(0, 1, 5)),
        landscape.slice_2d(
            point,
            {"x": jnp.eye(4)[0]},
            {"x": jnp.eye(4)[1]},
            alphas=np.linspace(-1, 1, 3),
            betas=np.linspace(-1, 1, 3),
        ),
        landscape.ggn_at(point),
    ]


def test_every_result_follows_the_protocol():
    found = _every_result()
    for result in found:
        name = type(result).__name__
        assert isinstance(result, landscape.Result), name
        assert getattr(landscape, name) is type(result)  # exported
        assert result.finite is True, name
        _row_is_plain(result.summary())
        text = repr(result)
        assert "\n" not in text and len(text) < 160, (name, text)
        assert isinstance(result.describe(), str)
    kinds = {type(r).__name__: r.kind() for r in found if hasattr(r, "kind")}
    assert kinds == {
        "Gradient": Curvature.STATIONARY,
        "Hessian": Curvature.SADDLE,
        "Spectrum": Curvature.SADDLE,
        "EscapeDirections": Curvature.SADDLE,
    }
    assert found[-1].summary()["ggn_negative"] == 1  # here G = H: the output loss is the loss


def test_one_name_for_one_thing_across_results():
    gradient, hessian, spectrum, *_, eigen, escape, path, _, _ = _every_result()
    for result in (hessian, spectrum, eigen):
        assert result.lambda_min == pytest.approx(-1.0) and result.lambda_max == pytest.approx(3.0)
    assert escape.num_negative() == hessian.num_negative() == 1  # methods, both
    assert path.endpoints == ("saddle", "moved") and path.point.name == "saddle"
    assert hessian.names == gradient.names  # names: parameter blocks, everywhere
