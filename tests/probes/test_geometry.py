"""Paths, barriers, Bézier curves and 2-D slices (landscape/probes/geometry.py) against closed forms
(docs/notes/landscape_geometry.md): the Markov theory model where only b and e (and a) are
non-zero, a convex quadratic, a double well and a ring-shaped valley."""

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pytest

import landscape
from landscape.core import budget, memory
from landscape.markov import theory
from landscape.probes import figures as probe_figures
from landscape.probes import geometry, slices

TOL = 1e-10  # float64 closed forms against the model code: observed differences ~1e-15


def _theta_pi(p, q, **kw):
    return landscape.markov.theta_pi(p=p, q=q, seq_len=6, **kw)


def _softplus(z):
    return np.logaddexp(0.0, z)


def markov_loss(b, s, p, q):
    """L(b, s) of notes §4: the population loss where the logit is s x_n + b."""
    pi0, pi1 = q / (p + q), p / (p + q)
    from_0 = p * _softplus(-b) + (1 - p) * _softplus(b)  # x_n = 0: P(1|0) = p
    from_1 = (1 - q) * _softplus(-(s + b)) + q * _softplus(s + b)  # x_n = 1: P(1|1) = 1 - q
    return pi0 * from_0 + pi1 * from_1


def _zeros_like(point, **blocks):
    """A direction zero everywhere but in the named leaves ("block_0/W_Q" written block_0__W_Q)."""
    tree = jax.tree.map(np.zeros_like, point.params)
    for name, value in blocks.items():
        *path, leaf = name.split("__")
        node = tree
        for key in path:
            node = node[key]
        node[leaf] = np.asarray(value, np.float64)
    return tree


def _set(point, **leaves):
    params = jax.tree.map(np.asarray, point.params)
    params.update({k: np.asarray(v, np.float64) for k, v in leaves.items()})
    return point.with_params(params)


# ----------------------------------------------------------------------------- toy landscapes


def _double_well(params):
    return (params["x"] ** 2 - 1.0) ** 2


def _ring(params):
    return (jnp.sqrt(params["x"] ** 2 + params["y"] ** 2) - 1.0) ** 2


A = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 0.7]])  # positive definite
C = np.array([0.4, -1.0, 0.2])


def _quadratic(params):
    x = params["x"]
    return 0.5 * x @ jnp.asarray(A) @ x + jnp.asarray(C) @ x


def test_double_well_barrier_is_exactly_one():
    a = landscape.Point({"x": jnp.array(-1.0)}, _double_well, name="x = -1")
    result = geometry.path(a, a.with_params({"x": jnp.array(1.0)}))
    # notes §1: L(t) = 16 t^2 (1 - t)^2, its peak 1 at t = 1/2 (a grid point), ends 0
    np.testing.assert_allclose(result.losses, 16 * result.ts**2 * (1 - result.ts) ** 2, atol=1e-14)
    assert result.barrier == 1.0 and result.argmax_t == 0.5
    assert result.loss_a == result.loss_b == 0.0
    assert "barrier 1 at t = 0.5" in result.describe()


def test_convex_quadratic_path_is_the_closed_form_with_no_barrier():
    x0, x1 = np.array([1.0, -2.0, 0.5]), np.array([-1.5, 0.3, 2.0])
    a = landscape.Point({"x": jnp.asarray(x0)}, _quadratic)
    ts = np.linspace(-0.25, 1.25, 61)  # outside [0, 1] extrapolates; the barrier ignores it
    result = geometry.path(a, a.with_params({"x": jnp.asarray(x1)}), ts)
    xs = (1 - ts)[:, None] * x0 + ts[:, None] * x1
    exact = 0.5 * np.einsum("ti,ij,tj->t", xs, A, xs) + xs @ C
    np.testing.assert_allclose(result.losses, exact, rtol=1e-13)
    # convex along the line: the maximum over [0, 1] is at an end (notes §1)
    assert 0.0 <= result.barrier <= 1e-13 and result.argmax_t in (0.0, 1.0)


def test_bezier_curve_bends_around_the_ring_valley():
    a = landscape.Point({"x": jnp.array(-1.0), "y": jnp.array(0.0)}, _ring, name="(-1, 0)")
    b = a.with_params({"x": jnp.array(1.0), "y": jnp.array(0.0)})
    straight = geometry.path(a, b)
    assert straight.barrier == 1.0 and straight.argmax_t == 0.5  # through r = 0 (notes §2)
    fine = np.linspace(0.0, 1.0, 401)
    curve = geometry.bezier_path(a, b, ts=fine, key=jax.random.key(3))
    # notes §2: m = (0, ±2) already gives a barrier below (1 - sqrt(3)/2)^2 = 0.018; the fit
    # minimises the mean, not the max, and lands near m = (0, ±2.13), barrier ~0.014
    assert curve.barrier < 0.05
    assert abs(float(curve.midpoint["y"])) > 1.5 and abs(float(curve.midpoint["x"])) < 0.1
    assert curve.loss_a == 0.0 and curve.loss_b == 0.0
    # the fit's minibatch losses estimate E_t L(phi(t)) at the fitted curve (stratified t's)
    mean, stderr = curve.fitted_loss()
    quadrature = np.trapezoid(curve.losses, fine)
    assert abs(mean - quadrature) < 4 * stderr
    assert "Bézier" in curve.describe() and "±" in curve.describe()


# ----------------------------------------------------------------------------- Markov closed forms


def test_closed_form_at_theta_pi_is_the_unigram_loss():
    for p, q in ((0.5, 0.8), (0.2, 0.3)):
        expected = float(theory.unigram_loss(p, q))
        assert abs(markov_loss(np.log(p / q), 0.0, p, q) - expected) < 1e-14
        assert abs(_theta_pi(p, q).loss() - expected) < TOL


def test_slice_in_a_b_e_plane_is_the_closed_form_and_reuses_its_program():
    # rest="random" and directions with W_Q, W_K, W_V, W_1 parts: W_O = W_2 = 0 kill them all
    point = _theta_pi(0.5, 0.8, rest="random")
    rng = np.random.default_rng(0)
    w = rng.normal(size=4)
    u = _zeros_like(point, b=0.7, block_0__W_Q=rng.normal(size=(4, 4)))
    u["block_0"]["W_1"] = rng.normal(size=(16, 4))
    v = _zeros_like(point, e=w, block_0__W_K=rng.normal(size=(4, 4)))
    v["block_0"]["W_V"] = rng.normal(size=(4, 4))
    alphas, betas = np.linspace(-1.0, 1.0, 7), np.linspace(-1.5, 1.5, 9)
    result = slices.slice_2d(point, u, v, alphas, betas)
    grid_a, grid_b = np.meshgrid(alphas, betas, indexing="ij")
    b0 = np.log(0.5 / 0.8)
    exact = markov_loss(b0 + 0.7 * grid_a, grid_b**2 * (w @ w), 0.5, 0.8)  # notes §5
    assert result.losses.shape == (7, 9)
    np.testing.assert_allclose(result.losses, exact, rtol=0, atol=TOL)
    assert abs(result.center_loss - float(theory.unigram_loss(0.5, 0.8))) < TOL
    programs = geometry._losses_at._cache_size()
    other = slices.slice_2d(_theta_pi(0.3, 0.9), u, v, alphas, betas)
    assert geometry._losses_at._cache_size() == programs  # a new (p, q): no new program
    exact = markov_loss(np.log(0.3 / 0.9) + 0.7 * grid_a, grid_b**2 * (w @ w), 0.3, 0.9)
    np.testing.assert_allclose(other.losses, exact, rtol=0, atol=TOL)


def test_slices_and_paths_pick_a_batch_size_that_fits(monkeypatch):
    """With room for a few loss evaluations only (the memory shrunk to 5 of them, half of it the
    budget), slice_2d and path go through lax.map in batches of 2 and give the closed form;
    with room for less than one, a MemoryError names the call and both sizes."""
    point = _theta_pi(0.5, 0.8)
    each = budget.loss_bytes(point)
    assert each > 1e4  # a loss over the 64 sequences of N = 6 holds its activations
    chosen = []
    original = geometry._losses_at

    def spy(objective, controls, inputs, weights, batch_size):
        chosen.append(batch_size)
        return original(objective, controls, inputs, weights, batch_size)

    monkeypatch.setattr(geometry, "_losses_at", spy)
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 5 * each)
    u, v = _zeros_like(point, b=1.0), _zeros_like(point, e=np.ones(4))
    alphas, betas = np.linspace(-1.0, 1.0, 3), np.linspace(-1.0, 1.0, 4)
    result = slices.slice_2d(point, u, v, alphas, betas)
    grid_a, grid_b = np.meshgrid(alphas, betas, indexing="ij")
    exact = markov_loss(np.log(0.5 / 0.8) + grid_a, 4 * grid_b**2, 0.5, 0.8)
    np.testing.assert_allclose(result.losses, exact, rtol=0, atol=TOL)
    line = geometry.path(point, point.with_params(_zeros_like(point, b=0.0)))
    assert chosen == [2, 2] and line.losses.size == 51
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 1.5 * each)
    with pytest.raises(MemoryError, match=r"^slice_2d: one loss evaluation of theta_pi .* needs"):
        slices.slice_2d(point, u, v, alphas, betas)
    assert slices.slice_2d(point, u, v, alphas, betas, batch_size=3).losses.shape == (3, 4)


def test_paths_from_theta_pi_in_b_and_e_are_the_closed_form():
    p, q = 0.2, 0.3  # p + q <= 1: theta_star is B.1, which differs from theta_pi in b and e only
    start, end = _theta_pi(p, q), landscape.markov.theta_star(p, q, seq_len=6)
    result = geometry.path(start, end)
    ts = result.ts
    b0, b1 = np.log(p / q), float(end.params["b"])
    s1 = float(end.params["e"] @ end.params["e"])
    assert abs(s1 - float(theory.bigram_slope(p, q))) < 1e-12  # |e|^2 = the bigram slope
    exact = markov_loss((1 - ts) * b0 + ts * b1, ts**2 * s1, p, q)  # notes §5
    np.testing.assert_allclose(result.losses, exact, rtol=0, atol=TOL)
    assert abs(result.loss_b - float(theory.entropy_rate(p, q))) < TOL
    programs = geometry._losses_at._cache_size()
    w = np.array([0.5, -1.0, 0.25, 2.0])
    lines = {  # theta_pi + t (direction in b only) and theta_pi + t (direction in e only)
        "b": (_set(start, b=b0 + 1.5), lambda t: markov_loss(b0 + 1.5 * t, 0 * t, p, q)),
        "e": (_set(start, e=w), lambda t: markov_loss(b0 + 0 * t, t**2 * (w @ w), p, q)),
    }
    for end_point, closed_form in lines.values():
        line = geometry.path(start, end_point)
        np.testing.assert_allclose(line.losses, closed_form(ts), rtol=0, atol=TOL)
        assert line.barrier >= 0.0
    assert geometry._losses_at._cache_size() == programs  # new pairs: the same program


def test_untied_a_e_plane_is_the_saddle_of_the_closed_form():
    point = _theta_pi(0.5, 0.8, tied=False)  # logit = x_n <a, e> + b (notes §4)
    rng = np.random.default_rng(1)
    ua, ve = rng.normal(size=4), rng.normal(size=4)
    u, v = _zeros_like(point, a=ua), _zeros_like(point, e=ve)
    alphas = betas = np.linspace(-1.0, 1.0, 9)
    result = slices.slice_2d(point, u, v, alphas, betas)
    grid_a, grid_b = np.meshgrid(alphas, betas, indexing="ij")
    exact = markov_loss(np.log(0.5 / 0.8), grid_a * grid_b * (ua @ ve), 0.5, 0.8)
    np.testing.assert_allclose(result.losses, exact, rtol=0, atol=TOL)
    assert result.losses.min() < result.center_loss < result.losses.max()  # a saddle (Thm 3)


def test_filter_normalisation_at_theta_pi_keeps_the_zero_blocks_unnormalised():
    point = _theta_pi(0.5, 0.8)
    b0 = np.log(0.5 / 0.8)
    w = np.array([0.3, -0.7, 1.1, 0.2])
    u, v = _zeros_like(point, b=1.0), _zeros_like(point, e=w)
    alphas, betas = np.linspace(-1.0, 1.0, 7), np.linspace(-1.5, 1.5, 9)
    result = slices.slice_2d(point, u, v, alphas, betas, normalize="filter")
    # b is a scalar leaf: u's b rescaled to |b0|; e = 0 at theta_pi: v's e kept as given
    assert float(result.u["b"]) == pytest.approx(abs(b0), rel=1e-15)
    np.testing.assert_array_equal(result.v["e"], w)
    assert result.kept_blocks == ("e",)
    assert len(result.notes) == 1 and "zero in e," in result.notes[0]
    assert result.notes[0] in result.describe()
    grid_a, grid_b = np.meshgrid(alphas, betas, indexing="ij")
    exact = markov_loss(b0 + abs(b0) * grid_a, grid_b**2 * (w @ w), 0.5, 0.8)  # notes §5
    np.testing.assert_allclose(result.losses, exact, rtol=0, atol=TOL)
    # random directions: every block but b is zero at theta_pi (rest="zero", pos = 0)
    key_u, key_v = jax.random.split(jax.random.key(0))
    random = slices.slice_2d(
        point,
        geometry.random_direction(point, key_u),
        geometry.random_direction(point, key_v),
        [-0.5, 0.5],
        [-0.5, 0.5],
        normalize="block",
    )
    names = {name for name, _, _ in landscape.param_names(point.params)}
    assert set(random.kept_blocks) == names - {"b"}
    assert np.all(np.isfinite(random.losses))


def test_filter_and_block_normalisation_rescale_as_documented():
    params = {"W": jnp.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]]), "c": jnp.array([1.0, 2.0])}
    point = landscape.Point(params, lambda p: jnp.sum(p["W"] ** 2) + jnp.sum(p["c"] ** 3))
    ones = jax.tree.map(np.ones_like, params)
    other = {"W": np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "c": np.array([1.0, -1.0])}
    by_filter = slices.slice_2d(point, ones, other, [0.0, 1.0], [0.0, 1.0], normalize="filter")
    np.testing.assert_allclose(by_filter.u["W"][0], np.full(3, 5 / np.sqrt(3)), rtol=1e-15)
    np.testing.assert_array_equal(by_filter.u["W"][1], np.ones(3))  # zero filter: kept
    np.testing.assert_allclose(by_filter.u["c"], np.full(2, np.sqrt(5 / 2)), rtol=1e-15)
    assert by_filter.kept_blocks == ("W",) and "W (1 of 2 filters)" in by_filter.notes[0]
    by_block = slices.slice_2d(point, ones, other, [0.0, 1.0], [0.0, 1.0], normalize="block")
    np.testing.assert_allclose(by_block.u["W"], np.full((2, 3), 5 / np.sqrt(6)), rtol=1e-15)
    assert by_block.notes == () and by_block.kept_blocks == ()
    # the loss at (1, 0) is the loss at point + u: exact
    shifted = jax.tree.map(lambda x, d: np.asarray(x) + d, params, by_block.u)
    assert by_block.losses[1, 0] == pytest.approx(float(point.loss_fn(shifted)), rel=1e-14)
    alpha, beta, off = by_block.project(point.with_params(shifted))
    assert alpha == pytest.approx(1.0, abs=1e-12) and abs(beta) < 1e-12 and off < 1e-12


def test_figures():
    a = landscape.Point({"x": jnp.array(-1.0)}, _double_well, name="left")
    b = a.with_params({"x": jnp.array(1.0)})
    fig = probe_figures.plot_path([geometry.path(a, b)])
    assert fig.axes and fig.axes[0].get_lines()
    point = _theta_pi(0.5, 0.8)
    u = _zeros_like(point, b=1.0)
    v = _zeros_like(point, e=np.ones(4))
    result = slices.slice_2d(point, u, v, np.linspace(-1, 1, 5), np.linspace(-1, 1, 5))
    fig = probe_figures.plot_slice(result, points=[_set(point, b=np.log(0.5 / 0.8) + 0.5)])
    assert len(fig.axes) == 2  # the contour plot and its colour bar
    plt.close("all")


def test_mistakes_are_named():
    a = landscape.Point({"x": jnp.array(-1.0)}, _double_well)
    b = a.with_params({"x": jnp.array(1.0)})
    with pytest.raises(ValueError, match="ts has shape"):
        geometry.path(a, b, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="ts = 2: must be a finite number in"):
        geometry.bezier_path(a, b, ts=[0.0, 2.0])
    with pytest.raises(ValueError, match="lr = 0"):
        geometry.bezier_path(a, b, lr=0.0)
    with pytest.raises(ValueError, match="num_ts = 0"):
        geometry.bezier_path(a, b, num_ts=0)
    with pytest.raises(TypeError, match="expects a landscape.Point"):
        geometry.path(a, {"x": 1.0})
    with pytest.raises(ValueError, match="different inputs"):
        geometry.path(_theta_pi(0.5, 0.8), _theta_pi(0.3, 0.9))
    with pytest.raises(ValueError, match="one model"):
        geometry.path(_theta_pi(0.5, 0.8), _theta_pi(0.5, 0.8, tied=False))
    grid = [0.0, 1.0]
    two = landscape.Point({"x": jnp.array([1.0, 0.0])}, lambda p: jnp.sum(p["x"] ** 2))
    with pytest.raises(ValueError, match="normalize = 'layer'"):
        slices.slice_2d(two, {"x": [1.0, 0.0]}, {"x": [0.0, 1.0]}, grid, grid, "layer")
    with pytest.raises(ValueError, match="u is zero everywhere"):
        slices.slice_2d(two, {"x": [0.0, 0.0]}, {"x": [0.0, 1.0]}, grid, grid)
    with pytest.raises(ValueError, match="parallel"):
        slices.slice_2d(two, {"x": [1.0, 0.0]}, {"x": [-2.0, 0.0]}, grid, grid)
    with pytest.raises(ValueError, match=r"v\['x'\] has shape \(3,\)"):
        slices.slice_2d(two, {"x": [1.0, 0.0]}, {"x": [0.0, 1.0, 0.0]}, grid, grid)
    with pytest.raises(ValueError, match="u must be a pytree shaped like the point's params"):
        slices.slice_2d(two, {"y": [1.0, 0.0]}, {"x": [0.0, 1.0]}, grid, grid)
    with pytest.raises(ValueError, match="batch_size = 0"):
        slices.slice_2d(two, {"x": [1.0, 0.0]}, {"x": [0.0, 1.0]}, grid, grid, batch_size=0)
    with pytest.raises(TypeError, match="random key"):
        geometry.random_direction(two, None)


def test_a_large_slice_is_split_by_the_memory_of_its_rows(monkeypatch):
    """A layer tanh(W x) summed: one evaluation holds only its activations, but each row of the
    vmapped grid also holds its own W (8 times more here). The batches count both, so a
    41 x 41 grid goes in batches of 100 rows where the memory has room for 100 such rows (one
    evaluation's bytes alone would have put 9 times as many at once), and on the CPU in batches
    of CPU_BATCH_BYTES; the losses are those of a run in batches of 7."""
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(120, 16)))
    point = landscape.Point(
        {"W": jnp.asarray(rng.normal(size=(120, 120)) / 11)},
        objective=lambda p, x: jnp.sum(jnp.tanh(p["W"] @ x)),
        inputs=x,
    )
    u, v = {"W": rng.normal(size=(120, 120))}, {"W": rng.normal(size=(120, 120))}
    alphas, betas = np.linspace(-1.0, 1.0, 41), np.linspace(-1.0, 1.0, 41)
    each = budget.loss_bytes(point) + 120 * 120 * 8
    assert each > 4 * budget.loss_bytes(point)
    chosen = []
    original = budget.rows_per_batch
    monkeypatch.setattr(
        budget, "rows_per_batch", lambda *a, **k: chosen.append(original(*a, **k)) or chosen[-1]
    )
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2 * 100.5 * each)
    result = slices.slice_2d(point, u, v, alphas, betas)
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 1e12)
    monkeypatch.setattr(budget, "CPU_BATCH_BYTES", 50 * each)
    capped = slices.slice_2d(point, u, v, alphas, betas)
    small = slices.slice_2d(point, u, v, alphas, betas, batch_size=7)
    assert chosen == [100, 50]  # 1682 rows in batches
    # sums of 1920 tanh values of size up to 1, summed in another order: float64 rounding ~1e-13
    np.testing.assert_allclose(result.losses, small.losses, rtol=0, atol=1e-12)
    np.testing.assert_allclose(capped.losses, small.losses, rtol=0, atol=1e-12)
    assert abs(result.center_loss - small.center_loss) < 1e-12
