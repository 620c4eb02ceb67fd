"""One program per probe: every public probe's first call compiles at most two XLA programs,
eager operations included, and a call at a new point of the same model compiles none
(docs/design/curvature.md, "One program per probe"). On an accelerator each program costs
seconds of compilation and autotuning, so the count is what a first call costs there.

Counted with JAX's own event for each backend compile, after `jax.clear_caches()` (so each
probe's first call starts from nothing) and with the persistent compilation cache off (a cache
hit is not a compile)."""

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import monitoring

import landscape
from landscape import _checks as landscape_checks

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_COUNT = [0]


def _listener(event, duration, **kwargs):
    if event == COMPILE_EVENT:
        _COUNT[0] += 1


monitoring.register_event_duration_secs_listener(_listener)


@contextlib.contextmanager
def _counted():
    """Yields a list that holds, on exit, the number of XLA programs compiled inside."""
    found, before = [], _COUNT[0]
    yield found
    found.append(_COUNT[0] - before)


@pytest.fixture(autouse=True)
def _no_persistent_cache():
    before = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_enable_compilation_cache", before)


def _mlp_outputs(params, data):
    x, _ = data
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.tanh(hidden @ params["w2"]) @ params["w3"]


def _squared_error(z, data):
    return 0.5 * jnp.mean((z - data[1]) ** 2)


def _mlp(params, data):
    return _squared_error(_mlp_outputs(params, data), data)


def _point(seed, hidden=16, batches=False, streamed=False):
    """A 6 -> hidden -> hidden -> 2 tanh MLP (float32), its loss split for the Gauss-Newton
    matrix; a new seed is a new point of the same model (new params and data)."""
    rng = np.random.default_rng(seed)
    params = {
        "w1": rng.standard_normal((6, hidden)) / 3,
        "b1": np.zeros(hidden),
        "w2": rng.standard_normal((hidden, hidden)) / 4,
        "w3": rng.standard_normal((hidden, 2)) / 4,
    }
    params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
    data = (rng.standard_normal((32, 6)).astype(np.float32), rng.standard_normal((32, 2)))
    data = (data[0], data[1].astype(np.float32))
    if streamed:  # 4 batches of 8, read 3 at a time (the last chunk padded)
        listed = [(data[0][i : i + 8], data[1][i : i + 8]) for i in range(0, 32, 8)]
        return landscape.Point(params, objective=_mlp, batches=landscape.stream(listed, chunk=3))
    if batches:
        return landscape.Point(
            params, objective=_mlp, batches=landscape.batches(data, 8), outputs=_mlp_outputs,
            output_loss=_squared_error,
        )  # fmt: skip
    return landscape.Point(
        params, objective=_mlp, inputs=data, outputs=_mlp_outputs, output_loss=_squared_error
    )


def _tangent(point):
    return jax.tree.map(lambda x: np.ones(np.shape(x), np.float32), point.params)


def _tracked(point, tracker, inputs=None):
    """Two measurements of the functional tracker from Python (its state made with numpy)."""
    state = tracker.init(point.params, KEY)
    for _ in range(2):
        measurement, state = tracker.update(state, point.params, inputs or point.inputs)
    return measurement


GRID = np.linspace(-1.0, 1.0, 5)
KEY = jax.random.wrap_key_data(np.asarray([0, 1], np.uint32))  # a user's key, made beforehand
PROBES = {
    "gradient_at": lambda p: landscape.gradient_at(p),
    "gradient_at, a list": lambda p: landscape.gradient_at([p, p.with_params(p.params)]),
    "hvp of a pytree": lambda p: landscape.hvp(p)(_tangent(p)),
    "hvp of a flat vector": lambda p: landscape.hvp(p)(np.ones(p.num_params, np.float32)),
    "hvp_flat": lambda p: landscape.hvp_flat(p)[1](np.ones(p.num_params, np.float32)),
    "hessian_at": lambda p: landscape.hessian_at(p, progress=None),
    "hessian_at, a list": lambda p: landscape.hessian_at([p, p.with_params(p.params)]),
    "hessian_at, lanczos": lambda p: landscape.hessian_at(p, "lanczos", num_iters=20),
    "lanczos_spectrum": lambda p: landscape.lanczos_spectrum(p, 20, progress=None),
    "lanczos_spectrum of G": lambda p: landscape.lanczos_spectrum(
        p, 20, progress=None, matrix="ggn"
    ),
    "eigenpairs, top 5": lambda p: landscape.eigenpairs(
        p, 5, "largest", dense_below=0, progress=None
    ),
    "eigenpairs, bottom 3": lambda p: landscape.eigenpairs(p, 3, dense_below=0, progress=None),
    "eigenpairs, dense": lambda p: landscape.eigenpairs(p, 3, progress=None),
    "escape_directions": lambda p: landscape.escape_directions(p, dense_below=0, progress=None),
    "escape_directions, dense": lambda p: landscape.escape_directions(p, progress=None),
    "trace, hutch++": lambda p: landscape.trace(p, 12, progress=None),
    "trace, hutchinson": lambda p: landscape.trace(p, 12, method="hutchinson", progress=None),
    "trace of G": lambda p: landscape.trace(p, 12, progress=None, matrix="ggn"),
    "hvp of G": lambda p: landscape.hvp(p, matrix="ggn")(_tangent(p)),
    "hvp_flat of G": lambda p: landscape.hvp_flat(p, matrix="ggn")[1](
        np.ones(p.num_params, np.float32)
    ),
    "eigenpairs of G, top 3": lambda p: landscape.eigenpairs(
        p, 3, "largest", dense_below=0, progress=None, matrix="ggn"
    ),
    "eigenpairs of G, dense": lambda p: landscape.eigenpairs(p, 3, progress=None, matrix="ggn"),
    "trace, a list": lambda p: landscape.trace([p, p.with_params(p.params)], 12, progress=None),
    "spectral_density": lambda p: landscape.spectral_density(p, 4, 10, progress=None),
    "diagonal": lambda p: landscape.diagonal(p, 8),
    "path": lambda p: landscape.path(p, p.with_params(_tangent(p))),
    "slice_2d": lambda p: landscape.slice_2d(p, _tangent(p), p.params, GRID, GRID, "filter"),
    "random_direction": lambda p: landscape.random_direction(p, KEY),
    "ggn_at": lambda p: landscape.ggn_at(p, progress=None),
    "near_stationary": lambda p: landscape.hessian_at(p, progress=None).near_stationary(),
    "tracker": lambda p: _tracked(p, landscape.tracker(_mlp, num_iters=8, k=2)),
    "tracker, in batches": lambda p: _tracked(
        p,
        landscape.tracker(_mlp, num_iters=6, in_batches=True),
        jax.tree.map(lambda x: x.reshape((4, 8) + x.shape[1:]), p.inputs),
    ),
}


@pytest.mark.parametrize("name", list(PROBES))
def test_a_probe_compiles_at_most_two_programs_and_none_at_a_new_point(name):
    probe, first, second = PROBES[name], _point(0), _point(1)
    jax.clear_caches()
    with _counted() as at_first:
        probe(first)
    with _counted() as at_new_point:
        probe(second)
    assert at_first[0] <= 2, f"{name}: {at_first[0]} programs at the first call"
    assert at_new_point[0] == 0, f"{name}: {at_new_point[0]} programs at a new point"


# (probe, a count, another count of its block size): `core.sizes.bucket` makes 25 and 30 products
# blocks of 32 (Hutch++'s stages of 8-10 products blocks of 12), 10 and 12 probes blocks of 12;
# the search's tolerance is an argument of its program (`krylov_schur.Plan.tol`)
COUNTS = {
    "trace, hutch++": (lambda p, n: landscape.trace(p, n, progress=None), 30, 25),
    "trace, hutchinson": (
        lambda p, n: landscape.trace(p, n, method="hutchinson", progress=None),
        30,
        25,
    ),
    "trace of G": (lambda p, n: landscape.trace(p, n, progress=None, matrix="ggn"), 30, 25),
    "trace, a list": (
        lambda p, n: landscape.trace([p, p.with_params(p.params)], n, progress=None),
        30,
        25,
    ),
    "spectral_density": (lambda p, n: landscape.spectral_density(p, n, 10, progress=None), 12, 10),
    "diagonal": (lambda p, n: landscape.diagonal(p, n), 12, 10),
    # Lanczos steps: a basis of `sizes.basis_rows` rows (20 and 17 steps: 24), steps an argument
    "lanczos_spectrum, new steps": (
        lambda p, n: landscape.lanczos_spectrum(p, n, progress=None),
        20,
        17,
    ),
    "spectral_density, new steps": (
        lambda p, n: landscape.spectral_density(p, 4, n, progress=None, basis="full"),
        20,
        17,
    ),
    "spectral_density in three vectors, new steps": (
        lambda p, n: landscape.spectral_density(p, 4, n, progress=None, basis="three"),
        20,
        17,
    ),
    "eigenpairs, a new rtol": (
        lambda p, r: landscape.eigenpairs(p, 3, "largest", dense_below=0, progress=None, rtol=r),
        1e-4,
        1e-6,
    ),
    # k locked rows of the same ncv = 20 vectors (`krylov_schur.Plan.locked`)
    "eigenpairs, a new k": (
        lambda p, k: landscape.eigenpairs(p, k, "largest", dense_below=0, progress=None),
        3,
        5,
    ),
}


# over a stream: a pass's block of products, SLQ's group of runs and a basis of a size class
STREAMED_COUNTS = {
    "trace, hutch++, streamed": COUNTS["trace, hutch++"],
    "trace, hutchinson, streamed": COUNTS["trace, hutchinson"],
    "lanczos_spectrum, new steps, streamed": COUNTS["lanczos_spectrum, new steps"],
    "spectral_density, streamed": COUNTS["spectral_density"],
    "eigenpairs, a new k, streamed": COUNTS["eigenpairs, a new k"],
    "spectral_density, new steps, streamed": (
        lambda p, n: landscape.spectral_density(p, 4, n, progress=None),
        20,
        17,
    ),
}


@pytest.mark.parametrize("name", list(COUNTS) + list(STREAMED_COUNTS))
def test_a_new_count_of_probes_compiles_nothing(name):
    """trace(point, 25) after trace(point, 30) is the same program (it compiled again, 45 s on
    8 emulated devices); so is a new number of SLQ or diagonal probes within one block, a new
    number of Lanczos steps within one basis size, and a new tolerance or k of the search, on
    data in memory as over a stream."""
    streamed = name in STREAMED_COUNTS
    probe, count, other = (STREAMED_COUNTS if streamed else COUNTS)[name]
    point = _point(0, streamed=streamed)
    jax.clear_caches()
    probe(point, count)
    with _counted() as at_new_count:
        probe(point, other)
    assert at_new_count[0] == 0, f"{name}: {at_new_count[0]} programs at a new count"


def test_a_dataset_in_batches_is_one_program_per_probe_too():
    first, second = _point(0, batches=True), _point(1, batches=True)
    for probe in (
        lambda p: landscape.eigenpairs(p, 3, "largest", dense_below=0, progress=None),
        lambda p: landscape.trace(p, 12, progress=None),
        lambda p: landscape.lanczos_spectrum(p, 10, progress=None),
        lambda p: landscape.lanczos_spectrum(p, 10, progress=None, matrix="ggn"),
        lambda p: landscape.eigenpairs(p, 2, "largest", dense_below=0, progress=None, matrix="ggn"),
    ):
        jax.clear_caches()
        with _counted() as at_first:
            probe(first)
        with _counted() as at_new_point:
            probe(second)
        assert at_first[0] <= 2 and at_new_point[0] == 0


def test_a_streamed_dataset_is_at_most_two_programs_per_probe_too():
    first, second = _point(0, streamed=True), _point(1, streamed=True)
    for probe in (
        lambda p: landscape.gradient_at(p),
        lambda p: landscape.hvp_flat(p)[1](np.ones(p.num_params, np.float32)),
        lambda p: landscape.hvp(p)(_tangent(p)),
        lambda p: landscape.lanczos_spectrum(p, 10, progress=None),
        lambda p: landscape.trace(p, 12, progress=None),
        lambda p: landscape.trace(p, 12, method="hutchinson", progress=None),
    ):
        jax.clear_caches()
        with _counted() as at_first:
            probe(first)
        with _counted() as at_new_point:
            probe(second)
        assert at_first[0] <= 2 and at_new_point[0] == 0, (at_first, at_new_point)


def test_the_count_sees_an_eager_operation():
    # the counter is not blind: one eager jnp operation on the host path is a program
    jax.clear_caches()
    with _counted() as eager:
        jnp.stack([jnp.zeros(3), jnp.ones(3)]).block_until_ready()
    assert eager[0] >= 1


def test_a_loss_fn_made_afresh_per_point_gets_one_warning_naming_objective_and_inputs():
    """The closure per batch recompiles every probe (counted), and the third such point says so
    once, pointing at the caller's line; points by objective= and inputs=, or by with_params,
    share their programs and get no warning."""
    params = _point(0).params
    batches = [_point(seed).inputs for seed in range(5)]
    jax.clear_caches()
    with _counted() as compiled, pytest.warns(landscape_checks.RecompileWarning) as caught:
        for batch in batches:
            point = landscape.Point(params, loss_fn=lambda p, batch=batch: _mlp(p, batch))
            landscape.lanczos_spectrum(point, 5, progress=None)
    assert compiled[0] >= 5  # a program per point: what the warning is about
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "objective=" in message and "inputs=" in message and "3 points" in message
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch in batches:
            shared = landscape.Point(params, objective=_mlp, inputs=batch)
            landscape.lanczos_spectrum(shared, 5, progress=None)
        one = landscape.Point(params, loss_fn=lambda p: _mlp(p, batches[0]))
        for seed in range(5):
            landscape.lanczos_spectrum(one.with_params(_point(seed).params), 5, progress=None)
