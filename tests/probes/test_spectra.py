"""Stochastic spectra, traces and diagonals (landscape/probes/spectra.py) against exact dense
values.

The random-matrix points have the loss 0.5 x^T A x (Hessian A, spectrum chosen), written as one
`objective(params, inputs)` with A as the inputs, so every matrix of one size shares one compiled
program. Tolerances are multiples of the estimators' own standard errors.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib.figure import Figure

import landscape
from landscape.core import blocks, memory, three_term
from landscape.probes import figures as probe_figures
from landscape.probes import spectra, traces, uncertainty

D = 40  # every random matrix has this size, and SLQ this shape: the tests share compiled programs
SLQ_SHAPE = (64, 12)  # (num_probes, num_iters)


def _quadratic(params, inputs):
    x = jnp.concatenate([params["u"], params["w"].ravel()])
    return 0.5 * x @ inputs["A"] @ x


def _point(eigenvalues, seed):
    """The loss 0.5 x^T A x with A = Q diag(eigenvalues) Q^T, Q a random rotation; two leaves."""
    eigenvalues = np.asarray(eigenvalues, np.float64)
    dim = eigenvalues.size
    q = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))[0]
    matrix = (q * eigenvalues) @ q.T
    matrix = 0.5 * (matrix + matrix.T)
    params = {"u": jnp.zeros(dim - 20), "w": jnp.zeros((4, 5))}
    return landscape.Point(params, objective=_quadratic, inputs={"A": jnp.asarray(matrix)}), matrix


@pytest.mark.parametrize(
    "seed, num_values, probe",
    [(0, 2, "rademacher"), (1, 3, "gaussian"), (2, 4, "rademacher"), (3, 5, "gaussian")],
)
def test_slq_is_exact_quadrature_on_a_clustered_spectrum(seed, num_values, probe):
    # k <= 5 distinct eigenvalues, each several times: Lanczos exhausts the Krylov space after k
    # steps and restarts, so every node with weight is an eigenvalue and each probe's mass of a
    # cluster is exactly v^T P v / |v|^2, an unbiased estimate of multiplicity / D
    rng = np.random.default_rng(seed)
    values = np.sort(rng.choice(np.linspace(-5, 5, 41), num_values, replace=False))
    counts = rng.multinomial(D - 3 * num_values, np.ones(num_values) / num_values) + 3
    eigenvalues = np.repeat(values, counts)
    point, _ = _point(eigenvalues, seed)
    density = spectra.spectral_density(point, *SLQ_SHAPE, jax.random.key(seed), probe=probe)
    assert density.nodes.shape == density.weights.shape == SLQ_SHAPE and density.dim == D
    np.testing.assert_allclose(density.weights.sum(axis=1), 1.0, atol=1e-12)
    weighted = density.nodes[density.weights > 1e-10]
    assert np.all(np.min(np.abs(weighted[:, None] - values), axis=1) < 1e-8)
    assert density.nodes.min() >= values[0] - 1e-8 and density.nodes.max() <= values[-1] + 1e-8
    edges = np.concatenate([[-np.inf], 0.5 * (values[1:] + values[:-1]), [np.inf]])
    for count, lo, hi in zip(counts, edges[:-1], edges[1:], strict=True):
        mass, stderr = density.mass(lo, hi)
        assert stderr > 0
        assert abs(mass - count / D) < 4 * stderr, (mass, count / D, stderr)


@pytest.mark.parametrize("value", [0.0, 2.0])
def test_slq_survives_a_krylov_space_exhausted_at_once(value):
    # H = value * I: the first Lanczos step already spans an invariant space (beta = 0 exactly
    # for H = 0); the restarted steps must not divide by it, and their nodes carry no weight
    point, _ = _point(np.full(D, value), seed=11)
    density = spectra.spectral_density(point, *SLQ_SHAPE)
    assert density.finite
    np.testing.assert_allclose(density.nodes, value, atol=1e-12)
    np.testing.assert_allclose(density.weights.sum(axis=1), 1.0, atol=1e-12)
    assert density.mass(value - 1e-9, value + 1e-9) == pytest.approx((1.0, 0.0), abs=1e-12)


def test_slq_extreme_ritz_values_converge_and_the_bulk_mass_is_right():
    # a bulk in [-1, 1] and two isolated eigenvalues, -3 and 4: 12 steps of Lanczos find both
    bulk = np.random.default_rng(1).uniform(-1, 1, 38)
    point, _ = _point(np.concatenate([bulk, [-3.0, 4.0]]), seed=2)
    density = spectra.spectral_density(point, *SLQ_SHAPE)
    np.testing.assert_allclose(density.nodes[:, 0], -3.0, atol=1e-8)
    np.testing.assert_allclose(density.nodes[:, -1], 4.0, atol=1e-8)
    assert np.all(density.nodes[:, 1:-1] >= bulk.min() - 1e-8)
    assert np.all(density.nodes[:, 1:-1] <= bulk.max() + 1e-8)
    mass, stderr = density.mass(-1.5, 1.5)
    assert abs(mass - 38 / 40) < 4 * stderr
    # the smoothed density integrates to 1 and piles up where the eigenvalues are
    grid = np.linspace(-4, 5, 4001)
    smooth = density.density(grid, sigma=0.05)
    assert abs(np.trapezoid(smooth, grid) - 1.0) < 1e-3
    assert smooth[np.abs(grid) < 0.9].min() > 10 * smooth[(grid > 1.5) & (grid < 3.5)].max()
    assert "fraction λ < -tol" in density.describe()
    figure = probe_figures.density_figure(density)
    assert isinstance(figure, Figure) and figure.axes[0].get_yscale() == "log"


def _gauss_rule(matrix, v, steps):
    """numpy Lanczos (full reorthogonalisation) from v: the Gauss rule of v's spectral measure."""
    basis, alphas, betas = [v / np.linalg.norm(v)], [], []
    for _ in range(steps):
        w = matrix @ basis[-1]
        alphas.append(basis[-1] @ w)
        for _ in range(2):
            w = w - np.stack(basis).T @ (np.stack(basis) @ w)
        betas.append(np.linalg.norm(w))
        basis.append(w / betas[-1])
    nodes, vectors = np.linalg.eigh(
        np.diag(alphas) + np.diag(betas[:-1], 1) + np.diag(betas[:-1], -1)
    )
    return nodes, vectors[0] ** 2


def test_quadrature_bounds_contain_each_probes_exact_mass():
    """Chebyshev-Markov-Stieltjes: whatever the spectrum between the Ritz values, a probe's exact
    mass of an interval lies in the certified range, here for 400 intervals on 6 probes, with
    ends on nodes, on eigenvalues and in between; the plain estimate leaves it on most probes."""
    rng = np.random.default_rng(7)
    eigenvalues = np.concatenate([rng.uniform(-1, 1, 30), [-3.0, 2.5, 4.0], np.zeros(7)])
    q = np.linalg.qr(rng.standard_normal((D, D)))[0]
    matrix = (q * eigenvalues) @ q.T
    outside = 0
    for _ in range(6):
        v = rng.choice([-1.0, 1.0], D)
        nodes, weights = _gauss_rule(matrix, v, steps=6)
        exact_weights = (q.T @ v) ** 2 / D
        ends = np.concatenate([nodes, eigenvalues, rng.uniform(-3.5, 4.5, 20), [-np.inf, np.inf]])
        for lo, hi in np.sort(rng.choice(ends, (400, 2)), axis=1):
            exact = exact_weights[(eigenvalues >= lo) & (eigenvalues <= hi)].sum()
            lower, upper = uncertainty.quadrature_bounds(nodes[None], weights[None], lo, hi)
            assert lower[0] - 1e-12 <= exact <= upper[0] + 1e-12, (lo, hi, lower, exact, upper)
            plain = weights[(nodes >= lo) & (nodes <= hi)].sum()
            outside += abs(plain - exact) > 1e-3
    assert outside > 400  # the plain quadrature mass is off on many intervals: the bounds matter


def test_mass_interval_covers_a_threshold_through_the_bulk():
    """A threshold at 0 inside a continuous bulk: the certified interval holds the true fraction
    and is wider than the plain estimate's standard error."""
    bulk = np.random.default_rng(3).uniform(-1, 1, 38)
    point, _ = _point(np.concatenate([bulk, [-3.0, 4.0]]), seed=4)
    density = spectra.spectral_density(point, *SLQ_SHAPE)
    truth = (np.sum(bulk < 0) + 1) / D
    low, high = density.mass_interval(-np.inf, 0.0)
    value, stderr = density.mass(-np.inf, 0.0)
    assert low <= truth <= high and high - low > 2 * stderr
    assert "with the quadrature's error" in density.describe()


def test_mass_warns_when_a_threshold_cuts_ritz_nodes_it_cannot_resolve():
    """14 eigenvalues in [-1e-3, 1e-3] that 12 Lanczos steps merge into nodes near 0: a threshold
    at -1e-4 cuts them, and mass +- stderr misses the true fraction by 6 stderr; the warning says
    so and names mass_interval, which covers it. A threshold in the gap at -0.1 cuts no node."""
    rng = np.random.default_rng(2)
    eigenvalues = np.concatenate(
        [rng.uniform(-1e-3, 1e-3, 14), rng.uniform(-1, -0.2, 13), rng.uniform(0.2, 2, 13)]
    )
    point, _ = _point(eigenvalues, seed=2)
    density = spectra.spectral_density(point, *SLQ_SHAPE)
    truth = np.mean(eigenvalues <= -1e-4)
    with pytest.warns(
        uncertainty.QuadratureWarning, match=r"hi = -0\.0001 cuts Ritz nodes"
    ) as caught:
        value, stderr = density.mass(-np.inf, -1e-4)
    assert "mass_interval(-inf, -0.0001) = [" in str(caught[0].message)
    assert abs(value - truth) > 5 * stderr  # what the warning is about
    low, high = density.mass_interval(-np.inf, -1e-4)
    assert low <= truth <= high
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, stderr = density.mass(-np.inf, -0.1)
    assert abs(value - np.mean(eigenvalues <= -0.1)) < 3 * stderr


def test_standard_errors_are_floored_at_the_rounding_of_the_computation():
    """Samples that agree to rounding (Hutch++ whose sketch spans all D, the diagonal and the
    density of 2 I) state the rounding level eps sqrt(D) |scale|, not 1e-30, and cover the error."""
    point, matrix = _point(np.random.default_rng(5).normal(0.5, 1.0, D), seed=5)
    exact = np.trace(matrix)
    estimate = spectra.trace(point, 3 * D, method="hutch++")  # the sketch's rank is D
    eps = np.finfo(np.float64).eps
    assert estimate.stderr >= eps * np.sqrt(D) * abs(exact) * 0.99
    assert abs(estimate.value - exact) <= 3 * estimate.stderr
    identity, matrix = _point(np.full(D, 2.0), seed=6)
    diag = spectra.diagonal(identity, 8)
    assert np.all(diag.stderr >= eps * np.sqrt(D) * 2.0 * 0.99)
    assert np.all(np.abs(diag.values - np.diag(matrix)) <= 3 * diag.stderr)
    assert all(err > 0 for _, err in diag.block_traces.values())
    hutchinson = spectra.trace(identity, 8, method="hutchinson")
    assert abs(hutchinson.value - np.trace(matrix)) <= 3 * hutchinson.stderr
    assert hutchinson.stderr >= eps * np.sqrt(D) * 2.0 * D * 0.99
    assert spectra.spectral_density(identity, *SLQ_SHAPE).mass(1.0, 3.0)[1] > 0


def test_trace_estimates_are_calibrated_by_their_stderr():
    eigenvalues = np.random.default_rng(3).normal(0.5, 1.0, D)
    point, matrix = _point(eigenvalues, seed=3)
    exact = np.trace(matrix)
    for method in ("hutchinson", "hutch++"):
        estimates = [spectra.trace(point, 30, jax.random.key(k), method) for k in range(20)]
        z = np.array([(e.value - exact) / e.stderr for e in estimates])
        assert np.sum(np.abs(z) < 4) >= 19, (method, z)
        assert 0.5 < np.std(z) < 2.0, (method, z)  # stderr neither far too small nor too large
        assert estimates[0].method == method and "± " in estimates[0].describe()


def test_hutch_plus_plus_beats_hutchinson_on_a_low_rank_dominated_spectrum():
    rng = np.random.default_rng(4)
    eigenvalues = np.concatenate([rng.uniform(50, 100, 5), rng.uniform(0, 0.01, D - 5)])
    point, matrix = _point(eigenvalues, seed=4)
    exact = np.trace(matrix)
    errors = {}
    for method in ("hutchinson", "hutch++"):
        estimates = [spectra.trace(point, 30, jax.random.key(k), method) for k in range(10)]
        errors[method] = np.sqrt(np.mean([(e.value - exact) ** 2 for e in estimates]))
    assert errors["hutch++"] < 1e-2 * errors["hutchinson"], errors


def test_diagonal_matches_the_exact_diagonal_by_block():
    eigenvalues = np.random.default_rng(5).normal(0, 1, D)
    point, matrix = _point(eigenvalues, seed=5)
    estimate = spectra.diagonal(point, num_probes=200)
    exact = np.diag(matrix)
    assert np.all(estimate.stderr > 0)
    assert np.all(np.abs(estimate.values - exact) < 4 * estimate.stderr)
    values, stderr = estimate.block("w")
    np.testing.assert_array_equal(values, estimate.values[D - 20 :])
    np.testing.assert_array_equal(stderr, estimate.stderr[D - 20 :])
    trace_w, stderr_w = estimate.block_traces["w"]
    assert abs(trace_w - exact[D - 20 :].sum()) < 4 * stderr_w
    assert "w" in estimate.describe()
    with pytest.raises(KeyError, match="no parameter named 'v'"):
        estimate.block("v")
    assert estimate.values.size == D
    # a diagonal Hessian: Rademacher probes give it exactly (v_i^2 = 1), with zero spread
    diag_point = landscape.Point(
        point.params, objective=_quadratic, inputs={"A": jnp.diag(jnp.arange(float(D)))}
    )
    exact_estimate = spectra.diagonal(diag_point, num_probes=200)
    np.testing.assert_allclose(exact_estimate.values, np.arange(float(D)), atol=1e-12)
    np.testing.assert_allclose(exact_estimate.stderr, 0.0, atol=1e-12)


def test_a_list_of_points_is_one_call_and_equals_one_at_a_time():
    points = [_point(np.linspace(-1, 2, D), seed=s)[0] for s in (6, 7)]
    key = jax.random.key(8)
    before = spectra.slq_block._cache_size()
    together = spectra.spectral_density(points, *SLQ_SHAPE, key)
    assert spectra.slq_block._cache_size() <= before + 1  # one batched program at most
    for point, density in zip(points, together, strict=True):
        alone = spectra.spectral_density(point, *SLQ_SHAPE, key)
        np.testing.assert_allclose(density.nodes, alone.nodes, atol=1e-10)
        assert density.point is point
    traces = spectra.trace(points, 30, key)
    diagonals = spectra.diagonal(points, 200, key)
    for point, tr, dg in zip(points, traces, diagonals, strict=True):
        assert np.isclose(tr.value, spectra.trace(point, 30, key).value, rtol=1e-10)
        np.testing.assert_allclose(dg.values, spectra.diagonal(point, 200, key).values, atol=1e-10)


def test_trace_at_theta_pi_matches_the_closed_form_and_compiles_once():
    # untied theta_pi: the only curvature is the (b, a, e) block, with eigenvalues pi0 pi1 once
    # and +-pi0 pi1 |p + q - 1| four times each (a saddle), so tr H = pi0 pi1 (the dense
    # Hessian's trace, to 1e-15, at both chains). The block is not diagonal, so Rademacher
    # probes have a spread and the stderr is a real one. (The dense Hessian is left out: its
    # compile costs ~10 s; tests/core/test_compiled.py checks it against the same closed forms.)
    point = landscape.markov.theta_pi(p=0.5, q=0.8, seq_len=6, tied=False)
    estimate = spectra.trace(point, num_probes=32, method="hutchinson")
    assert estimate.dim == point.num_params and estimate.stderr > 0
    assert abs(estimate.value - 0.5 * 0.8 / 1.3**2) < 4 * estimate.stderr
    programs = traces.trace_block._cache_size()
    other = landscape.markov.theta_pi(p=0.3, q=0.9, seq_len=6, tied=False)
    for key in range(5):
        again = spectra.trace(other, 32, jax.random.key(key), method="hutchinson")
        assert again.stderr > 0 and abs(again.value - 0.3 * 0.9 / 1.2**2) < 4 * again.stderr
    assert traces.trace_block._cache_size() == programs  # a new (p, q) reuses the program


def test_nonfinite_hvps_give_nan_nodes_and_say_so():
    point, _ = _point(np.linspace(0, 1, D), seed=9)
    broken = landscape.Point(
        point.params, objective=_quadratic, inputs={"A": jnp.full((D, D), jnp.nan)}
    )
    density = spectra.spectral_density(broken, *SLQ_SHAPE)
    assert np.all(np.isnan(density.nodes)) and not density.finite
    assert "NaN or inf" in density.describe()


def test_bad_arguments_get_one_sentence_errors():
    point, _ = _point(np.linspace(0, 1, D), seed=10)
    for function in (spectra.spectral_density, spectra.trace, spectra.diagonal):
        with pytest.raises(ValueError, match=r"num_probes = 0: must be an integer >= \d"):
            function(point, 0)
        with pytest.raises(TypeError, match="expects a landscape.Point"):
            function({"x": jnp.zeros(3)})
        with pytest.raises(TypeError, match="key = .*: must be a jax random key"):
            function(point, key=3)
    with pytest.raises(ValueError, match="num_iters = 41: must be an integer between 1 and 40"):
        spectra.spectral_density(point, num_iters=41)
    with pytest.raises(ValueError, match="num_iters = 0: must be an integer between 1 and 40"):
        spectra.spectral_density(point, num_iters=0)
    with pytest.raises(ValueError, match="probe = 'uniform': must be one of"):
        spectra.spectral_density(point, probe="uniform")
    with pytest.raises(ValueError, match="method = 'exact': must be one of"):
        spectra.trace(point, method="exact")
    with pytest.raises(ValueError, match="num_probes = 3: must be an integer >= 4"):
        spectra.trace(point, 3, method="hutch++")
    density = spectra.spectral_density(point, *SLQ_SHAPE)
    with pytest.raises(ValueError, match="hi = 0 is below lo = 1"):
        density.mass(1, 0)
    with pytest.raises(ValueError, match="sigma = 0: must be a finite number > 0"):
        density.density(np.linspace(0, 1, 5), 0.0)
    with pytest.raises(TypeError, match="density_figure expects a SpectralDensity"):
        probe_figures.density_figure(point)


@pytest.mark.parametrize("offset", [0, 5, 2**32 - 40, 2**37 + 3])
def test_a_split_leafs_signs_are_bit_e_mod_32_of_the_word_at_e_div_32(offset):
    """`layout._signs` (over a mesh: each row's words hashed once, read by a gather) gives entry
    e bit e % 32 of the word hashed at e // 32, carried past 2**32, as one device's draw does."""
    from landscape.core import layout

    key = jax.random.key(1)
    signs = np.asarray(layout._signs(key, offset, (3, 70), jnp.float32)).ravel()
    e = offset + np.arange(210, dtype=np.uint64)
    high, low = (e >> np.uint64(32)).astype(np.uint32), (e % np.uint64(2**32)).astype(np.uint32)
    words = layout._threefry(key, jnp.asarray(high >> 5), jnp.asarray((low >> 5) | (high << 27)))
    bits = (np.asarray(words[0]) ^ np.asarray(words[1])) >> (low & 31) & 1
    np.testing.assert_array_equal(signs, 1 - 2 * bits.astype(np.float32))
    if offset == 0:  # one device's draw of a (210,) vector: the same signs
        drawn = layout.draw("rademacher", key, {"a": np.zeros(210, np.float32)}, None)
        np.testing.assert_array_equal(signs, np.asarray(drawn))


def _moments(density, powers=(1, 2, 3, 4)) -> np.ndarray:
    """Each probe's quadrature moments sum_j w_j λ_j^p (probes x powers): v^T H^p v / |v|^2."""
    return np.stack([np.sum(density.weights * density.nodes**p, axis=1) for p in powers], 1)


def test_three_vectors_keep_each_probes_moments_where_orthogonality_is_lost():
    """30 steps at D = 40 (the outliers converge in a few, then come back as ghosts): the runs in
    three vectors give each probe's moments v^T H^p v of the full basis's, and the exact ones."""
    bulk = np.random.default_rng(3).uniform(-1, 1, 37)
    point, matrix = _point(np.concatenate([bulk, [2.5, 3.0, 4.0]]), seed=4)
    full = spectra.spectral_density(point, 8, 30, basis="full")
    three = spectra.spectral_density(point, 8, 30, basis="three")
    assert (full.basis, three.basis) == ("full", "three") and three.summary()["basis"] == "three"
    np.testing.assert_allclose(_moments(three), _moments(full), rtol=1e-9)
    probe_key = jax.random.split(jax.random.key(0))[0]
    probes = spectra._probes(probe_key, jnp.arange(8), "rademacher", point.params, None)
    powers = [np.linalg.matrix_power(matrix, p) for p in (1, 2, 3, 4)]
    exact = [[v @ a @ v / (v @ v) for a in powers] for v in np.asarray(probes)]
    np.testing.assert_allclose(_moments(full), exact, rtol=1e-10)
    top = np.sort(three.nodes[:, -1])
    np.testing.assert_allclose(top, 4.0, atol=1e-8)  # the largest is found, ghosts or not
    assert "three vectors of D" in three.describe()


def test_three_vectors_in_bfloat16_keep_the_moments_within_their_standard_errors():
    """float32 arithmetic, the vectors stored in bfloat16: the density's mean moments within
    two of the float32 full basis's standard errors over 16 probes."""
    eigenvalues = np.random.default_rng(5).uniform(-1, 2, D)
    point, _ = _point(eigenvalues, seed=6)
    point = point.with_params(jax.tree.map(lambda x: x.astype(jnp.float32), point.params))
    point = landscape.Point(point.params, objective=_quadratic,
                            inputs={"A": point.inputs["A"].astype(jnp.float32)})  # fmt: skip
    full = spectra.spectral_density(point, 16, 12, basis="full")
    low = spectra.spectral_density(point, 16, 12, basis="three", storage="bfloat16")
    mean, spread = _moments(full).mean(0), _moments(full).std(0, ddof=1) / 4
    assert np.all(np.abs(_moments(low).mean(0) - mean) <= 2 * spread)


@pytest.mark.parametrize(  # the papers' point compiles for 17 s: the MLP is its fast sibling
    "where", [pytest.param("theta_pi, untied (x64)", marks=pytest.mark.slow), "peers MLP (float32)"]
)
def test_three_vectors_give_the_full_basis_density_at_a_papers_point_and_the_peers_mlp(where):
    """Thm 3's saddle of Attention with Markov in float64 and the peers benchmark's MLP in float32
    (64 -> 32 -> 32 -> 10, D = 3,466): each probe's moments v^T H^p v in three vectors are the
    full basis's to rounding (2e-14 and 4e-7 measured), their means within a hundredth of a
    standard error over the probes (where the probes' moments differ beyond rounding), and the
    extreme nodes agree."""
    from experiments.bench import peers, peers_data

    if where.startswith("theta_pi"):
        point, rtol = landscape.markov.theta_pi(p=0.5, q=0.8, tied=False, seq_len=4), 1e-11
    else:
        point, rtol = peers.mlp_point(peers_data.mlp_arrays(32)), 1e-4
    full = spectra.spectral_density(point, 4, 20, basis="full", progress=None)
    three = spectra.spectral_density(point, 4, 20, basis="three", progress=None)
    moments_full, moments_three = _moments(full), _moments(three)
    np.testing.assert_allclose(moments_three, moments_full, rtol=rtol)
    mean = moments_full.mean(0)  # within a hundredth of a standard error, or of rounding
    allowed = np.maximum(0.01 * moments_full.std(0, ddof=1) / 2, rtol * np.abs(mean))
    assert np.all(np.abs(moments_three.mean(0) - mean) <= allowed)
    for end in (0, -1):
        np.testing.assert_allclose(three.nodes[:, end], full.nodes[:, end], rtol=10 * rtol)


def test_auto_keeps_three_vectors_where_a_basis_does_not_fit(monkeypatch):
    point, _ = _point(np.linspace(-1, 1, D), seed=7)
    assert spectra.spectral_density(point, *SLQ_SHAPE, progress=None).basis == "full"
    full = three_term.vector_bytes(D, 8, "full", 30, None)
    assert full == 30 * D * 8 and three_term.vector_bytes(D, 8, "three", 30, None) == 2 * D * 8
    assert three_term.vector_bytes(D, 8, "three", 30, "bfloat16") == 2 * D * 2
    tight = 2 * blocks.product_bytes(point, three_term.vector_bytes(D, 8, "three", 30, None))
    monkeypatch.setattr(memory, "device_free_bytes", lambda device=None: tight)
    assert spectra.spectral_density(point, 4, 30, progress=None).basis == "three"


def test_a_basis_mistake_is_one_sentence():
    point, _ = _point(np.linspace(0, 1, D), seed=10)
    with pytest.raises(ValueError, match="basis = 'two': must be one of"):
        spectra.spectral_density(point, basis="two")
    with pytest.raises(ValueError, match="storage = 'float16': must be one of"):
        spectra.spectral_density(point, basis="three", storage="float16")
    with pytest.raises(ValueError, match="spectral_density: storage = 'fp8': must be one of"):
        spectra.spectral_density(point, basis="full", storage="fp8")
