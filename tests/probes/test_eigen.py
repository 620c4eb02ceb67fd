"""Certified eigenpairs and escape directions (landscape/probes/eigen.py), against the closed
forms of the alpha block at theta_pi (Thm 2 tied, Thm 3 untied; landscape/markov/theory.py) and
a quadratic with a known repeated spectrum for the Lanczos path."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.core import eigen_search, krylov_schur
from landscape.core import lanczos as core_lanczos
from landscape.markov import theory
from landscape.probes import eigen
from landscape.probes import escape as escape_lib
from landscape.probes.results import Curvature

P, Q, D_EMBED = 0.5, 0.8, 4
PI0, PI1 = Q / (P + Q), P / (P + Q)


@functools.cache
def _alpha_block(tied):
    """theta_pi's alpha block as a point: (b, e) tied (D = 5), (b, a, e) untied (D = 9)."""
    point = landscape.markov.theta_pi(p=P, q=Q, seq_len=6, tied=tied)
    return landscape.restrict(point, ["b", "e"] if tied else ["b", "a", "e"])


def _quadratic(params, inputs):
    return 0.5 * params["x"] @ inputs @ params["x"]


def _quadratic_point(spectrum, seed):
    """0.5 x^T A x at x = 0, A = U diag(spectrum) U^T with a random orthogonal U: one model (one
    objective) for every spectrum of the same size."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(spectrum.size, spectrum.size)))[0]
    matrix = (basis * spectrum) @ basis.T
    params = {"x": jnp.zeros(spectrum.size)}
    return landscape.Point(
        params, objective=_quadratic, inputs=jnp.asarray(0.5 * (matrix + matrix.T))
    )


def _spectrum(seed):
    """2.5 once above 2.0 four times (the shape of the tied alpha block), a bulk in (-1, 1.8)
    and -1.5 three times at the bottom: D = 78."""
    bulk = np.random.default_rng(100 + seed).uniform(-1.0, 1.8, 70)
    return np.concatenate([[2.5], [2.0] * 4, bulk, [-1.5] * 3])


def test_tied_alpha_block_largest_pairs_are_thm2_with_multiplicity_four():
    point = _alpha_block(True)
    pairs = eigen.eigenpairs(point, k=5, which="largest")
    top, repeated = PI0 * PI1, 2 * PI0 * PI1 * (P + Q - 1)  # Thm 2: once, and d = 4 times
    assert pairs.method == "dense"
    np.testing.assert_allclose(pairs.values, [top] + [repeated] * 4, rtol=1e-10)
    groups = pairs.multiplicities()
    assert [count for _, count in groups] == [1, 4]
    np.testing.assert_allclose([value for value, _ in groups], [top, repeated], rtol=1e-10)
    assert np.all(pairs.residuals < 1e-8)
    np.testing.assert_allclose(pairs.flat_vectors @ pairs.flat_vectors.T, np.eye(5), atol=1e-12)
    assert sorted(pairs.vectors[0]) == ["b", "e"]
    assert "x4" in pairs.describe()
    # the certificate is a fresh HVP, not the eigensolver's word: a wrong value shows up in it
    wrong, _ = eigen._certified(point, "largest", pairs.values + 1e-3, pairs.flat_vectors, (0, top))
    np.testing.assert_allclose(wrong.residuals, 1e-3, rtol=1e-6)


def test_lanczos_recovers_repeated_eigenvalues_and_compiles_once_per_model():
    spectrum = _spectrum(0)
    point = _quadratic_point(spectrum, seed=0)
    largest = eigen.eigenpairs(point, k=6, which="largest", dense_below=0)
    assert largest.method == "lanczos" and largest.converged
    np.testing.assert_allclose(largest.values, np.sort(spectrum)[::-1][:6], atol=1e-9)
    assert [count for _, count in largest.multiplicities()][:2] == [1, 4]
    assert np.all(largest.residuals < 1e-8)
    np.testing.assert_allclose(largest.flat_vectors @ largest.flat_vectors.T, np.eye(6), atol=1e-9)
    # the multiplicity check's products (the fresh phase once six are locked) counted apart
    assert 0 < largest.num_hvps_check < largest.num_hvps
    assert largest.summary()["num_hvps_check"] == largest.num_hvps_check
    # and the exact residuals outside it: at least one for each of the six certified pairs
    assert 6 <= largest.num_hvps_residuals < largest.num_hvps - largest.num_hvps_check
    assert largest.summary()["num_hvps_residuals"] == largest.num_hvps_residuals
    smallest = eigen.eigenpairs(point, k=4, which="smallest", dense_below=0)
    np.testing.assert_allclose(smallest.values, np.sort(spectrum)[:4], atol=1e-9)
    assert smallest.multiplicities()[0] == (pytest.approx(-1.5, abs=1e-9), 3)
    # a list: one result per point, and a new matrix of the same model reuses the program
    programs = eigen_search.advance._cache_size()
    other = _quadratic_point(_spectrum(1), seed=1)
    both = eigen.eigenpairs([point, other], k=6, which="largest", dense_below=0)
    assert eigen_search.advance._cache_size() == programs
    np.testing.assert_allclose(both[1].values, np.sort(_spectrum(1))[::-1][:6], atol=1e-9)
    dense = eigen.eigenpairs([point, other], k=6, which="largest")
    assert [d.method for d in dense] == ["dense", "dense"]
    np.testing.assert_allclose(dense[0].values, largest.values, atol=1e-9)


def test_untied_alpha_block_escape_directions_are_thm3_negative_eigenvalues():
    closed = np.asarray(theory.alpha_spectrum(P, Q, D_EMBED, tied=False))  # ascending
    negative = -PI0 * PI1 * abs(P + Q - 1)
    # theory's closed form: -pi0 pi1 |p+q-1| d times (not once), the rest positive
    np.testing.assert_allclose(closed[:D_EMBED], negative, rtol=1e-12)
    assert np.all(closed[D_EMBED:] > 0)
    escape = escape_lib.escape_directions(_alpha_block(False))
    assert escape.stationary and escape.gradient.norm < 1e-12
    assert escape.num_negative() == D_EMBED
    np.testing.assert_allclose(escape.values, negative, rtol=1e-10)
    assert np.all(escape.residuals < 1e-8)
    # the eigenvectors of [[0, s I], [s I, 0]] for -|s|, s = p+q-1 > 0: a = -e, b untouched
    for vector in escape.vectors:
        assert abs(vector["b"]) < 1e-10
        np.testing.assert_allclose(vector["a"], -vector["e"], atol=1e-10)
    np.testing.assert_allclose(escape.predicted[:, 0], 1e-6 * negative, rtol=1e-10)
    assert np.all(escape.measured < 0)  # the loss goes down along each
    np.testing.assert_allclose(escape.ratios[:, 0], 1.0, atol=0.05)  # at ε = 1e-3
    text = escape.describe()
    assert f"verdict: saddle ({D_EMBED} negative eigenvalues" in text
    assert text.index("gradient norm") < text.index("verdict")


def test_a_shifted_point_is_not_stationary_before_any_curvature_verdict():
    point = _alpha_block(False)
    shifted = point.with_params({**point.params, "b": point.params["b"] + 0.3})
    escape = escape_lib.escape_directions(shifted)
    # at e = a = 0 the prediction is sigma(b): dL/db = sigma(b) - pi1, the other blocks 0
    sigma = 1 / (1 + np.exp(-(float(point.params["b"]) + 0.3)))
    assert escape.gradient.norm == pytest.approx(abs(sigma - PI1), rel=1e-10)
    assert not escape.stationary
    lines = escape.describe().splitlines()
    assert lines[1].strip().startswith("gradient norm  |g| = 7.299e-02")
    assert "verdict: not stationary (|g| = 7.299e-02 > " in lines[2]
    assert escape.kind() is Curvature.NOT_STATIONARY
    assert "saddle" not in escape.describe() and "minimum" not in escape.describe()


def test_the_second_order_check_holds_off_a_critical_point():
    """L = x²/2 - y²/2 + 0.3 y + y⁴ at the origin: g = (0, 0.3) lies along the escape direction
    y (λ = -1). The symmetric difference L(εv) + L(-εv) - 2L(0) = -ε² + 2ε⁴ gives the ratio
    1 - 2ε² exactly; the one-sided L(εv) - L(0) = 0.3ε - ε²/2 + ε⁴ would give -0.6/ε + 1 - 2ε²
    (notes/landscape_geometry.md §9)."""
    point = landscape.Point(
        {"x": jnp.zeros(()), "y": jnp.zeros(())},
        lambda p: p["x"] ** 2 / 2 - p["y"] ** 2 / 2 + 0.3 * p["y"] + p["y"] ** 4,
    )
    escape = escape_lib.escape_directions(point)
    assert not escape.stationary and escape.num_negative() == 1
    np.testing.assert_allclose(escape.values, [-1.0], rtol=1e-12)
    epsilons = np.asarray(escape.epsilons)
    np.testing.assert_allclose(escape.predicted[0], -(epsilons**2), rtol=1e-12)
    np.testing.assert_allclose(escape.ratios[0], 1 - 2 * epsilons**2, rtol=0, atol=1e-9)


def _clustered_point(size=600, seed=0):
    """½ xᵀAx with the 4 smallest eigenvalues inside a cluster of 150 tiny negative ones
    (|λ| ~ 1e-6) beside 300 zeros, the spectrum 0.2 wide: Krylov methods cannot separate them
    in a few hundred steps (the trained points' case)."""
    rng = np.random.default_rng(seed)
    values = np.concatenate(
        [-np.abs(rng.normal(size=150)) * 1e-6, np.zeros(300), rng.uniform(1e-3, 0.2, size - 450)]
    )
    rotation, _ = np.linalg.qr(rng.normal(size=(size, size)))
    matrix = jnp.asarray((rotation * values) @ rotation.T)
    point = landscape.Point(
        {"x": jnp.zeros(size)},
        objective=lambda p, m: 0.5 * p["x"] @ m @ p["x"],
        inputs=matrix,
        name="cluster",
    )
    return point, np.sort(values)


def test_a_search_that_does_not_converge_falls_back_to_dense_and_says_so(monkeypatch):
    point, values = _clustered_point()
    monkeypatch.setattr(eigen_search, "LONG_SECONDS", 0.0)  # a line per run, however fast
    lines = []
    found = eigen.eigenpairs(point, k=4, dense_below=0, max_restarts=30, progress=lines.append)
    assert found.method == "dense"
    assert re.fullmatch(
        r"dense fallback: Lanczos did not certify the 4 smallest in 30 runs \(\d+ HVPs\), and "
        r"D = 600 <= fallback_below = 6000",
        found.reason,
    )
    np.testing.assert_allclose(found.values, values[:4], rtol=0, atol=1e-15)
    assert np.all(found.residuals < 1e-14)
    assert f"  method: {found.reason}" in found.describe()
    runs = [line for line in lines if line.startswith("eigenpairs: Lanczos run ")]
    assert len(runs) >= 29 and runs[-1].startswith("eigenpairs: Lanczos run 30 of at most 30")
    assert lines[-1] == f"eigenpairs: {found.reason}"
    unfinished = eigen.eigenpairs(point, k=4, dense_below=0, fallback_below=0, progress=None)
    assert not unfinished.converged and unfinished.method == "lanczos"
    assert unfinished.runs == 5 * (2 * 4 + 10)  # the default max_restarts
    assert unfinished.reason.startswith(
        "Lanczos: D = 600 > dense_below = 0; not converged at rtol = 1e-10, and D > "
        "fallback_below = 0: the residuals reached "
    )
    reached = float(np.max(unfinished.residuals)) / unfinished.scale
    assert f"reached {reached:.2g} x scale" in unfinished.reason
    assert "NOT converged" in unfinished.describe()
    # the slots an unconverged search fills hold Ritz pairs with their exact residuals
    products = np.asarray(point.inputs) @ unfinished.flat_vectors.T
    exact = np.linalg.norm(
        products.T - unfinished.values[:, None] * unfinished.flat_vectors, axis=1
    )
    np.testing.assert_allclose(unfinished.residuals, exact, rtol=1e-6, atol=1e-15)


def test_the_result_says_which_method_and_why():
    point = _alpha_block(True)
    dense = eigen.eigenpairs(point, k=2)
    assert dense.reason == "dense: D = 5 <= dense_below = 3000 (dense_below=0 for Lanczos)"
    lanczos = eigen.eigenpairs(point, k=2, dense_below=0, progress=None)
    assert lanczos.converged and lanczos.reason == "Lanczos: D = 5 > dense_below = 0"
    escape = escape_lib.escape_directions(point, progress=None)
    assert f"  method: {escape.eigen.reason}" in escape.describe()


def test_bad_arguments_are_refused_in_one_sentence():
    point = _alpha_block(True)
    cases = [
        (ValueError, "k = 6: must be at most D = 5", lambda: eigen.eigenpairs(point, k=6)),
        (ValueError, "k = 0: must be an integer >= 1", lambda: eigen.eigenpairs(point, k=0)),
        (
            ValueError,
            "which = 'middle': must be one of",
            lambda: eigen.eigenpairs(point, 3, "middle"),
        ),
        (TypeError, "expects a landscape.Point", lambda: eigen.eigenpairs({"b": 1.0})),
        (TypeError, "expects a landscape.Point", lambda: escape_lib.escape_directions("theta_pi")),
        (ValueError, "ncv = 3", lambda: eigen.eigenpairs(point, 2, ncv=3)),
        (ValueError, "epsilons", lambda: escape_lib.escape_directions(point, epsilons=(1e-3, 0.0))),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message) as caught:
            call()
        text = str(caught.value)
        assert text.endswith(".") and not re.search(r"\. [A-Z]", text)  # one sentence


@pytest.mark.parametrize("spectrum", ["geometric", "clustered"])
def test_one_gram_schmidt_pass_after_the_recurrence_keeps_the_basis_orthonormal(spectrum):
    """A run of up to 150 float32 Lanczos steps (the recurrence, then one pass; rtol < 0: no
    early stop): its basis orthonormal to rounding, and the Lanczos residual estimate
    |beta s_last| of the top Ritz pair equal to its exact residual."""
    rng = np.random.default_rng(3)
    values = {
        "geometric": np.r_[1e3, 10.0 ** -np.linspace(0, 8, 599)],
        "clustered": np.r_[
            [2.0] * 5, 1.0 + 1e-6 * rng.standard_normal(300), np.linspace(-1, 0.5, 295)
        ],
    }[spectrum]
    basis = np.linalg.qr(rng.standard_normal((values.size, values.size)))[0]
    matrix = ((basis * values) @ basis.T).astype(np.float32)
    point = landscape.Point(
        {"x": np.zeros(values.size, np.float32)}, objective=_quadratic, inputs=matrix
    )
    dim, k = values.size, 2
    settings = krylov_schur.Settings(k, 151, dim, "largest", -1.0, 1)
    plan = krylov_schur.plan(settings, krylov_schur.init(settings), np.dtype(np.float32))
    vectors = jax.device_put(np.zeros((k + 151, dim), np.float32))
    vectors, outcome = eigen_search.advance(
        _quadratic, point.params, matrix, vectors, plan, jax.random.key(0), "largest"
    )
    steps = int(np.argmin(np.asarray(outcome.more))) + 1 if not np.all(outcome.more) else 150
    assert int(outcome.taken) == 150 and steps > 100  # float32 exhausts the space a little early
    rows = np.asarray(vectors, np.float64)[k : k + steps]
    assert np.abs(rows @ rows.T - np.eye(steps)).max() < 1e-5
    theta, coeffs, estimates = krylov_schur.wanted_first(outcome, 150, "largest")
    ritz = coeffs[:steps, 0] @ rows
    exact = np.linalg.norm(matrix.astype(np.float64) @ ritz - theta[0] * ritz)
    assert estimates[0] == pytest.approx(exact, rel=0.05, abs=1e-5 * abs(theta[0]))


def test_a_loose_rtol_stops_runs_early_and_counts_every_product():
    """rtol=1e-3 on the quadratic: fewer products than a tight search and fewer than full runs
    (a run adds at most ncv - k - 1 vectors), and the top value within rtol."""
    spectrum = _spectrum(0)
    point = _quadratic_point(spectrum, seed=0)
    tight = eigen.eigenpairs(point, k=1, which="largest", dense_below=0)
    loose = eigen.eigenpairs(point, k=1, which="largest", dense_below=0, rtol=1e-3)
    full_run = eigen_search.default_ncv(1) - 1 - 1
    assert loose.num_hvps < tight.num_hvps
    assert loose.num_hvps < loose.runs * full_run
    assert abs(loose.values[0] - 2.5) <= 1e-3 * 2.5
    assert loose.residuals[0] <= 1e-3 * 2.5 * 1.01 and loose.converged


def test_lanczos_through_a_null_space_stays_finite_and_exact():
    """core lanczos on all of D = 200 for a rank-50 matrix (float32): past the rank the products
    are rounding, which must count as an exhausted space (fresh directions), not as a direction;
    T stays finite and its extremes are the matrix's."""
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.standard_normal((200, 200)))[0]
    values = np.r_[rng.standard_normal(50), np.zeros(150)]
    matrix = jnp.asarray((basis * values) @ basis.T, jnp.float32)
    alphas, betas = core_lanczos.lanczos(
        lambda v: matrix @ v, 200, 200, jax.random.key(0), jnp.float32
    )
    tridiagonal = np.diag(alphas) + np.diag(betas, 1) + np.diag(betas, -1)
    assert np.all(np.isfinite(tridiagonal))
    ritz = np.linalg.eigvalsh(tridiagonal.astype(np.float64))
    np.testing.assert_allclose(ritz[[0, -1]], [values.min(), values.max()], rtol=1e-5)
    assert np.sum(np.abs(ritz) > 1e-4) == 50  # each nonzero eigenvalue once, no ghost copies
