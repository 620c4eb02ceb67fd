"""The Krylov-Schur search on its own (landscape/core/krylov_schur.py, krylov_schur_device.py):
small dense symmetric matrices as operators, its pairs against numpy's eigh, its residual
certificates, a repeated eigenvalue's copies, locking, both ends, and its products counted."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.core import krylov_schur as ks
from landscape.core import krylov_schur_device as device
from landscape.core import orthonormal
from landscape.core.layout import Layout

ONE = Layout(None, (), "")  # one device
KEY = jax.random.key(0)
D = 40  # most tests' size, and k = 4 in ncv = 12: one program serves them


def _matrix(values, seed=0):
    """A symmetric matrix with these eigenvalues in a random orthonormal basis."""
    values = np.asarray(values, np.float64)
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((values.size,) * 2))[0]
    return (basis * values) @ basis.T


@functools.partial(jax.jit, static_argnames=("which",), donate_argnames=("vectors",))
def _in_program(matrix, vectors, plan, key, which):
    """A call in one program, the product a dense matrix's."""
    point = (jnp.zeros((), matrix.dtype), jnp.zeros(matrix.shape[0], matrix.dtype))
    return device.run_call(lambda v: matrix @ v, vectors, plan, key, which, ONE, point)


_begin = jax.jit(device.begin, static_argnames=("layout",))
_next_vector = jax.jit(device.next_vector)
_step = jax.jit(device.step, static_argnames=("which", "layout"))


class Search:
    """One search of `matrix`: its settings, each plan asked and the products made."""

    def __init__(self, matrix, k=4, which="largest", ncv=12, rtol=1e-8, max_runs=60):
        dim = matrix.shape[0]
        self.matrix = matrix
        self.settings = ks.Settings(k, min(ncv - k, dim + 1), dim, which, rtol, max_runs)
        self.vectors = jnp.zeros((k + self.settings.rows, dim))
        self.plans, self.products = [], 0

    def in_program(self, plan):
        self.plans.append(plan)
        self.vectors, outcome = _in_program(
            jnp.asarray(self.matrix), self.vectors, plan, KEY, self.settings.which
        )
        return jax.tree.map(np.asarray, outcome)

    def by_host(self, plan):
        """The same call as a host loop over `begin` and `step`, a product each (a stream's)."""
        self.plans.append(plan)
        point = (jnp.zeros(()), jnp.zeros(self.settings.dim))
        carry = _begin(self.vectors, plan, KEY, point, ONE)
        while bool(carry.product_due):
            v = _next_vector(plan, carry)
            product = self.matrix @ np.asarray(v)
            self.products += 1
            carry = _step(plan, KEY, self.settings.which, ONE, carry, v, product)
        self.vectors = carry.vectors
        return jax.tree.map(np.asarray, carry.outcome)

    def run(self, call=None):
        """(state, values and residuals most wanted first, their vectors (k, D))."""
        self.state, _ = ks.drive(self.settings, call or self.in_program, np.dtype(np.float64))
        values, residuals, order = ks.ordered(self.settings, self.state)
        return self.state, values, residuals, np.asarray(self.vectors)[: len(order)][order]


@pytest.mark.parametrize("which", ["largest", "smallest"])
def test_the_wanted_pairs_are_eighs_certified_by_exact_residuals(which):
    values = np.linspace(-3.0, 5.0, D) ** 3
    matrix = _matrix(values)
    state, found, residuals, vectors = Search(matrix, which=which).run()
    expected = np.sort(values)[::-1][:4] if which == "largest" else np.sort(values)[:4]
    assert state.converged and state.finite and state.mode == ks.Mode.DONE
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-9 * np.abs(values).max())
    exact = np.linalg.norm(vectors @ matrix - found[:, None] * vectors, axis=1)
    np.testing.assert_allclose(residuals, exact, rtol=1e-6, atol=1e-13)
    assert np.all(residuals <= 1e-8 * ks.scale(state))  # the certificate: rtol * scale
    assert state.residual_products == 4  # a product each, none refused on this spectrum
    np.testing.assert_allclose(vectors @ vectors.T, np.eye(4), atol=1e-10)
    assert values.min() - 1e-9 <= state.low <= state.high <= values.max() + 1e-9  # Ritz values


@pytest.mark.parametrize("keep", [0.3, 0.75])
def test_a_thick_restart_keeping_more_or_less_than_half_converges_alike(keep, monkeypatch):
    """The restart's rule (`kept_rows`) is the host's alone: the device rotates by the q it is
    given, so a keep other than half changes the runs, not the answer."""
    values = np.linspace(-3.0, 5.0, D) ** 3
    matrix = _matrix(values)
    half, _, _, _ = Search(matrix, ncv=20).run()
    monkeypatch.setattr(ks, "KEEP", keep)
    search = Search(matrix, ncv=20)  # 16 basis rows: 4 or 11 Ritz vectors kept, of 15
    state, found, residuals, _ = search.run()
    assert ks.kept_rows(search.settings.rows) == int(keep * 15)
    assert state.converged and state.products != half.products  # the keep took effect
    np.testing.assert_allclose(found, np.sort(values)[::-1][:4], atol=1e-9 * np.abs(values).max())
    assert np.all(residuals <= 1e-8 * ks.scale(state))


def test_a_repeated_eigenvalue_is_found_with_its_multiplicity():
    """Three copies of the top eigenvalue: a Krylov space from one start holds one, so the
    others are found by fresh phases, each locked beside the first."""
    values = np.r_[[4.0] * 3, 3.0, np.linspace(-2.0, 2.5, D - 4)]
    matrix = _matrix(values, seed=1)
    search = Search(matrix)
    state, found, residuals, vectors = search.run()
    assert state.converged
    np.testing.assert_allclose(found, [4.0, 4.0, 4.0, 3.0], atol=1e-9)
    projector = vectors[:3].T @ vectors[:3]
    basis = np.linalg.eigh(matrix)[1][:, -3:]  # the eigenspace of 4
    np.testing.assert_allclose(projector, basis @ basis.T, atol=1e-8)
    assert sum(bool(plan.fresh) for plan in search.plans) >= 3  # the first start and two more


def test_locking_keeps_certified_pairs_across_restarts():
    """A small basis (ncv = 12 for k = 4): pairs are locked by exact checks (CHECK calls, each
    Ritz vector's product) and kept in the locked rows while later runs restart; the plans
    alternate runs and checks, and every run after the first is a restart."""
    values = np.r_[np.linspace(10.0, 9.0, 4), np.linspace(-1.0, 1.0, D - 4)]
    search = Search(_matrix(values, seed=2))
    state, found, residuals, _ = search.run()
    modes = [ks.Mode(int(plan.mode)) for plan in search.plans]
    assert state.converged and modes[0] == ks.Mode.EXTEND and ks.Mode.CHECK in modes
    assert state.runs == modes.count(ks.Mode.EXTEND) > 1
    assert all(bool(plan.rotate) for plan in search.plans[1:] if plan.mode == ks.Mode.EXTEND)
    np.testing.assert_allclose(found, values[:4], atol=1e-9)


def test_every_product_is_counted_and_a_host_loop_drives_the_same_steps():
    """The calls as host loops over begin/step (a stream's shape): the products made equal the
    state's count, and the answer is the one-program loop's."""
    matrix = _matrix(np.linspace(-1.0, 2.0, D) ** 3, seed=3)
    by_host = Search(matrix, which="smallest")
    state, found, residuals, vectors = by_host.run(by_host.by_host)
    assert state.products == by_host.products > 0
    program = Search(matrix, which="smallest")
    other = program.run()
    assert other[0].products == state.products and other[0].runs == state.runs
    np.testing.assert_allclose(other[1], found, atol=1e-12)
    np.testing.assert_allclose(other[2], residuals, rtol=1e-6, atol=1e-15)


def test_an_exhausted_space_gives_every_eigenvalue():
    """D = 6, k = 6: the Krylov space runs out before ncv; the fresh directions find the rest."""
    values = np.array([3.0, 1.0, 1.0, -0.5, -2.0, 0.0])
    state, found, _, vectors = Search(_matrix(values, seed=4), k=6, ncv=20).run()
    assert state.converged and len(state.values) == 6
    np.testing.assert_allclose(found, np.sort(values)[::-1], atol=1e-10)
    np.testing.assert_allclose(vectors @ vectors.T, np.eye(6), atol=1e-10)


def test_an_exhausted_spaces_direction_is_a_standard_normal_draw_of_its_key():
    """`hashed_normal`: the first four moments of N(0, 1) to their sampling error at 10^6
    entries, the same vector for the same key, uncorrelated for another key or a shifted index."""
    like = jnp.zeros(10**6, jnp.float32)
    x = np.asarray(orthonormal.hashed_normal(KEY, like), np.float64)
    y = np.asarray(orthonormal.hashed_normal(jax.random.fold_in(KEY, 1), like), np.float64)
    assert x.shape == like.shape
    np.testing.assert_array_equal(x, np.asarray(orthonormal.hashed_normal(KEY, like)))
    with jax.enable_x64(not jax.config.jax_enable_x64):  # the same draw with x64 on or off
        np.testing.assert_array_equal(x, np.asarray(orthonormal.hashed_normal(KEY, like)))
    moments = [np.mean(x), np.mean(x**2), np.mean(x**3), np.mean(x**4)]
    errors = np.abs(np.array(moments) - [0.0, 1.0, 0.0, 3.0]) / np.array([1, 1.4, 3.9, 9.8])
    assert np.all(errors < 5e-3), errors  # within 5 standard errors (1e-3 x these) each
    for other in (y, np.roll(x, 1)):
        assert abs(np.corrcoef(x, other)[0, 1]) < 5e-3


def test_a_search_out_of_runs_fills_its_slots_uncertified():
    """max_runs = 1 on a slowly converging spectrum: FILL takes the best Ritz pairs, each with
    its exact residual, and the search is not converged."""
    values = 1.0 - 1e-4 * np.arange(D)
    search = Search(_matrix(values, seed=5), max_runs=1)
    state, found, residuals, vectors = search.run()
    assert not state.converged and len(state.values) == 4
    assert ks.Mode(int(search.plans[-1].mode)) == ks.Mode.FILL
    exact = np.linalg.norm(vectors @ search.matrix - found[:, None] * vectors, axis=1)
    np.testing.assert_allclose(residuals, exact, rtol=1e-6)
    assert np.all(np.abs(found - 1.0) < 0.03)


def test_a_product_not_finite_ends_the_search():
    matrix = _matrix(np.linspace(-1.0, 1.0, D))
    matrix[3, 3] = np.nan
    state, *_ = Search(matrix).run()
    assert not state.finite and not state.converged and state.mode == ks.Mode.DONE
    assert state.products == 1  # the call ended at the first product


def test_plan_and_receive_are_pure():
    """The same state and outcome give the same next state, the state given unchanged."""
    matrix = _matrix(np.linspace(-1.0, 3.0, D), seed=6)
    search = Search(matrix)
    settings, state = search.settings, ks.init(search.settings)
    first = ks.plan(settings, state, np.dtype(np.float64))
    assert ks.Mode(int(first.mode)) == ks.Mode.EXTEND and bool(first.fresh)
    outcome = search.in_program(first)
    proj = state.proj.copy()
    after = ks.receive(settings, state, first, outcome)
    again = ks.receive(settings, state, first, outcome)
    assert np.array_equal(state.proj, proj) and state.runs == 0 and state.rotation is not None
    assert after.runs == again.runs == 1 and np.array_equal(after.proj, again.proj)
    assert after.rotation is None or after.mode == ks.Mode.EXTEND
    assert after.products == int(outcome.taken) == settings.rows - 1


def test_a_candidate_that_could_not_be_kept_is_not_checked():
    """With k = 2 pairs locked (5 and 4), converged Ritz pairs at 6 and 3: 6 is checked (it
    would replace 4), 3 is not (no more wanted than either): one product, not two, and the
    restart past both."""
    settings = ks.Settings(2, 6, 40, "largest", 1e-8, 10)
    rows = settings.rows
    state = ks.init(settings)._replace(
        mode=ks.Mode.EXTEND, values=(5.0, 4.0), residuals=(0.0, 0.0), unchanged=False,
        theta=np.array([6.0, 3.0, 2.0]), coeffs=np.eye(rows)[:, :3],
        estimates=np.array([0.0, 0.0, 1.0]), proj=np.diag([6.0, 3.0, 2.0, 0, 0, 0]), size=3,
        low=2.0, high=6.0, rotation=None, fresh=False,
    )  # fmt: skip
    state = ks._after_run(settings, state._replace(runs=0))
    assert state.mode == ks.Mode.CHECK and (state.cursor, state.stop) == (0, 2)
    plan = ks.plan(settings, state, np.dtype(np.float64))
    assert int(plan.steps) == 1 and float(plan.theta[0]) == 6.0
    outcome = ks.Outcome(
        np.int32(1), np.zeros(rows), np.zeros((rows, rows)), np.zeros(rows), np.zeros(rows),
        np.zeros(rows), np.zeros(rows, bool), np.array([1e-9, 0.0]), np.array([True, False]),
        np.float64(0.0), np.zeros(40),
    )  # fmt: skip
    after = ks.receive(settings, state, plan, outcome)
    assert sorted(after.values) == [5.0, 6.0] and after.products == 1
    assert after.mode == ks.Mode.EXTEND and after.fresh  # k locked, one changed: a fresh phase
    np.testing.assert_allclose(after.rotation[:, 0], np.eye(rows)[:, 2])  # seeded past 6 and 3
