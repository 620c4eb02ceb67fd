"""Mistakes that used to give a silently wrong result now give the right one (or one sentence):
an int `seeds`, `sweeps.run(dtype=)` on float32 parameters, a loss that reads a global, mixed
float32/float64 parameters (docs/guide/reliability.md)."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.engine import sweeps, training


def _dense_problem(param_dtype=jnp.float32):
    """A one-layer Flax regression whose init gives `param_dtype` parameters (Flax's default:
    float32 even with x64 on)."""
    model = nn.Dense(1, param_dtype=param_dtype)
    x = jnp.linspace(-1.0, 1.0, 8)[:, None]

    def loss(params, key, hp):
        target = jnp.sin(3.0 * x) + 0.1 * jax.random.normal(key, x.shape, params["kernel"].dtype)
        return jnp.mean((model.apply({"params": params}, x) - target) ** 2), {}

    return training.Problem(
        init=lambda key, hp: model.init(key, x)["params"],
        loss=loss,
        learning_rates=lambda hp: hp["lr"],
    )


def _run(problem, grid, **kw):
    return sweeps.run(problem, {}, {"lr": 0.1}, grid, num_steps=4, log_every=2, progress=None, **kw)


def test_an_int_seeds_is_refused_and_range_gives_that_many_seeds():
    with pytest.raises(TypeError, match=r"give range\(4\) for 4 seeds, or \[4\]"):
        sweeps.Grid.make({"lr": [0.1]}, seeds=4)
    result = _run(_dense_problem(), sweeps.Grid.make({"lr": [0.1]}, seeds=range(4)))
    np.testing.assert_array_equal(result.seeds, [0, 1, 2, 3])
    kernels = result.params("initial")["kernel"][:, 0, 0]
    assert len(set(kernels.tolist())) == 4  # four seeds, four initialisations


def test_dtype_casts_the_parameters_and_config_json_says_so(tmp_path):
    grid = sweeps.Grid.make({"lr": [0.1]}, seeds=[0])
    cast = _run(_dense_problem(jnp.float32), grid, dtype=np.float64, workdir=tmp_path / "w")
    assert {leaf.dtype for leaf in jax.tree.leaves(cast.final_params)} == {np.dtype("float64")}
    assert {leaf.dtype for leaf in jax.tree.leaves(cast.initial_params)} == {np.dtype("float64")}
    assert json.loads((tmp_path / "w" / "config.json").read_text())["dtype"] == "float64"
    # the same float32 draws, cast: the initial parameters of the float32 run, in float64
    single = _run(_dense_problem(jnp.float32), grid, dtype=np.float32)
    np.testing.assert_array_equal(
        cast.params("initial", 0)["kernel"],
        single.params("initial", 0)["kernel"].astype(np.float64),
    )
    # and float32 asked of a float64 init: float32 parameters
    down = _run(_dense_problem(jnp.float64), grid, dtype=np.float32)
    assert {leaf.dtype for leaf in jax.tree.leaves(down.final_params)} == {np.dtype("float32")}


def test_float64_without_x64_is_refused_not_run_in_float32():
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=r"^dtype = float64 needs 64-bit arrays"):
            _run(_dense_problem(), sweeps.Grid.make({"lr": [0.1]}, [0]), dtype=np.float64)


def test_a_new_point_reads_what_its_loss_reads_afresh():
    """Programs are cached by function object; a Point given by loss_fn traces it afresh, so a
    changed global is seen by the next Point (its with_params points share its programs)."""
    scale = {"value": 1.0}

    def loss(params):
        return scale["value"] * jnp.sum(params["x"] ** 2)

    first = landscape.Point({"x": jnp.ones(2)}, loss)
    np.testing.assert_allclose(landscape.hessian_at(first).eigenvalues, [2.0, 2.0])
    scale["value"] = 3.0
    second = landscape.Point({"x": jnp.ones(2)}, loss)
    np.testing.assert_allclose(landscape.hessian_at(second).eigenvalues, [6.0, 6.0])
    moved = second.with_params({"x": jnp.zeros(2)})
    assert moved.shared[0] is second.shared[0] and first.shared[0] is not second.shared[0]
    # a list of points of one loss_fn is still one model (one compiled call)
    gradients = landscape.gradient_at([second, moved])
    np.testing.assert_allclose([g.norm for g in gradients], [6.0 * np.sqrt(2.0), 0.0])


def _saddle_point(dtype_x, dtype_y):
    """x^2 - y^2 + x y^4 at the origin: a saddle in float32 and in float64 alike."""
    return landscape.Point(
        {"x": jnp.zeros(1, dtype_x), "y": jnp.zeros(1, dtype_y)},
        lambda p: jnp.sum(p["x"] ** 2 - p["y"] ** 2 + p["x"] * p["y"] ** 4),
    )


def test_mixed_dtypes_are_refused_and_the_cast_gives_the_pure_verdict():
    with pytest.raises(TypeError, match=r"params mixes floating dtypes \(float32: 'x'"):
        _saddle_point(jnp.float32, jnp.float64)
    double = _saddle_point(jnp.float64, jnp.float64)
    pure = landscape.hessian_at(double)
    single = landscape.hessian_at(_saddle_point(jnp.float32, jnp.float32))
    params = {"x": jnp.zeros(1, jnp.float32), "y": jnp.zeros(1)}
    cast = jax.tree.map(lambda a: a.astype(jnp.float64), params)  # what the sentence suggests
    recast = landscape.hessian_at(double.with_params(cast))
    assert pure.verdict() == single.verdict() == recast.verdict()
    assert pure.kind() is landscape.Curvature.SADDLE


def test_records_load_of_a_run_stopped_at_a_non_finite_loss_says_so(tmp_path):
    """A run stopped at a non-finite loss has no result to load: records.load says the step it
    stopped at (summary.json's) in one sentence, and its rows up to then are in metrics.jsonl."""
    problem = training.Problem(
        init=lambda key, hp: {"w": jnp.ones(2)},
        loss=lambda params, key, hp: (jnp.sum(params["w"] ** 4), {}),
        learning_rates=lambda hp: hp["lr"],
    )
    grid = sweeps.Grid.make({"lr": [10.0]}, seeds=[0])
    with pytest.raises(training.NonFiniteLossError) as stopped:
        _run(problem, grid, workdir=tmp_path / "w")
    step = stopped.value.step
    assert json.loads((tmp_path / "w" / "summary.json").read_text())["step"] == step
    with pytest.raises(ValueError) as info:
        landscape.records.load(tmp_path / "w")
    assert str(info.value) == (
        f"{tmp_path / 'w'}: the run stopped at a non-finite loss at step {step}, so it holds no "
        "result to load, only its metrics.jsonl rows up to then (pandas.read_json(path, "
        "lines=True))."
    )
    lines = (tmp_path / "w" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    before = [r for r in rows if r["step"] < step]
    assert [r["step"] for r in before] == list(range(0, step, 2)) and step > 2
    assert np.isfinite(before[-1]["loss"])  # the last logged loss before the stop


def _half_point(dtype):
    """A tanh layer's squared error with its Gauss-Newton split, parameters in `dtype`."""
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

    def outputs(params, data):
        return jnp.tanh(data @ params["w"])

    def output_loss(z, data):
        return jnp.mean(z**2)

    return landscape.Point(
        {"w": jnp.ones((3, 2), dtype)}, objective=lambda p, d: output_loss(outputs(p, d), d),
        inputs=x, outputs=outputs, output_loss=output_loss,
    )  # fmt: skip


HALF_PROBES = {
    "gradient_at": lambda p: landscape.gradient_at(p),
    "hessian_at": lambda p: landscape.hessian_at(p),
    "hvp": lambda p: landscape.hvp(p),
    "hvp_flat": lambda p: landscape.hvp_flat(p),
    "lanczos_spectrum": lambda p: landscape.lanczos_spectrum(p, 3),
    "eigenpairs": lambda p: landscape.eigenpairs(p, 2),
    "escape_directions": lambda p: landscape.escape_directions(p),
    "trace": lambda p: landscape.trace(p, 4),
    "spectral_density": lambda p: landscape.spectral_density(p, 2, 3),
    "diagonal": lambda p: landscape.diagonal(p, 2),
    "ggn_at": lambda p: landscape.ggn_at(p),
    "path": lambda p: landscape.path(p, p),
    "tracker": lambda p: landscape.tracker(p.objective, 3).init(p.params, jax.random.key(0)),
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("probe", list(HALF_PROBES))
def test_every_probe_refuses_half_precision_in_the_same_sentence(probe, dtype):
    point = _half_point(jnp.dtype(dtype))
    sentence = (
        rf"{probe}: the parameters are {dtype}, whose rounding \([0-9.e-]+\) would be most of a "
        r"curvature estimate: the probes work in float32 or float64; cast them first, e\.g\. "
        r"jax\.tree\.map\(lambda a: a\.astype\(jnp\.float32\), params\)\.$"
    )
    with pytest.raises(TypeError, match=sentence):
        HALF_PROBES[probe](point)


def test_a_float32_density_reports_float32_and_its_tolerance_and_counts_probes():
    """spectral_density of a float32 point: summary's dtype is float32 and its tolerance 100 eps
    (float32's) x the largest |Ritz value|; summary warns of nothing; the progress line of its
    blocks counts probes."""
    point = _half_point(jnp.float32)
    density = landscape.spectral_density(point, 4, 5, progress=None)
    row = density.summary()
    scale = np.abs(density.nodes).max()
    assert row["dtype"] == "float32"
    assert row["tol"] == pytest.approx(100 * np.finfo(np.float32).eps * scale, rel=1e-6)
    assert "tol = " + f"{row['tol']:.3g}" in density.describe()
    lines = []
    with pytest.MonkeyPatch.context() as patch:  # a block a probe, each past LONG_SECONDS
        patch.setattr(landscape.core.blocks, "CPU_BLOCK_BYTES", 1.0)
        patch.setattr(landscape.core.blocks, "LONG_SECONDS", -1.0)
        again = landscape.spectral_density(point, 4, 5, progress=lines.append)
    assert lines[0].startswith("spectral_density: 1 of 4 probes |") and len(lines) == 3
    np.testing.assert_allclose(again.nodes, density.nodes, atol=1e-6 * scale)  # to rounding
