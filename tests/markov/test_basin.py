"""The radius of the basin (notes/markov.md §14) against closed forms: a 1-D double well and
quadratics with a known linear term; the chance baseline of an overlap."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.markov import basin


def _well() -> landscape.Point:
    return landscape.Point({"x": jnp.zeros(1)}, lambda p: (p["x"][0] ** 2 - 1) ** 2, name="well")


def test_double_well_radius_is_where_the_well_falls_below_the_margin():
    """L = (x^2 - 1)^2 at its maximum x = 0: L(r) <= 1 - δ from r = sqrt(1 - sqrt(1 - δ)), on
    either side; the largest drop on the grid is 1 - L(r) nearest the minima at |x| = 1."""
    margins = [0.01, 0.1, 0.5, 0.99]
    result = basin.basin_radius(_well(), np.ones(1), margins, radius_max=2.0)
    exact = np.sqrt(1 - np.sqrt(1 - np.asarray(margins)))
    np.testing.assert_allclose(result.radii, exact, rtol=1e-5)
    assert set(result.sides.tolist()) <= {1, -1}
    assert result.loss == 1.0 and 0.99 < result.drop <= 1.0 and abs(abs(result.drop_at) - 1) < 0.1


def _quadratic(g: np.ndarray, h: np.ndarray) -> landscape.Point:
    def loss(p):
        return jnp.dot(g, p["x"]) + 0.5 * p["x"] @ h @ p["x"]

    return landscape.Point({"x": jnp.zeros(g.size)}, loss, name="quadratic")


def _exact(g: np.ndarray, h: np.ndarray, v: np.ndarray, delta: float) -> float:
    """The smallest r > 0 with a r^2 - |b| r + δ <= 0 (a = vHv/2, b = g.v): the side the
    gradient descends first; with a < 0 the other side too, farther."""
    a, b = 0.5 * v @ h @ v, abs(g @ v)
    if a < 0:
        return (-b + math.sqrt(b * b - 4 * a * delta)) / (-2 * a)
    if a == 0:
        return delta / b if b else math.inf
    disc = b * b - 4 * a * delta
    return (b - math.sqrt(disc)) / (2 * a) if disc >= 0 else math.inf


@pytest.mark.parametrize(
    "v",
    [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0], [1.0, 1.0, 1.0], [1.0, -2.0, 0.5]],
)
def test_quadratic_radius_matches_its_level_sets(v):
    """L = g.x + x H x / 2 at 0 (not a critical point: the trained points' case), H = diag(-2,
    1, 3): along unit v the loss is a r^2 + b r, so the radius solves a quadratic."""
    g, h = np.array([0.3, -0.2, 0.0]), np.diag([-2.0, 1.0, 3.0])
    v = np.asarray(v) / np.linalg.norm(v)
    margins = [0.001, 0.01, 0.1]
    result = basin.basin_radius(_quadratic(g, h), v, margins, radius_max=10.0)
    exact = np.array([_exact(g, h, v, d) for d in margins])
    assert np.array_equal(np.isinf(result.radii), np.isinf(exact)), (result.radii, exact)
    finite = np.isfinite(exact)
    np.testing.assert_allclose(result.radii[finite], exact[finite], rtol=1e-5)


def test_a_minimum_has_no_radius_and_the_direction_is_normalised():
    """At the minimum of a positive-definite quadratic no line falls: every radius is inf; the
    radius does not depend on the direction's length."""
    point = _quadratic(np.zeros(2), np.diag([1.0, 2.0]))
    assert np.all(
        np.isinf(basin.basin_radius(point, np.array([1.0, 1.0]), [1e-3], radius_max=5).radii)
    )
    saddle = _quadratic(np.zeros(2), np.diag([-1.0, 2.0]))
    short = basin.basin_radius(saddle, np.array([1e-3, 0.0]), [0.02], radius_max=5)
    long = basin.basin_radius(saddle, np.array([7.0, 0.0]), [0.02], radius_max=5)
    assert short.radii[0] == long.radii[0] == pytest.approx(0.2, rel=1e-5)  # sqrt(2 δ / 1)


def test_chance_overlap_is_the_root_mean_square_of_random_subspaces():
    """E |P u|^2 = k / D for a uniformly random k-dimensional subspace: the mean of the squared
    random overlaps is within three standard errors of it."""
    u = np.zeros(200)
    u[3] = 1.0
    draws = basin.random_overlaps(u, 4, 400, seed=1)
    squared = draws**2
    assert basin.chance_overlap_rms(4, 200) == pytest.approx(math.sqrt(4 / 200))
    assert abs(squared.mean() - 4 / 200) < 3 * squared.std() / math.sqrt(squared.size)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(margins=[]), "margins"),
        (dict(margins=[-0.1]), "margins"),
        (dict(radius_max=0.0), "radius_max"),
        (dict(num_radii=1), "num_radii"),
        (dict(direction=np.zeros(1)), "direction has norm 0"),
        (dict(direction=np.ones(2)), "direction has 2 entries"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    args = dict(direction=np.ones(1), margins=[0.1], radius_max=1.0) | kwargs
    direction = args.pop("direction")
    margins = args.pop("margins")
    with pytest.raises((ValueError, TypeError), match=message):
        basin.basin_radius(_well(), direction, margins, **args)
