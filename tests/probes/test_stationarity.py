"""landscape/probes/stationarity.py: the near-stationary rule of notes/landscape_geometry.md §9
(the Newton step to the quadratic model's critical point, its checks, the verdict there)."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import landscape
from landscape.point import Point, block_indices, param_names
from landscape.probes import stationarity
from landscape.probes.curvature import hessian_at
from landscape.probes.results import Curvature


def _quadratic(matrix, linear, x0, name="quadratic"):
    """L(x) = ½ xᵀAx + bᵀx at x0."""
    matrix, linear = jnp.asarray(matrix), jnp.asarray(linear)

    def loss(p):
        return 0.5 * p["x"] @ matrix @ p["x"] + linear @ p["x"]

    return Point({"x": jnp.asarray(x0)}, loss, name=name)


def test_quadratic_with_a_linear_term_gets_its_exact_critical_point():
    """A saddle quadratic (eigenvalues 2, 0.5, -1 in a rotated basis): from any x the step is
    -A⁻¹(Ax + b), exactly to the critical point -A⁻¹b; the model is the loss and κ = 0."""
    rotation, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))
    matrix = rotation @ np.diag([2.0, 0.5, -1.0]) @ rotation.T
    linear, x0 = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.1, -0.4])
    hessian = hessian_at(_quadratic(matrix, linear, x0))
    near = hessian.near_stationary()
    expected = -np.linalg.solve(matrix, matrix @ x0 + linear)
    np.testing.assert_allclose(near.step, expected, rtol=0, atol=1e-12)
    assert near.distance == pytest.approx(np.linalg.norm(expected), rel=1e-12)
    # ΔL = Δm = -½ gᵀA⁻¹g for a quadratic
    g = matrix @ x0 + linear
    assert near.predicted == pytest.approx(-0.5 * g @ np.linalg.solve(matrix, g), rel=1e-12)
    assert near.measured == pytest.approx(near.predicted, rel=1e-10)
    assert near.curvature_change <= 1e-12 and near.gradient_there <= 1e-12
    assert near.trusted and near.rounds == 1 and near.cut == hessian.tolerance()
    assert near.num_negative == 1 and near.num_zero == 0
    distance = f"{np.linalg.norm(expected):.2g}"
    verdict = f"near-stationary saddle (1 negative eigenvalue): its critical point {distance} away"
    assert hessian.verdict() == near.verdict() == verdict
    assert "near-stationary check" in hessian.describe()


def test_a_gradient_along_a_flat_direction_is_not_stationary():
    """L = ½ x² + y: the y direction has λ = 0, so no Newton step removes its gradient; with a
    gradient tolerance above |g| the point counts as stationary and gets the exact verdict."""
    hessian = hessian_at(_quadratic(np.diag([1.0, 0.0]), [0.0, 1.0], [0.5, 0.0]))
    near = hessian.near_stationary()
    assert not near.trusted and near.flat_gradient == pytest.approx(1.0)
    np.testing.assert_allclose(near.step, [-0.5, 0.0], atol=1e-15)
    assert "no Newton step removes" in near.reason
    assert hessian.kind() is Curvature.NOT_STATIONARY
    assert "not stationary (|g| = 1.118e+00 > sqrt(eps) max(1, |L|)" in hessian.verdict()
    assert hessian.verdict(grad_tol=2.0) == (
        "degenerate minimum candidate (positive semi-definite with 1 zero mode)"
    )
    assert hessian.kind(grad_tol=2.0) is Curvature.DEGENERATE_MINIMUM
    assert "not stationary (|g| = 1.118e+00 > grad_tol" in hessian.verdict(grad_tol=0.5)


def test_a_step_through_a_tiny_eigenvalue_is_cut_back_by_bisection():
    """L = ½x² + 1e-8 y²/2 + 1e-3 y + y⁴ at (0.1, 0): at the eigenvalue tolerance (1e-9) the step
    divides 1e-3 by 1e-8 and lands 1e5 away, where y⁴ changes the curvature by ~1e11, more than
    every eigenvalue; bisection over the cuts finds 1e-8, the step back to x = 0 alone (exact,
    κ = 0), and y's 1e-3 of gradient is within rtol = 0.1 of |g| = 0.1."""

    def loss(p):
        return 0.5 * p["x"] ** 2 + 0.5e-8 * p["y"] ** 2 + 1e-3 * p["y"] + p["y"] ** 4

    hessian = hessian_at(Point({"x": jnp.asarray(0.1), "y": jnp.asarray(0.0)}, loss))
    near = hessian.near_stationary()
    assert near.rounds == 2 and near.cut == pytest.approx(1e-8, rel=1e-6)
    np.testing.assert_allclose(near.step, [-0.1, 0.0], rtol=0, atol=1e-15)
    assert near.trusted and near.flat_gradient == pytest.approx(1e-3, rel=1e-12)
    assert hessian.verdict() == (
        "near-stationary degenerate minimum candidate (positive semi-definite with 1 zero mode): "
        "its critical point 0.1 away"
    )
    strict = hessian.near_stationary(rtol=1e-3)  # y's gradient is now too large a share
    assert not strict.trusted and "no Newton step removes" in strict.reason


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"grad_tol": -1.0}, "grad_tol"), ({"rtol": 0.0}, "rtol")]
)
def test_bad_tolerances_name_the_argument(kwargs, name):
    hessian = hessian_at(_quadratic(np.eye(2), [1.0, 0.0], [0.0, 0.0]))
    with pytest.raises(ValueError, match=f"^{name} = "):
        hessian.near_stationary(**kwargs)


def _moved_theta_pi(tied, radius, blocks=None):
    """theta_pi(0.5, 0.8) (the tied minimum of Thm 2, the untied saddle of Thm 3) and the point
    moved by `radius` in a random unit direction (restricted to `blocks` when given)."""
    point = landscape.markov.theta_pi(0.5, 0.8, tied=tied)
    flat, unravel = ravel_pytree(point.params)
    direction = np.random.default_rng(1).normal(size=flat.size)
    if blocks is not None:
        inside = block_indices(param_names(point.params), list(blocks))
        direction = np.where(np.isin(np.arange(flat.size), inside), direction, 0.0)
    delta = radius * direction / np.linalg.norm(direction)
    return point, point.with_params(unravel(flat + delta)), delta


@pytest.mark.slow
@pytest.mark.parametrize("tied", [True, False])
def test_theta_pi_moved_slightly_is_near_stationary(tied):
    """Moved by 1e-2, theta_pi's zero modes split into eigenvalues of either sign (up to ~2e-4);
    the cut rises to the curvature change over the step and the verdict is theta_pi's: a
    degenerate minimum with all its zero modes (tied), a saddle with 4 negative eigenvalues
    (untied), its critical point closer than the move."""
    exact = hessian_at(_moved_theta_pi(tied, 0.0)[0])
    zero_modes = exact.num_zero()
    hessian = hessian_at(_moved_theta_pi(tied, 1e-2)[1])
    assert hessian.num_negative() > (0 if tied else 4)  # at the eigenvalue tolerance
    near = hessian.near_stationary()
    assert near.trusted and near.cut > 1e3 * hessian.tolerance() and 0 < near.distance < 1e-2
    assert abs(near.measured - near.predicted) <= 0.01 * abs(near.predicted)
    if tied:
        assert (near.num_negative, near.num_zero) == (0, zero_modes)
        assert near.kind() is Curvature.DEGENERATE_MINIMUM
    else:
        assert (near.num_negative, near.num_zero) == (exact.num_negative(), zero_modes) == (4, 232)
    assert hessian.verdict() == near.verdict()
    assert f"near-stationary {near.curvature()}: its critical point" in hessian.verdict()
    assert (
        hessian.kind()
        is near.kind()
        is (Curvature.DEGENERATE_MINIMUM if tied else Curvature.SADDLE)
    )


@pytest.mark.slow
def test_theta_pi_moved_along_b_and_e_steps_back():
    """Moved along the focus blocks (b, e) alone, where the tied minimum is positive definite,
    the Newton step returns to theta_pi up to the second order of the move."""
    _, moved, delta = _moved_theta_pi(True, 1e-3, blocks=("b", "e"))
    near = hessian_at(moved).near_stationary()
    assert near.trusted
    np.testing.assert_allclose(near.step, -delta, rtol=0, atol=1e-2 * np.linalg.norm(delta))


@pytest.mark.parametrize(  # the tied case (19 s): -m slow, for the CI budget
    ("tied", "radius"), [pytest.param(True, 3.0, marks=pytest.mark.slow), (False, 1.0)]
)
def test_far_from_theta_pi_is_not_stationary(tied, radius):
    hessian = hessian_at(_moved_theta_pi(tied, radius)[1])
    near = hessian.near_stationary()
    assert not near.trusted and near.reason
    assert hessian.verdict() == near.verdict()
    assert (
        hessian.kind() is Curvature.NOT_STATIONARY and "not stationary (|g| = " in hessian.verdict()
    )
    assert f"its quadratic model is not trusted: {near.reason}" in hessian.verdict()


def test_the_rule_is_cached_per_tolerance():
    hessian = hessian_at(_quadratic(np.diag([1.0, -1.0]), [1.0, 1.0], [0.0, 0.0]))
    assert hessian.near_stationary() is hessian.near_stationary()
    assert hessian.near_stationary(rtol=0.5) is not hessian.near_stationary()
    assert stationarity.MODEL_RTOL == hessian.near_stationary().rtol == 0.1
