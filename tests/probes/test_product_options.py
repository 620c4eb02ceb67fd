"""The matrix-free probes' product options (`operator.ProductOptions`): `finite_difference=`
against closed forms of the central difference's error, `storage="bfloat16"` against float32
within bounds derived from bfloat16's unit roundoff u = 2^-8, and one sentence per mistake."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.core import operator, three_term
from landscape.probes import capacity, eigen, lanczos, spectra

D = 48
U_BF16 = 2.0**-8  # bfloat16's unit roundoff: |round(x) - x| <= u |x|


def _matrix(seed: int, eigenvalues: np.ndarray) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((len(eigenvalues),) * 2))
    return (q * eigenvalues) @ q.T


def _quartic(params: dict, inputs: dict) -> jax.Array:
    """½ θᵀAθ + bᵀθ + (d/24) Σ θ⁴: H = A + (d/2) diag(θ²), and the central difference of the
    gradient over a step h v has the error (d/6) h² v³ exactly (docs/guide/foundation_scale.md)."""
    theta = params["theta"]
    quadratic = 0.5 * theta @ inputs["A"] @ theta + inputs["b"] @ theta
    return quadratic + inputs["d"] / 24 * jnp.sum(theta**4)


def _point(d: float, dtype=jnp.float64, seed: int = 0) -> tuple[landscape.Point, np.ndarray]:
    """The quartic loss at a random θ, and its exact Hessian (float64)."""
    rng = np.random.default_rng(seed)
    a = _matrix(seed, np.concatenate([[9.0, 7.0, 5.0], rng.uniform(-1, 1, D - 3)]))
    theta = rng.standard_normal(D)
    inputs = {"A": jnp.asarray(a, dtype), "b": jnp.asarray(rng.standard_normal(D), dtype),
              "d": jnp.asarray(d, dtype)}  # fmt: skip
    point = landscape.Point({"theta": jnp.asarray(theta, dtype)}, objective=_quartic, inputs=inputs)
    return point, a + 0.5 * d * np.diag(theta**2)


def _near_eigenvalue(values: np.ndarray, residuals: np.ndarray, hessian: np.ndarray) -> None:
    """Each value lies within its reported residual of an eigenvalue of the symmetric H (a unit
    vector's residual bounds the distance to the spectrum): the certificate hides nothing."""
    exact = np.linalg.eigvalsh(hessian)
    distance = np.min(np.abs(values[:, None] - exact[None, :]), axis=1)
    assert np.all(distance <= residuals * (1 + 1e-6) + 1e-12), (distance, residuals)


# ---------------------------------------------------------------- finite differences


def test_central_differences_are_exact_on_a_quadratic_up_to_rounding():
    """d = 0: the gradient is affine, its central difference is H v to rounding O(u |∇L| / ε)."""
    point, hessian = _point(0.0)
    exact_values = np.linalg.eigvalsh(hessian)[::-1][:3]
    found = eigen.eigenpairs(point, 3, "largest", dense_below=0, fallback_below=0,
                             finite_difference=1e-2, progress=None)  # fmt: skip
    assert found.method == "lanczos" and found.converged
    np.testing.assert_allclose(found.values, exact_values, rtol=1e-9)
    for method in ("hutchinson", "hutch++"):
        fd = spectra.trace(point, 12, method=method, finite_difference=1e-2, progress=None)
        assert fd.value == pytest.approx(spectra.trace(point, 12, method=method).value, rel=1e-10)
    np.testing.assert_allclose(
        spectra.diagonal(point, 8, finite_difference=1e-2).values,
        spectra.diagonal(point, 8).values, atol=1e-10,
    )  # fmt: skip
    density = spectra.spectral_density(point, 4, 10, finite_difference=1e-2, progress=None)
    np.testing.assert_allclose(density.nodes, spectra.spectral_density(point, 4, 10).nodes,
                               atol=1e-8)  # fmt: skip
    ritz = lanczos.lanczos_spectrum(point, 20, finite_difference=1e-2).ritz_values
    np.testing.assert_allclose(ritz, lanczos.lanczos_spectrum(point, 20).ritz_values, atol=1e-8)


@pytest.mark.parametrize("eps", [1e-1, 3e-2])
def test_hutchinson_and_the_diagonal_move_by_the_closed_form(eps):
    """On the quartic loss a Rademacher probe v (|v|² = D) has vᵀ(H_ε v) = vᵀHv + (d/6) ε² Σ v⁴
    / D² · D = vᵀHv + (d/6) ε², and v ⊙ H_ε v = v ⊙ H v + (d/6) ε² / D: the trace moves by
    (d/6) ε² exactly, each diagonal entry by (d/6) ε² / D."""
    d = 3.0
    point, _ = _point(d)
    exact = spectra.trace(point, 8, method="hutchinson", progress=None).value
    fd = spectra.trace(point, 8, method="hutchinson", finite_difference=eps, progress=None)
    assert fd.value - exact == pytest.approx(d / 6 * eps**2, rel=1e-6)
    diagonal = spectra.diagonal(point, 4, finite_difference=eps).values
    np.testing.assert_allclose(diagonal - spectra.diagonal(point, 4).values, d / 6 * eps**2 / D,
                               rtol=1e-6)  # fmt: skip


def test_finite_difference_eigenpairs_report_the_exact_residual():
    """The search's operator H_ε differs from H by at most (d/6) ε² |v³| <= (d/6) ε² on a unit
    vector: the values lie within that of H's, and each reported residual (the larger of the
    search's and a fresh exact product's) bounds the distance to H's spectrum."""
    d, eps = 3.0, 0.3
    point, hessian = _point(d)
    found = eigen.eigenpairs(point, 3, "largest", dense_below=0, fallback_below=0, rtol=1e-8,
                             max_restarts=12, finite_difference=eps, progress=None)  # fmt: skip
    assert found.method == "lanczos"
    exact = np.linalg.eigvalsh(hessian)[::-1][:3]
    assert np.all(np.abs(found.values - exact) <= d / 6 * eps**2 + 1e-9)
    _near_eigenvalue(found.values, found.residuals, hessian)
    vectors = found.flat_vectors
    fresh = np.linalg.norm(vectors @ hessian - found.values[:, None] * vectors, axis=1)
    assert np.all(found.residuals >= fresh * (1 - 1e-9))


# ---------------------------------------------------------------- bfloat16 storage


def _float32(d: float = 0.0) -> tuple[landscape.Point, np.ndarray]:
    point, hessian = _point(d, jnp.float32, seed=3)
    return point, hessian


def test_bfloat16_eigenpairs_within_a_few_ulps_and_honest():
    """Each vector is multiplied as bfloat16 keeps it: H ṽ = H v + H e with |e| <= u, so the
    values move by at most 2 u ||H|| (a Rayleigh quotient's first-order change), and the
    reported residuals bound the distance to H's spectrum (rounding included)."""
    point, hessian = _float32()
    norm = np.max(np.abs(np.linalg.eigvalsh(hessian)))
    how = dict(dense_below=0, fallback_below=0, progress=None)
    f32 = eigen.eigenpairs(point, 3, "largest", **how)
    low = eigen.eigenpairs(point, 3, "largest", storage="bfloat16", **how)
    assert low.method == "lanczos" and low.converged
    assert np.all(np.abs(low.values - f32.values) <= 2 * U_BF16 * norm)
    _near_eigenvalue(low.values.astype(np.float64), low.residuals.astype(np.float64) + 1e-5 * norm,
                     hessian)  # fmt: skip
    assert np.all(low.residuals >= f32.residuals.max())  # bfloat16's floor shows in the residual


def test_bfloat16_basis_keeps_the_first_moments():
    """A probe's first Lanczos vector ṽ = v (1 + δ) entrywise, |δ| <= u: T's first entry, the
    density's mean, moves by at most 2 u ||H|| + u² ||H||, its second moment |H ṽ|² by
    3 u ||H||² (read back at unit norm, Rademacher probes move neither)."""
    point, hessian = _float32()
    norm = np.max(np.abs(np.linalg.eigvalsh(hessian)))
    for basis in ("full", "three"):
        f32 = spectra.spectral_density(point, 4, 12, basis=basis, progress=None)
        low = spectra.spectral_density(point, 4, 12, basis=basis, storage="bfloat16",
                                       progress=None)  # fmt: skip
        for power, bound in ((1, 2.1 * U_BF16 * norm), (2, 3 * U_BF16 * norm**2)):
            moments = [np.sum(r.weights * r.nodes**power, axis=1) for r in (f32, low)]
            assert np.all(np.abs(moments[1] - moments[0]) <= bound), (basis, power)


def test_bfloat16_trace_and_diagonal():
    """Hutch++'s sketch rows Q̃ = Q + E (|E| <= u a row): the exact part moves by at most
    2 r u ||H||, each projected probe by 2 u √r |g| (|g| = √D), its form by 4 u √(r D) ||H||·√D
    / √D: in all |Δ tr| <= (2 r + 4 √(r D)) u ||H||. Rademacher probes are exact in bfloat16:
    the diagonal is float32's."""
    point, hessian = _float32()
    norm = np.max(np.abs(np.linalg.eigvalsh(hessian)))
    f32 = spectra.trace(point, 12, progress=None)
    low = spectra.trace(point, 12, storage="bfloat16", progress=None)
    rank = 4
    assert abs(low.value - f32.value) <= (2 * rank + 4 * np.sqrt(rank * D)) * U_BF16 * norm
    np.testing.assert_array_equal(
        spectra.diagonal(point, 6, storage="bfloat16").values, spectra.diagonal(point, 6).values
    )


def test_bfloat16_lanczos_spectrum_extremes():
    """D steps: float32's Ritz values are H's; with the basis in bfloat16 the extremes within
    4 u ||H|| of them."""
    point, hessian = _float32()
    norm = np.max(np.abs(np.linalg.eigvalsh(hessian)))
    f32 = lanczos.lanczos_spectrum(point, D, progress=None).ritz_values
    low = lanczos.lanczos_spectrum(point, D, progress=None, storage="bfloat16").ritz_values
    assert abs(low[-1] - f32[-1]) <= 4 * U_BF16 * norm
    assert abs(low[0] - f32[0]) <= 4 * U_BF16 * norm


def test_the_tracker_stores_its_basis_in_bfloat16_and_says_so():
    """D steps: float32's λ_max is H's; with the basis in bfloat16 it lies within 4 u ||H|| of it,
    and the reported residual (floored at bfloat16's eps D max|θ|) covers the difference."""
    point, hessian = _float32()
    norm = np.max(np.abs(np.linalg.eigvalsh(hessian)))
    found = {}
    for storage in (None, "bfloat16"):
        tracker = landscape.tracker(_quartic, num_iters=D, k=1, storage=storage)
        state = tracker.init(point.params, jax.random.key(0))
        found[storage] = tracker.update(state, point.params, point.inputs)[0]
    exact = np.linalg.eigvalsh(hessian)[-1]
    low = found["bfloat16"]
    assert abs(float(low.lambda_max) - float(found[None].lambda_max)) <= 4 * U_BF16 * norm
    assert abs(float(low.lambda_max) - exact) <= float(low.residuals[0])
    with pytest.raises(ValueError, match=r"tracker: storage = 'fp8': must be one of"):
        landscape.tracker(_quartic, storage="fp8")


def test_the_memory_estimates_know_the_storage():
    assert three_term.vector_bytes(10, 4, "full", 30, "bfloat16") == 30 * 10 * 2
    assert three_term.vector_bytes(10, 4, "three", 30, "bfloat16") == 2 * 10 * 2
    full = capacity.Probe("full", basis="full")
    assert full.kept_bytes(4, "bfloat16") == 60 and full.kept_bytes(4) == 120


# ---------------------------------------------------------------- mistakes


def test_each_mistake_is_one_sentence():
    point, _ = _point(0.0)
    for call in (
        lambda **kw: eigen.eigenpairs(point, 2, dense_below=0, progress=None, **kw),
        lambda **kw: spectra.spectral_density(point, 2, 4, progress=None, **kw),
        lambda **kw: spectra.trace(point, 4, progress=None, **kw),
        lambda **kw: spectra.diagonal(point, 2, **kw),
        lambda **kw: lanczos.lanczos_spectrum(point, 4, progress=None, **kw),
    ):
        with pytest.raises(ValueError, match=r"storage = 'fp8': must be one of 'bfloat16'\.$"):
            call(storage="fp8")
        with pytest.raises(ValueError, match=r"finite_difference = -1.*\.$"):
            call(finite_difference=-1)
    with pytest.raises(ValueError, match="Gauss-Newton matrix G has no gradient"):
        operator.product_options("trace", [point], "ggn", None, 1e-3)


def test_a_stream_refuses_the_options_in_one_sentence():
    point, _ = _point(0.0)
    streamed = type("Stream", (), {"is_stream": True})()
    listed = [type("P", (), {"batches": streamed})()]
    with pytest.raises(ValueError, match="over a streamed dataset leave it None"):
        operator.product_options("spectral_density", listed, "hessian", None, 1e-3)
    with pytest.raises(ValueError, match="over a streamed dataset leave it None"):
        operator.product_options("trace", listed, "hessian", "bfloat16", None)
    assert operator.product_options("trace", [point]) == operator.ProductOptions()
