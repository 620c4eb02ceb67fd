"""Points of one model share compiled programs; a list of points is one call (compiled.py)."""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import landscape
from landscape.core import compiled
from landscape.markov import theory


def _theta_pi(p, q, **kw):
    return landscape.markov.theta_pi(p=p, q=q, seq_len=6, **kw)


def test_a_new_chain_reuses_the_compiled_hessian():
    landscape.hessian_at(_theta_pi(0.5, 0.8))
    programs = compiled.hessian._cache_size()
    landscape.gradient_at(_theta_pi(0.3, 0.9))
    landscape.hessian_at(_theta_pi(0.3, 0.9))
    assert compiled.hessian._cache_size() == programs  # no new program for a new (p, q)


def test_a_list_of_points_equals_one_at_a_time_and_the_closed_forms():
    chains = [(0.5, 0.8), (0.3, 0.9), (0.2, 0.3)]
    points = [_theta_pi(p, q) for p, q in chains]
    together = landscape.hessian_at(points)
    gradients = landscape.gradient_at(points)
    assert isinstance(together, list) and len(together) == 3
    for point, hessian, gradient, (p, q) in zip(points, together, gradients, chains, strict=True):
        alone = landscape.hessian_at(point)
        np.testing.assert_allclose(hessian.matrix, alone.matrix, rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(gradient.vector, alone.gradient.vector, rtol=1e-9, atol=1e-13)
        assert hessian.point is point
        # the alpha block (b, e) of Thm 2 (tied): pi0 pi1 once, 2 pi0 pi1 (p + q - 1) d times
        pi0, pi1 = q / (p + q), p / (p + q)
        expected = np.sort([pi0 * pi1] + [2 * pi0 * pi1 * (p + q - 1)] * 4)
        focus = np.linalg.eigvalsh(hessian.block(["b", "e"]))
        np.testing.assert_allclose(focus, expected, rtol=1e-8, atol=1e-12)
        assert np.isclose(hessian.gradient.loss, float(theory.unigram_loss(p, q)), rtol=1e-10)


def test_points_of_different_models_in_one_list_are_refused():
    with pytest.raises(
        ValueError, match="must be points of one model; point 1 .* a different loss"
    ):
        landscape.hessian_at([_theta_pi(0.5, 0.8), _theta_pi(0.5, 0.8, tied=False)])
    with pytest.raises(ValueError, match="empty list of points"):
        landscape.gradient_at([])
    with pytest.raises(TypeError):
        landscape.hessian_at([_theta_pi(0.5, 0.8), "theta_pi"])


def test_a_loss_fn_point_still_works_and_compiles_once_per_function():
    def loss(params):
        return 0.5 * params["x"] @ params["x"] - params["y"] ** 3

    point = landscape.Point({"x": jax.numpy.ones(3), "y": jax.numpy.zeros(())}, loss)
    hessian = landscape.hessian_at(point)
    np.testing.assert_allclose(hessian.eigenvalues, [0.0, 1.0, 1.0, 1.0], atol=1e-12)
    assert point.shared[0] is point.shared[0]  # one objective per loss_fn: one program


def test_a_large_hessian_comes_in_chunks_with_progress():
    dim = landscape.probes.curvature.CHUNKED_ABOVE + 76
    a = np.random.default_rng(0).normal(size=(dim, dim)) / np.sqrt(dim)
    matrix = jax.numpy.asarray(a + a.T)

    def objective(params, inputs):
        return 0.5 * params["x"] @ inputs @ params["x"]

    point = landscape.Point({"x": jax.numpy.ones(dim)}, objective=objective, inputs=matrix)
    lines = []
    hessian = landscape.hessian_at(point, columns_per_batch=64, progress=lines.append)
    np.testing.assert_allclose(hessian.matrix, a + a.T, atol=1e-12)
    np.testing.assert_allclose(hessian.gradient.vector, (a + a.T) @ np.ones(dim), atol=1e-10)
    assert lines[0].startswith(f"dense Hessian of the point: D = {dim}, ")
    assert lines[-1].startswith(f"  columns {dim}/{dim} |") and len(lines) == 11


_TWO_DEVICES = textwrap.dedent("""
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import landscape
    dim = landscape.probes.curvature.CHUNKED_ABOVE + 76
    a = np.random.default_rng(0).normal(size=(dim, dim)) / np.sqrt(dim)
    point = landscape.Point(
        {"x": jax.numpy.linspace(0.0, 1.0, dim)},
        objective=lambda p, m: 0.5 * p["x"] @ m @ p["x"] + jax.numpy.sum(jax.numpy.cos(p["x"])),
        inputs=jax.numpy.asarray(a + a.T),
    )
    lines = []
    hessian = landscape.hessian_at(point, columns_per_batch=64, progress=lines.append)
    exact = a + a.T - np.diag(np.cos(np.linspace(0.0, 1.0, dim)))
    print(np.abs(hessian.matrix - exact).max(), len(lines))
    print(lines[0])
    print(len(jax.devices()))
""")


def test_a_large_hessian_shares_its_chunks_among_the_devices():
    """With a CPU device per core (landscape.setup()), each device computes its own chunk of
    columns at once (compiled.hessian_columns_on_devices): the same matrix, half the rounds."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run(
        [sys.executable, "-c", _TWO_DEVICES], cwd=root, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    numbers, header, devices = proc.stdout.strip().splitlines()[-3:]
    error, count = numbers.split()
    assert devices == "2" and float(error) < 1e-12
    assert header.endswith("in chunks of 110 on 2 device(s)") and count == "6"  # 5 rounds


@pytest.mark.parametrize("rule", ["mean", "sum"])
def test_a_large_hessian_over_slices_of_its_population(rule, monkeypatch):
    """meta["population"] = "mean" (the n-gram points) or "sum" (the Markov points' weighted
    sum): with a slice's share of the memory traffic under COLUMN_BYTES (lowered here), the
    columns are summed over equal slices of the population in cache; the same matrix."""
    dim, size = landscape.probes.curvature.CHUNKED_ABOVE + 76, 96
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(size, dim)) / np.sqrt(dim)
    weights = rng.uniform(size=size) / size if rule == "sum" else np.full(size, 1.0 / size)

    def objective(params, inputs):
        x, w = inputs
        values = jax.numpy.cos(x @ params["x"])
        return jax.numpy.sum(w * values) if rule == "sum" else jax.numpy.mean(values)

    point = landscape.Point(
        {"x": jax.numpy.full(dim, 0.3)},
        objective=objective,
        inputs=(jax.numpy.asarray(rows), jax.numpy.asarray(weights)),
        meta={"population": rule},
    )
    moved = landscape.probes.curvature._bytes_moved(point)
    monkeypatch.setattr(landscape.probes.curvature, "COLUMN_BYTES", moved / 5)
    assert landscape.probes.curvature.population_parts(point) == (6, rule == "mean")  # 6 | 96
    lines = []
    hessian = landscape.hessian_at(point, columns_per_batch=64, progress=lines.append)
    z = rows @ np.full(dim, 0.3)
    exact = -(rows.T * (weights * np.cos(z))) @ rows
    np.testing.assert_allclose(hessian.matrix, exact, rtol=0, atol=1e-13)
    assert lines[0].endswith("over 6 slices of the population")
    # a point small enough for one program (D <= CHUNKED_ABOVE) slices its population too
    small = point.with_params({"x": point.params["x"][:200]})
    small = landscape.Point(
        small.params, objective=objective, inputs=(jax.numpy.asarray(rows[:, :200]),
        jax.numpy.asarray(weights)), meta={"population": rule},
    )  # fmt: skip
    moved = landscape.probes.curvature._bytes_moved(small)
    monkeypatch.setattr(landscape.probes.curvature, "COLUMN_BYTES", moved / 2.5)
    assert landscape.probes.curvature.population_parts(small) == (3, rule == "mean")
    # past one example a slice (the traffic over COLUMN_BYTES 200 times, 96 examples): one
    # example each, where no divisor of 96 in 200..96 was found (StopIteration)
    monkeypatch.setattr(landscape.probes.curvature, "COLUMN_BYTES", moved / 200)
    assert landscape.probes.curvature.population_parts(small) == (96, rule == "mean")
    monkeypatch.setattr(landscape.probes.curvature, "COLUMN_BYTES", moved / 2.5)
    sliced = landscape.hessian_at(small)
    z = rows[:, :200] @ np.full(200, 0.3)
    exact = -(rows[:, :200].T * (weights * np.cos(z))) @ rows[:, :200]
    np.testing.assert_allclose(sliced.matrix, exact, rtol=0, atol=1e-13)
    values = np.cos(z)
    loss = np.sum(weights * values) if rule == "sum" else np.mean(values)
    assert sliced.gradient.loss == pytest.approx(loss, rel=1e-13)
