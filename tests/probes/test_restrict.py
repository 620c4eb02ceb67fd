"""restrict(point, blocks): a block of the Hessian without the rest, compiled once per model."""

import numpy as np

import landscape
from landscape.core import compiled


def _theta_pi(p, tied=False):
    return landscape.markov.theta_pi(p=p, q=0.8, seq_len=5, tied=tied)


def test_restricted_hessian_is_the_block_and_new_points_reuse_the_program():
    full = landscape.hessian_at(_theta_pi(0.5), progress=None)
    small = landscape.hessian_at(landscape.restrict(_theta_pi(0.5), ["b", "e", "a"]))
    np.testing.assert_allclose(small.matrix, full.block(["a", "b", "e"]), atol=1e-14)
    programs = compiled.hessian._cache_size()
    other = landscape.hessian_at(landscape.restrict(_theta_pi(0.3), ["b", "e", "a"]))
    assert compiled.hessian._cache_size() == programs  # a new (p, q): no new compile
    pi0pi1 = 0.3 * 0.8 / 1.1**2  # untied, Thm 3: +-pi0 pi1 |p + q - 1| (d-fold) and pi0 pi1
    np.testing.assert_allclose(other.eigenvalues[:4], -pi0pi1 * 0.1, rtol=1e-9)


def test_restricted_points_keep_the_gauss_newton_split():
    point = landscape.restrict(_theta_pi(0.5), ["b", "e", "a"])
    result = landscape.ggn_at(point)
    assert result.ggn_eigenvalues[0] > -1e-12  # G is PSD
    assert np.abs(result.block("e")).max() == 0.0  # a = 0: the logit is flat in e to first order
    np.testing.assert_allclose(result.block("b"), [[0.5 * 0.8 / 1.3**2]], rtol=1e-12)


def test_a_restricted_point_is_not_sliced_by_population():
    """restrict's inputs hold the fixed leaves beside the population, so the restricted point
    drops meta["population"] (probes would otherwise slice the leaves too)."""
    point = landscape.markov.theta_pi(p=0.5, q=0.8, seq_len=6)
    assert point.meta["population"] == "sum"
    assert "population" not in landscape.restrict(point, ["b", "e"]).meta
