"""The core's orthonormalisation, Hutch++ and memory policy on their own."""

import jax.numpy as jnp
import numpy as np

from landscape.core import hutchpp, memory, orthonormal


def test_qr_rows_are_orthonormal_and_span_the_rows_on_the_host_and_in_jax():
    rows = np.random.default_rng(0).normal(size=(4, 9))
    for q in (orthonormal.qr_rows(rows), np.asarray(orthonormal.qr_rows(jnp.asarray(rows)))):
        np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-14)
        np.testing.assert_allclose(rows @ q.T @ q, rows, atol=1e-13)  # the same span
    assert isinstance(orthonormal.qr_rows(rows), np.ndarray)  # numpy in: nothing compiled
    wide = orthonormal.qr_rows(np.random.default_rng(1).normal(size=(5, 3)))
    np.testing.assert_allclose(wide[3:], 0)  # past n rows, zero


def test_orthogonalised_removes_the_components_along_the_rows():
    q = orthonormal.qr_rows(np.random.default_rng(2).normal(size=(3, 8)))
    w = np.random.default_rng(3).normal(size=8)
    rest = np.asarray(orthonormal.orthogonalised(jnp.asarray(q), jnp.asarray(w)))
    np.testing.assert_allclose(q @ rest, 0, atol=1e-14)
    np.testing.assert_allclose(rest + (q @ w) @ q, w, atol=1e-14)


def test_rotate_rows_applies_q_transposed_in_place():
    """A search's restart: q the identity on the locked row, its zero columns rows dropped."""
    rng = np.random.default_rng(4)
    rows, q = rng.normal(size=(5, 19)), np.zeros((5, 5))
    q[0, 0], q[1:, 1:3] = 1.0, np.linalg.qr(rng.normal(size=(4, 4)))[0][:, :2]
    rotated = np.asarray(orthonormal.rotate_rows(jnp.asarray(rows), jnp.asarray(q)))
    np.testing.assert_array_equal(rotated[0], rows[0])
    np.testing.assert_allclose(rotated[1:3], q[1:, 1:3].T @ rows[1:], atol=1e-14)
    np.testing.assert_array_equal(rotated[3:], 0)
    idle = orthonormal.rotate_rows(jnp.asarray(rows), jnp.asarray(q), active=False)
    np.testing.assert_array_equal(idle, rows)


def test_hutchpp_is_exact_on_a_matrix_of_rank_below_its_sketch():
    """A rank-3 matrix with a sketch of 4 probes: Q spans its range, tr(Q^T H Q) is the trace
    and the probes projected off Q see nothing (their forms are 0)."""
    rng = np.random.default_rng(5)
    u = np.linalg.qr(rng.normal(size=(30, 3)))[0]
    h = u @ np.diag([4.0, -1.0, 2.5]) @ u.T
    rank, rest = hutchpp.split(13, "hutch++")
    assert (rank, rest) == (4, 5) and hutchpp.split(13, "hutchinson") == (0, 13)
    sketch = rng.choice([-1.0, 1.0], size=(rank, 30)) @ h
    q = hutchpp.range_basis(sketch)
    exact = np.sum(q * (q @ h))
    probes = hutchpp.projected(q, rng.choice([-1.0, 1.0], size=(rest, 30)))
    forms = np.sum(probes * (probes @ h), axis=1)
    np.testing.assert_allclose(exact, 5.5, atol=1e-12)
    np.testing.assert_allclose(forms, 0, atol=1e-12)


def test_the_memory_budget_is_half_the_free_memory(monkeypatch):
    assert memory.MEMORY_FRACTION == 0.5
    assert memory.budget(3e9) == 1.5e9
    monkeypatch.setattr(memory, "device_free_bytes", lambda: 8e9)
    assert memory.budget() == 4e9
    assert memory.format_bytes(1.5e9) == "1.5 GB" and memory.format_bytes(999) == "999 B"
