"""The functional tracker (`landscape.tracker`): inside a jitted optax loop equal to the probes at
the kept steps and compiled once, from Python without recompiling, warm starts that beat cold
ones, residual estimates that are the true residuals, a dataset in batches, and one sentence
per mistake."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax._src import monitoring
from jax.flatten_util import ravel_pytree

import landscape
from landscape._checks import RecompileWarning

_COMPILES = [0]


def _listener(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


monitoring.register_event_duration_secs_listener(_listener)


@pytest.fixture(autouse=True)
def _x64_and_no_persistent_cache():
    before = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    with jax.enable_x64(True):
        yield
    jax.config.update("jax_enable_compilation_cache", before)


def _data(seed, n=48):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)), rng.standard_normal((n, 2))


def _params(seed=0):
    rng = np.random.default_rng(100 + seed)
    return {"w1": rng.standard_normal((4, 7)) / 2, "w2": rng.standard_normal((7, 2)) / 2}


def mse(params, batch):
    x, y = batch
    return 0.5 * jnp.mean(jnp.sum((jnp.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2, -1))


def _dense(params, batch):
    flat, unravel = ravel_pytree(params)
    return np.linalg.eigvalsh(np.asarray(jax.hessian(lambda x: mse(unravel(x), batch))(flat)))


def _training(tracker, num_steps, every, lr=0.3):
    """SGD in one jitted lax.scan, the tracker measuring every `every` steps (lax.cond):
    run(params, tracker state, batch) -> the measurements and the parameters at every step."""
    optimizer = optax.sgd(lr)

    @jax.jit
    def run(params, state, batch):
        def step(carry, i):
            params, opt_state, state = carry

            def measured(state):
                return tracker.update(state, params, batch)

            def skipped(state):
                shapes = jax.eval_shape(measured, state)[0]
                nan = jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)
                return nan, state

            measurement, state = jax.lax.cond(i % every == 0, measured, skipped, state)
            grads = jax.grad(mse)(params, batch)
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state, state), (
                measurement,
                params,
            )

        carry = (params, optimizer.init(params), state)
        _, out = jax.lax.scan(step, carry, jnp.arange(num_steps))
        return out

    return run


def test_inside_a_jitted_loop_it_is_the_probes_at_the_kept_steps_and_compiles_once():
    """Every 5 steps of 30, λ_max, the top 3 Ritz values and λ_min of 12 warm Lanczos steps
    (D = 42) are the dense Hessian's eigenvalues within their residuals, certified eigenpairs'
    and lanczos_spectrum's too; a second run on new data compiles nothing."""
    tracker = landscape.tracker(mse, num_iters=12, k=3)
    batch, (key, other_key) = _data(0), jax.random.split(jax.random.key(0))  # made beforehand
    run, before = _training(tracker, 30, 5), _COMPILES[0]
    measurements, params = run(_params(), tracker.init(_params(), key), batch)
    assert _COMPILES[0] - before == 1
    tracked = np.flatnonzero(np.isfinite(measurements.lambda_max))
    np.testing.assert_array_equal(tracked, [0, 5, 10, 15, 20, 25])
    for i in tracked[1:]:  # the first is a cold start
        at = jax.tree.map(lambda a, i=i: np.asarray(a[i]), params)
        exact = _dense(at, batch)
        top, residuals = measurements.top_k[i], measurements.residuals[i]
        assert residuals[0] < 1e-5 * exact[-1]  # λ_max converged: warm starts
        assert np.all(np.abs(top - exact[::-1][:3]) <= residuals + 1e-12)  # and within theirs
        assert measurements.lambda_max[i] == top[0] <= exact[-1] + 1e-12  # inside the spectrum
        gap = abs(measurements.lambda_min[i] - exact[0])
        assert gap <= max(10 * measurements.lambda_min_residual[i], 0.05 * exact[-1])
        point = landscape.Point(at, objective=mse, inputs=batch)
        certified = landscape.eigenpairs(point, 3, "largest", dense_below=0, progress=None)
        assert np.all(np.abs(top - certified.values) <= residuals + 1e-12)
        spectrum = landscape.lanczos_spectrum(point, 42, progress=None)
        np.testing.assert_allclose(top[0], spectrum.lambda_max, rtol=1e-8)
        np.testing.assert_allclose(measurements.loss[i], mse(at, batch), rtol=1e-12)
    before = _COMPILES[0]
    run(_params(1), tracker.init(_params(1), other_key), _data(1))
    assert _COMPILES[0] == before


def test_from_python_every_n_steps_it_compiles_once():
    """Called from Python at new parameters and batches, and by a tracker made afresh with the
    same loss and settings, `update` compiles one program, then none."""
    jax.clear_caches()
    key, other_key = jax.random.split(jax.random.key(1))  # made beforehand
    tracker = landscape.tracker(mse, num_iters=6)
    before = _COMPILES[0]
    state = tracker.init(_params(), key)
    for seed in range(3):
        measurement, state = tracker.update(state, _params(seed), _data(seed))
    again = landscape.tracker(mse, num_iters=6)
    again.update(again.init(_params(), other_key), _params(), _data(5))
    assert _COMPILES[0] - before == 1
    assert int(state.measured) == 3 and measurement.top_k.shape == (1,)


def _quadratic(params, scale):
    """x^T diag(scale) x / 2: H = diag(scale) at every x."""
    return 0.5 * jnp.sum(scale * params["x"] ** 2)


def test_a_warm_start_converges_where_cold_starts_do_not():
    """A constant Hessian with a top gap of 10%: cold Lanczos runs of 6 steps stay 1e-2 off the
    top eigenvalue; four warm runs, each from the last top Ritz vector, converge to 1e-7
    (noise=0: a restarted Lanczos) or to 1e-5 with the default noise."""
    scale = np.concatenate([[1.0], np.linspace(0.0, 0.9, 199)])
    params = {"x": np.ones(200)}
    for noise, within, residual in ((0.0, 1e-7, 2e-4), (0.1, 1e-5, 3e-3)):
        tracker = landscape.tracker(_quadratic, num_iters=6, noise=noise)
        state = tracker.init(params, jax.random.key(0))
        for _ in range(4):
            warm, state = tracker.update(state, params, scale)
        assert 1 - warm.lambda_max < within and warm.lambda_max_residual < residual
    for seed in range(4):
        cold, _ = tracker.update(tracker.init(params, jax.random.key(seed)), params, scale)
        assert 1 - cold.lambda_max > 1e-2 and cold.lambda_max_residual > 5e-2


def test_the_residual_estimates_are_the_residuals_of_the_kept_vectors():
    """|β s_last| equals ||H y - θ y|| of the Ritz vectors the state keeps (the top k, then the
    bottom one), to rounding; the kept vectors are orthonormal."""
    tracker = landscape.tracker(mse, num_iters=8, k=2)
    params, batch = _params(), _data(0)
    m, state = tracker.update(tracker.init(params, jax.random.key(3)), params, batch)
    hvp = landscape.hvp(landscape.Point(params, objective=mse, inputs=batch))
    values = list(m.top_k) + [m.lambda_min]
    estimates = list(m.residuals) + [m.lambda_min_residual]
    vectors = np.asarray(state.vectors)
    np.testing.assert_allclose(vectors @ vectors.T, np.eye(3), atol=1e-12)
    for y, theta, estimate in zip(vectors, values, estimates, strict=True):
        true = np.linalg.norm(np.asarray(hvp(y)) - theta * y)
        np.testing.assert_allclose(estimate, true, rtol=1e-6, atol=1e-13)
        assert estimate > 1e-8  # 8 steps of D = 42 leave real residuals to compare


def test_a_dataset_in_batches_is_its_mean():
    """in_batches=True: the mean of the loss over 4 batches of 12 examples, the same Ritz
    values as the 48 examples in one batch (from the same start)."""
    params, (x, y) = _params(), _data(0)
    one = landscape.tracker(mse, num_iters=10, k=2)
    split = landscape.tracker(mse, num_iters=10, k=2, in_batches=True)
    key = jax.random.key(4)
    whole, _ = one.update(one.init(params, key), params, (x, y))
    batched, _ = split.update(
        split.init(params, key), params, landscape.batches((x, y), batch_size=12)
    )
    for a, b in zip(whole, batched, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-13)


def test_a_streamed_dataset_is_its_batches_mean_and_compiles_once():
    """update over landscape.stream: the same measurements and kept vectors as in_batches=True
    over the same 4 batches, along two warm-started updates, each product a pass over the
    data; the second update compiles nothing."""
    params, (x, y) = _params(), _data(0)
    batches = [(x[i : i + 12], y[i : i + 12]) for i in range(0, 48, 12)]
    split = landscape.tracker(mse, num_iters=10, k=2, in_batches=True)
    streamed = landscape.tracker(mse, num_iters=10, k=2)
    key, data = jax.random.key(4), landscape.stream(batches, chunk=3)
    states = split.init(params, key), streamed.init(params, key)
    for step in range(2):
        moved = jax.tree.map(lambda p, scale=1 + 0.1 * step: p * scale, params)
        before = _COMPILES[0]
        batched, first = split.update(states[0], moved, landscape.batches((x, y), batch_size=12))
        found, second = streamed.update(states[1], moved, data)
        if step:
            assert _COMPILES[0] == before  # a new point: no new program
        for a, b in zip(batched, found, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(first.vectors, second.vectors, rtol=1e-9, atol=1e-11)
        states = first, second
    top = _dense(moved, (x, y))[-1]  # the dense reference, eigvalsh's largest
    assert abs(float(found.lambda_max) - top) <= float(found.lambda_max_residual) + 1e-12


def test_vmapped_over_runs_each_run_is_its_own():
    """A sweep: vmap over three runs' parameters equals three separate updates."""
    tracker = landscape.tracker(mse, num_iters=8, k=2)
    runs = [_params(s) for s in range(3)]
    stacked = jax.tree.map(lambda *a: np.stack(a), *runs)
    keys = jax.random.split(jax.random.key(5), 3)
    states = jax.vmap(tracker.init)(stacked, keys)
    batch = _data(0)
    together, _ = jax.vmap(lambda state, params: tracker.update(state, params, batch))(
        states, stacked
    )
    for r, params in enumerate(runs):
        alone, _ = tracker.update(tracker.init(params, keys[r]), params, batch)
        np.testing.assert_allclose(together.top_k[r], alone.top_k, rtol=1e-10)


def test_each_mistake_is_one_sentence():
    params = _params()
    with pytest.raises(ValueError, match="k = 5: must be fewer than num_iters = 5"):
        landscape.tracker(mse, num_iters=5, k=5)
    with pytest.raises(TypeError, match="loss = 3: must be a function"):
        landscape.tracker(3)
    tracker = landscape.tracker(mse, num_iters=50)
    with pytest.raises(ValueError, match="num_iters = 50 exceeds D = 42"):
        tracker.init(params, jax.random.key(0))
    with pytest.raises(TypeError, match="must be a jax.random.key"):
        landscape.tracker(mse).init(params, 0)
    half = jax.tree.map(lambda a: jnp.asarray(a, jnp.bfloat16), params)
    with pytest.raises(TypeError, match="the parameters are bfloat16.*cast them first"):
        landscape.tracker(mse).init(half, jax.random.key(0))
    with pytest.raises(TypeError, match="like must be the parameters split over a mesh"):
        landscape.tracker(mse, like=params)  # on one device: like=None


def test_a_measurement_at_nan_parameters_restarts_the_next_from_a_fresh_start():
    """One update at NaN parameters measures NaN and keeps no vectors, so the next update at
    finite parameters is a cold start (the same numbers as one from zero vectors with that key),
    not NaN forever after; a state handed in with NaN vectors starts afresh too."""
    tracker = landscape.tracker(mse, num_iters=12, k=2)
    params, batch = _params(), _data(0)
    _, state = tracker.update(tracker.init(params, jax.random.key(6)), params, batch)
    nan = jax.tree.map(lambda a: np.full_like(a, np.nan), params)
    poisoned, state = tracker.update(state, nan, batch)
    assert np.isnan(poisoned.lambda_max) and not np.any(np.asarray(state.vectors))
    after, _ = tracker.update(state, params, batch)
    cold = landscape.TrackerState(np.zeros_like(state.vectors), state.key, state.measured)
    expected, _ = tracker.update(cold, params, batch)
    for a, b in zip(after, expected, strict=True):
        np.testing.assert_array_equal(a, b)
    assert abs(after.lambda_max - _dense(params, batch)[-1]) <= after.lambda_max_residual
    handed = state._replace(vectors=np.full(np.shape(state.vectors), np.nan))
    again, next_state = tracker.update(handed, params, batch)
    np.testing.assert_array_equal(again.top_k, expected.top_k)
    assert np.all(np.isfinite(next_state.vectors))


def test_residuals_below_rounding_are_floored_at_the_rounding_level():
    """float32, num_iters = D: the Krylov space is the whole space and |β s_last| is 0 (or
    1e-9, 1e-20) while ||H y - θ y|| of the kept float32 vectors is about 1e-7; each residual
    is floored at eps num_iters max|θ|, which holds the true one (4.1e-7 here)."""
    scale = np.linspace(0.1, 1.0, 12).astype(np.float32)
    params = {"x": np.ones(12, np.float32)}
    tracker = landscape.tracker(_quadratic, num_iters=12, k=2)
    state = tracker.init(params, jax.random.key(0))
    for _ in range(3):
        m, state = tracker.update(state, params, scale)
        values = np.array([*m.top_k, m.lambda_min], np.float64)
        estimates = np.array([*m.residuals, m.lambda_min_residual], np.float64)
        floor = np.finfo(np.float32).eps * 12 * np.max(np.abs(values))
        np.testing.assert_allclose(estimates, floor, rtol=1e-6)
        vectors = np.asarray(state.vectors, np.float64)
        true = np.linalg.norm(vectors * scale - values[:, None] * vectors, axis=1)
        assert np.all(true <= estimates) and np.all(true > 1e-9)


def test_each_mistake_of_update_is_one_sentence():
    """What the probes refuse with one sentence, update refuses with one too, before anything
    of the user's loss runs on it."""
    tracker = landscape.tracker(mse, num_iters=8)
    params, batch = _params(), _data(0)
    state = tracker.init(params, jax.random.key(0))
    other = landscape.tracker(mse, num_iters=8).init({"w": np.ones((3, 3))}, jax.random.key(0))
    with pytest.raises(ValueError, match=r"state holds vectors of shape \(2, 9\) where params"):
        tracker.update(other, params, batch)  # another model's state
    extra = dict(params, w3=np.ones(3))
    with pytest.raises(ValueError, match="where params have D = 45: give update the state"):
        tracker.update(state, extra, batch)
    with pytest.raises(ValueError, match="state keeps 2 vectors where this tracker keeps k"):
        landscape.tracker(mse, num_iters=8, k=2).update(state, params, batch)
    with pytest.raises(TypeError, match="tracker.update: state is dict"):
        tracker.update(params, state, batch)
    with pytest.raises(TypeError, match="loss returned a tuple of 2: .* one floating-point"):
        landscape.tracker(lambda p, b: (mse(p, b), 0.0), num_iters=8).update(state, params, batch)
    with pytest.raises(TypeError, match=r"loss returned an array of shape \(3,\)"):
        vector = landscape.tracker(lambda p, b: jnp.full(3, mse(p, b)), num_iters=8)
        vector.update(state, params, batch)
    batched = landscape.tracker(mse, num_iters=8, in_batches=True)
    batches = landscape.batches(batch, batch_size=12)
    with pytest.raises(TypeError, match="in_batches=True takes one input.*not 2"):
        batched.update(state, params, batches, batches)
    with pytest.raises(ValueError, match="leading axis of B >= 1 batches"):
        batched.update(state, params, (batch[0][0], batch[1]))
    for which in (tracker, batched):
        with pytest.raises(TypeError, match=r"inputs\[0\] is a streamed dataset .* alone"):
            which.update(state, params, landscape.stream([batch, batch]), batch)


def test_inputs_of_a_third_shape_warn_that_update_compiles_again():
    """From Python, each new batch shape compiles update afresh: the third says so, once (as
    RecompileWarning does for fresh losses); inside the user's jit nothing is noted."""

    def loss(params, batch):  # a loss of its own: the warning comes once per loss
        return mse(params, batch)

    tracker = landscape.tracker(loss, num_iters=6)
    params = _params()
    state = tracker.init(params, jax.random.key(0))
    for n in (48, 48, 40):
        _, state = tracker.update(state, params, _data(0, n))
    with pytest.warns(RecompileWarning, match="3 shapes .* each compiling update"):
        _, state = tracker.update(state, params, _data(0, 32))
    tracker.update(state, params, _data(0, 24))  # once only
    inside = landscape.tracker(lambda p, b: mse(p, b), num_iters=6)
    for n in (48, 40, 32):
        jax.jit(inside.update)(inside.init(params, jax.random.key(0)), params, _data(0, n))
