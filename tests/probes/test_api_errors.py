"""The interactive API rejects what it cannot use with one sentence naming the argument, and a
non-finite loss, gradient or Hessian gets the verdict "non-finite" (never a curvature verdict).

Every bad call below fails before any model is compiled, so the file runs in seconds.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape import sweeps, training
from landscape.markov import task as markov_task
from landscape.ngrams import points as ngram_points
from landscape.ngrams import task as ngram_task
from landscape.probes.results import Curvature
from landscape.recall import flow
from landscape.recall import task as recall_task
from landscape.recall.model import RecallModel
from landscape.scan_snap import task as scan_snap_task

QUADRATIC = landscape.Point(
    {"x": jnp.ones(2), "y": jnp.zeros(())},
    lambda p: jnp.sum(p["x"] ** 2) + p["y"] ** 2,
    name="quadratic",
)
NGRAMS = dict(num_states=3, order_n=3, seq_len=8, alpha=1.0, num_sequences=8)
SCAN_SNAP = scan_snap_task.SYN_SMALL
RECALL = RecallModel(k=3, num_responses=3)
VECTOR = {"x": jnp.ones(2)}
BATCH = (jnp.ones((4, 2)), jnp.zeros(4))  # one batch of 4 examples (x, y)
TINY = training.Problem(
    init=lambda key, hp: {"w": jnp.ones(2)},
    loss=lambda params, key, hp: (jnp.sum(params["w"] ** 2), {}),
    learning_rates=lambda hp: hp["lr"],
)
ONE_RUN = training.RunResult(
    hparams={"lr": np.array([0.1])},
    seeds=np.array([0]),
    losses=np.zeros((1, 1)),
    metrics={},
    snapshot_steps=np.array([0, 1]),
    snapshots={},
    final_params={"w": np.ones((1, 2), np.float32)},
    first_nonfinite_step=np.array([-1]),
    compile_seconds=0.0,
    run_seconds=0.0,
    initial_params={"w": np.ones((1, 2), np.float32)},
)


def _sweep(**kw):
    """sweeps.run of TINY with `kw` over the defaults (2 steps, one seed)."""
    options = dict(
        problem=TINY, grid=sweeps.Grid.make({"lr": [0.1]}, [0]), num_steps=2, log_every=1
    )
    options.update(kw)
    return sweeps.run(optim={}, base_hparams={"lr": 0.1}, progress=None, **options)


def _train_with_loss(loss):
    problem = training.Problem(
        init=lambda key, hp: {"w": jnp.ones(2)}, loss=loss, learning_rates=lambda hp: hp["lr"]
    )
    return _sweep(problem=problem)


BAD_CALLS = [
    # the curvature engine and Point helpers: a non-Point, bad options, unknown blocks
    (lambda: landscape.hessian_at(None), TypeError, "hessian_at expects a landscape.Point"),
    (lambda: landscape.gradient_at(3.0), TypeError, "gradient_at expects a landscape.Point"),
    (lambda: landscape.hvp({"x": 1.0}), TypeError, "hvp expects a landscape.Point"),
    (lambda: landscape.lanczos_spectrum("theta"), TypeError, "lanczos_spectrum expects"),
    (lambda: landscape.restrict(None, "x"), TypeError, "restrict expects a landscape.Point"),
    (lambda: landscape.restrict(QUADRATIC, 3), TypeError, "restrict expects a block name"),
    (lambda: landscape.restrict(QUADRATIC, []), ValueError, "restrict got an empty list"),
    (lambda: landscape.restrict(QUADRATIC, ["z"]), KeyError, "no parameter named 'z'"),
    (lambda: landscape.hessian_at(QUADRATIC, method="newton"), ValueError, "method='newton'"),
    (lambda: landscape.hessian_at(QUADRATIC, "lanczos", num_iters=0), ValueError, "num_iters = 0"),
    (
        lambda: landscape.hessian_at(QUADRATIC, "lanczos", num_iters=2.5),
        TypeError,
        "num_iters = 2.5",
    ),
    (lambda: landscape.lanczos_spectrum(QUADRATIC, num_iters="10"), TypeError, "num_iters = '10'"),
    (lambda: landscape.lanczos_spectrum(QUADRATIC, key=0), TypeError, "key = 0"),
    (
        lambda: landscape.hessian_at(QUADRATIC, columns_per_batch=0),
        ValueError,
        "columns_per_batch = 0",
    ),
    (lambda: landscape.hessian_at(QUADRATIC).block("z"), KeyError, "no parameter named 'z'"),
    (lambda: landscape.hessian_at(QUADRATIC).verdict(tol=-1.0), ValueError, "tol = -1"),
    (
        lambda: landscape.gradient_at(landscape.Point({"n": jnp.arange(3)}, jnp.sum)),
        TypeError,
        "gradient_at: parameter 'n' has dtype",
    ),
    (lambda: landscape.Point({"x": 1.0}, loss_fn=None), TypeError, "loss_fn = None"),
    # hvp: a pytree shaped like the params or a flat vector, in the params' dtype
    (lambda: landscape.hvp(QUADRATIC)(jnp.ones(4)), ValueError, "v has shape (4,): must be (3,)"),
    (
        lambda: landscape.hvp(QUADRATIC)({"x": jnp.ones(3), "y": jnp.zeros(())}),
        ValueError,
        "v['x'] has shape (3,): must be (2,)",
    ),
    (
        lambda: landscape.hvp(QUADRATIC)({"x": jnp.ones(2, jnp.float32), "y": jnp.zeros(())}),
        TypeError,
        "v['x'] has dtype float32: must be the parameter's dtype, float64",
    ),
    (lambda: landscape.hvp(QUADRATIC)({"x": jnp.ones(2)}), TypeError, "hvp: v has tree structure"),
    (lambda: landscape.hvp(QUADRATIC)(np.ones(3, np.int64)), TypeError, "v has dtype int64"),
    (
        lambda: landscape.hvp_flat(QUADRATIC)[1](np.ones(3, np.complex64)),
        TypeError,
        "v has dtype complex64: must be real numbers",
    ),
    (
        lambda: landscape.hvp_flat(QUADRATIC)[1](np.ones((3, 2))),
        ValueError,
        r"v has shape (3, 2): must be (3,) or (3, 1)",
    ),
    (lambda: landscape.hvp_flat(None), TypeError, "hvp_flat expects a landscape.Point"),
    (
        lambda: landscape.hvp(QUADRATIC, matrix="ggn", finite_difference=1e-3),
        ValueError,
        "hvp: finite_difference= differences the loss's gradient, and the Gauss-Newton matrix G",
    ),
    (
        lambda: landscape.hvp_flat(QUADRATIC, finite_difference=0.0),
        ValueError,
        "hvp_flat: finite_difference = 0: must be a finite number > 0",
    ),
    # Point: one floating dtype, a scalar loss (checked at the first probe), inputs with objective
    (
        lambda: landscape.Point({"x": jnp.ones(2, jnp.float32), "y": jnp.ones(2)}, jnp.sum),
        TypeError,
        "params mixes floating dtypes (float32: 'x'; float64: 'y')",
    ),
    (
        lambda: landscape.gradient_at(landscape.Point(VECTOR, lambda p: p["x"] ** 2)),
        TypeError,
        "gradient_at: loss_fn returned an array of shape (2,)",
    ),
    (
        lambda: landscape.hessian_at(landscape.Point(VECTOR, lambda p: (jnp.sum(p["x"]), {}))),
        TypeError,
        "hessian_at: loss_fn returned a tuple of 2",
    ),
    (
        lambda: landscape.spectral_density(
            landscape.Point(VECTOR, objective=lambda p, i: p["x"] * i, inputs=jnp.ones(2))
        ),
        TypeError,
        "spectral_density: objective returned an array of shape (2,)",
    ),
    (
        lambda: landscape.Point(VECTOR, lambda p: p["x"] ** 2).loss(),
        TypeError,
        "Point.loss: loss_fn returned an array",
    ),
    (
        lambda: landscape.Point(VECTOR, objective=lambda p, i: jnp.sum(p["x"] * i["w"])),
        TypeError,
        "objective is given without inputs",
    ),
    # the engine: setup, grids, sweeps.run, a Problem's loss, RunResult.point
    (lambda: landscape.setup(host_devices=0), ValueError, "host_devices = 0: must be an integer"),
    (lambda: landscape.setup(host_devices=2.0), TypeError, "host_devices = 2.0"),
    (lambda: landscape.setup(x64="yes"), TypeError, "x64 = 'yes'"),
    (lambda: sweeps.Grid.make({"lr": [0.1]}, seeds=4), TypeError, "seeds = 4: must be a list"),
    (lambda: sweeps.Grid.make({"lr": [0.1]}, seeds=[]), ValueError, "seeds is empty"),
    (lambda: sweeps.Grid.make({"lr": [0.1]}, seeds=[0.5]), TypeError, "seeds = [0.5]"),
    (lambda: sweeps.Grid.make({"lr": []}, seeds=[0]), ValueError, "sweep axis 'lr' is empty"),
    (lambda: sweeps.Grid.make({"lr": ["a"]}, seeds=[0]), TypeError, "sweep axis 'lr' = ['a']"),
    (lambda: sweeps.Grid.make([0.1], seeds=[0]), TypeError, "axes = [0.1]: must be a dict"),
    (lambda: _sweep(num_steps=1e3), TypeError, "num_steps = 1000.0: must be an integer"),
    (lambda: _sweep(num_steps=0), ValueError, "num_steps = 0: must be an integer >= 1"),
    (lambda: _sweep(log_every=0), ValueError, "log_every = 0: must be an integer >= 1"),
    (lambda: _sweep(chunk_steps=0), ValueError, "chunk_steps = 0"),
    (lambda: _sweep(dtype="int32"), TypeError, "dtype = 'int32': must be a floating dtype"),
    (lambda: _sweep(grid={"lr": [0.1]}), TypeError, "grid = {'lr': [0.1]}: must be a sweeps.Grid"),
    (
        lambda: _train_with_loss(lambda params, key, hp: jnp.sum(params["w"])),
        TypeError,
        "problem.loss returned an array of shape ()",
    ),
    (
        lambda: _train_with_loss(lambda params, key, hp: (params["w"], {})),
        TypeError,
        "problem.loss returned (an array of shape (2,)",
    ),
    (lambda: ONE_RUN.point("0", jnp.sum), TypeError, "run = '0': must be a run's index"),
    (lambda: ONE_RUN.point(0, None), TypeError, "loss = None: must be a function"),
    (lambda: ONE_RUN.point(0, jnp.sum, which="last"), ValueError, "which = 'last'"),
    (lambda: ONE_RUN.point(0, jnp.sum, dtype=int), TypeError, "dtype: must be a floating dtype"),
    # Attention with Markov
    (lambda: landscape.markov.theta_pi(None, 0.8), TypeError, "p is missing"),
    (lambda: landscape.markov.theta_pi(0.5), TypeError, "q is missing"),
    (lambda: landscape.markov.theta_pi(np.array([0.5, 0.6]), 0.8), TypeError, "p has shape (2,)"),
    (lambda: landscape.markov.theta_pi("0.5", 0.8), TypeError, "p = '0.5'"),
    (lambda: landscape.markov.theta_pi(0.5, 1.0), ValueError, "q = 1: must be in (0, 1)"),
    (lambda: landscape.markov.theta_pi(0.5, 0.8, tied="no"), TypeError, "tied = 'no'"),
    (lambda: landscape.markov.theta_pi(0.5, 0.8, d=2.5), TypeError, "d = 2.5"),
    (lambda: landscape.markov.theta_pi(0.5, 0.8, seq_len=0), ValueError, "seq_len = 0"),
    (lambda: landscape.markov.theta_pi(0.5, num_states=3.0), TypeError, "num_states = 3.0"),
    (
        lambda: landscape.markov.theta_pi(0.5, 0.8, pos=np.zeros((3, 4))),
        ValueError,
        "pos has shape (3, 4)",
    ),
    (lambda: landscape.markov.theta_star(-0.5, 0.8), ValueError, "p = -0.5"),
    (
        lambda: landscape.markov.theta_star(0.5, 0.8, paper_w_star="yes"),
        TypeError,
        "paper_w_star = 'yes'",
    ),
    (lambda: markov_task.binary_kernel(None, 0.5), TypeError, "p = None"),
    (
        lambda: markov_task.monte_carlo_population(jax.random.key(0), jnp.eye(2), None, 0, 8),
        ValueError,
        "num_sequences = 0",
    ),
    # in-context n-grams
    (lambda: landscape.ngrams.theta_star(4, 1.0, **NGRAMS), ValueError, "k = 4"),
    (lambda: landscape.ngrams.theta_star(2.0, 1.0, **NGRAMS), TypeError, "k = 2.0"),
    (lambda: landscape.ngrams.theta_star(2, None, **NGRAMS), TypeError, "c = None"),
    (lambda: landscape.ngrams.theta_star(2, "big", **NGRAMS), TypeError, "c = 'big'"),
    (lambda: landscape.ngrams.theta_star(2, -1.0, **NGRAMS), ValueError, "c = -1.0"),
    (lambda: landscape.ngrams.unigram_point(**dict(NGRAMS, alpha=None)), TypeError, "alpha = None"),
    (
        lambda: landscape.ngrams.random_point(0, **dict(NGRAMS, alpha=-0.5)),
        ValueError,
        "alpha = -0.5",
    ),
    (lambda: ngram_points.population_set(3, 3, 3, 1.0, 8), ValueError, "seq_len = 3"),
    (
        lambda: ngram_task.sample(jax.random.key(0), 3.0, 3, 8, 1.0, 2),
        TypeError,
        "num_states = 3.0",
    ),
    (lambda: ngram_task.sample(jax.random.key(0), 3, 3, 8, 1.0, 0), ValueError, "batch_size = 0"),
    (lambda: ngram_points.gradient_norms("x"), TypeError, "gradient_norms expects a landscape"),
    (
        lambda: ngram_points.gradient_norms(ngram_points.unigram_point(**NGRAMS), chunk_size=0),
        ValueError,
        "chunk_size = 0: must be an integer >= 1 (sequences per gradient chunk).",
    ),
    (
        lambda: ngram_task.sample_tasks(jax.random.key(0), 3, 3, 1.0, 2, dtype=jnp.int32),
        TypeError,
        "dtype = <class 'jax.numpy.int32'>: must be a floating dtype (np.float32 or np.float64), "
        "the samples' dtype.",
    ),
    # associative recall
    (lambda: flow.init_first_jump(RECALL, 0.0), ValueError, "eps = 0"),
    (lambda: flow.init_first_jump(RECALL, None), TypeError, "eps = None"),
    (lambda: flow.init_first_jump(None, 0.1), TypeError, "init_first_jump expects"),
    (lambda: flow.init_shape(RECALL, 0.1, [1.0, 0.5]), ValueError, "beta_shape has shape (2,)"),
    (lambda: flow.init_later_jump(RECALL, 0.1, 4, 6.0), ValueError, "stage = 4"),
    (lambda: RecallModel(k=3.5, num_responses=3), TypeError, "k = 3.5"),
    (lambda: RecallModel(k=3, num_responses=3, scale=0.0), ValueError, "scale = 0"),
    (
        lambda: recall_task.sample_tokens(jax.random.key(0), 3, 1, 4),
        ValueError,
        "num_responses = 1",
    ),
    # scan and snap
    (
        lambda: landscape.scan_snap.sequence_classes(**dict(SCAN_SNAP, num_last=0)),
        ValueError,
        "num_last = 0",
    ),
    (
        lambda: landscape.scan_snap.sequence_classes(**dict(SCAN_SNAP, seq_len=12.5)),
        TypeError,
        "seq_len = 12.5",
    ),
    (
        lambda: landscape.scan_snap.sequence_classes(
            **dict(SCAN_SNAP, common_unnormalized_prob=-1.0)
        ),
        ValueError,
        "common_unnormalized_prob = -1",
    ),
    (
        lambda: landscape.scan_snap.population_point(None),
        TypeError,
        "population_point expects a SequenceClasses task",
    ),
    # the newest surface: eigenpairs(rtol=), batches, Track(batches=), result.point's loss
    (
        lambda: landscape.eigenpairs(QUADRATIC, k=1, rtol=2.0),
        ValueError,
        "rtol = 2: must be a finite number in (0, 1) (relative Ritz residual; at 1 any",
    ),
    (
        lambda: landscape.Point(VECTOR, objective=lambda p, b: 0.0, batches=[BATCH, BATCH]),
        TypeError,
        "batches is a list of 2 batches: stack them, landscape.batches((x, y), batch_size=256), "
        "or for a Point stream them, landscape.stream(batches).",
    ),
    (
        lambda: landscape.Track(loss=lambda p, b: 0.0, every=2, batches=[BATCH, BATCH]),
        TypeError,
        "batches is a list of 2 batches",
    ),
    (
        lambda: landscape.hessian_at(
            landscape.Point(
                VECTOR,
                objective=lambda p, b: (jnp.sum(p["x"] * b[0]), {}),
                batches=landscape.batches(BATCH, 2),
            )
        ),
        TypeError,
        "hessian_at: objective returned a tuple of 2: a Point's loss must return one floating",
    ),
    (
        lambda: ONE_RUN.point(0, lambda params, hparams, batch: 0.0),
        TypeError,
        "loss: <lambda> cannot be called as loss(params) or loss(params, hparams); give object",
    ),
    (
        lambda: ONE_RUN.point({"lr": 0.3}, lambda p: 0.0),
        KeyError,
        "run = {'lr': 0.3} matches 0 runs, not one (the runs have lr 0.1; seed 0): name one",
    ),
    # a float as the parameter of a 1-D toy landscape; a mixed list; keys; another's loss
    (
        lambda: landscape.Point(0.5, lambda x: (x**2 - 1) ** 2),
        TypeError,
        "params = 0.5 is a Python float, which has no dtype of its own: give an array, e.g. jnp",
    ),
    (
        lambda: landscape.Point({"w": 0.5}, lambda p: p["w"] ** 2),
        TypeError,
        "parameter 'w' = 0.5 is a Python float",
    ),
    (
        lambda: landscape.hessian_at(
            [
                landscape.Point(jnp.ones(2, jnp.float32), jnp.sum),
                landscape.Point(jnp.ones(2, jnp.float64), jnp.sum),
            ]
        ),
        ValueError,
        "hessian_at: the points of a list share one dtype; point 1 (unnamed) is in float64, "
        "point 0 (unnamed) in float32: cast them to one",
    ),
    (
        lambda: landscape.lanczos_spectrum(QUADRATIC, key=jax.random.split(jax.random.key(0))),
        TypeError,
        "key holds 2 keys (shape (2,)) where one goes: give one key, e.g. jax.random.key(0)",
    ),
    (
        lambda: landscape.lanczos_spectrum(QUADRATIC, key=jax.random.split(jax.random.PRNGKey(0))),
        TypeError,
        "key holds 2 keys (shape (2,)) where one goes",
    ),
    (
        lambda: landscape.lanczos_spectrum(QUADRATIC, key=[jax.random.key(0), jax.random.key(1)]),
        TypeError,
        "key is a list of 2 keys where one goes",
    ),
    (
        lambda: _sweep(problem=dataclasses.replace(TINY, learning_rates=lambda hp: hp["eta"])),
        ValueError,
        "problem.learning_rates reads the hyperparameter 'eta', which base_hparams does not "
        "give (it gives ['lr'])",
    ),
    (
        lambda: ONE_RUN.point(0, lambda p: jnp.sum(p["W_Q"] ** 2)),
        ValueError,
        "loss cannot read the parameters of run 0 (w): KeyError: 'W_Q'; give the loss of the "
        "model this run trained.",
    ),
]


def _message(error: BaseException) -> str:
    return error.args[0] if isinstance(error, KeyError) else str(error)


@pytest.mark.parametrize("call, kind, start", BAD_CALLS, ids=[c[2] for c in BAD_CALLS])
def test_bad_call_is_one_sentence_naming_the_argument(call, kind, start):
    with pytest.raises(kind) as info:
        call()
    message = _message(info.value)
    assert start in message, message
    assert "\n" not in message and message.endswith("."), message


def test_type_errors_are_still_value_errors_for_old_callers():
    """Config validation catches ValueError from these checks; a wrong type must still land."""
    with pytest.raises(ValueError):
        landscape.markov.theta_pi(0.5, 0.8, d=2.5)
    with pytest.raises(ValueError):
        ngram_task.validate_task(3.0, 3)


def test_traced_values_are_not_checked():
    """Sweeps vmap over p, q, alpha and eps: a traced value passes the Python-level checks."""
    kernels = jax.jit(jax.vmap(markov_task.binary_kernel))(
        jnp.array([0.2, 0.3]), jnp.array([0.4, 0.5])
    )
    assert kernels.shape == (2, 2, 2)
    beta = jax.jit(jax.vmap(lambda eps: flow.init_first_jump(RECALL, eps)["beta"]))(
        jnp.array([0.1, 0.2])
    )
    np.testing.assert_allclose(beta[:, 0], [0.1, 0.2])
    tasks = jax.jit(jax.vmap(lambda a: ngram_task.sample_tasks(jax.random.key(0), 3, 2, a, 2)))(
        jnp.array([1.0, 2.0])
    )
    assert tasks.shape == (2, 2, 3, 3)


# --------------------------------------------------------------------------------------------------
# Non-finite results
# --------------------------------------------------------------------------------------------------


def _sqrt_point():
    """sqrt(x) at x = -1: NaN loss, gradient and Hessian in block x; y is a finite quadratic."""
    return landscape.Point(
        {"x": jnp.array(-1.0), "y": jnp.ones(2)},
        lambda p: jnp.sqrt(p["x"]) + jnp.sum(p["y"] ** 2),
        name="sqrt at -1",
        meta={"focus_blocks": ["y"]},
    )


def _log_point():
    """x^2 + 0 * log(x) at x = 0: a log(0) makes everything NaN (0 * -inf)."""
    return landscape.Point({"x": jnp.array(0.0)}, lambda p: p["x"] ** 2 + 0.0 * jnp.log(p["x"]))


@pytest.mark.parametrize("make", [_sqrt_point, _log_point])
def test_non_finite_hessian_and_gradient_get_the_non_finite_verdict(make, monkeypatch):
    point = make()
    calls = []
    real_eigh = np.linalg.eigh
    monkeypatch.setattr(
        np.linalg,
        "eigh",
        lambda a, *args, **kwargs: (
            calls.append(np.all(np.isfinite(a))),
            real_eigh(a, *args, **kwargs),
        )[1],
    )
    gradient = landscape.gradient_at(point)
    assert not gradient.finite and gradient.verdict() == "non-finite"
    assert gradient.verdict(tol=1e-3) == "non-finite"
    assert "non-finite" in gradient.describe() and "gradient block x" in gradient.describe()
    H = landscape.hessian_at(point)
    assert not H.finite and H.verdict() == "non-finite"
    text = H.describe()
    assert "non-finite" in text and "Hessian block x" in text
    assert "eigenvalues not computed" in text
    assert "minimum" not in text and "saddle" not in text and "maximum" not in text
    assert np.all(np.isnan(H.eigenvalues))
    with pytest.raises(ValueError, match="^num_negative is undefined"):
        H.num_negative()
    spectrum = landscape.lanczos_spectrum(point)
    assert spectrum.verdict() == "non-finite" and "non-finite" in spectrum.describe()
    assert landscape.hessian_at(point, "lanczos").verdict() == "non-finite"
    assert all(calls), "np.linalg.eigh was called on a matrix with NaN or inf entries"


def test_focus_report_on_a_non_finite_hessian():
    H = landscape.hessian_at(_sqrt_point())
    focus = H.focus_report()
    assert focus.finite  # the y block itself is finite
    np.testing.assert_allclose(focus.eigenvalues, [2.0, 2.0])
    assert np.isnan(focus.outside)  # its rows meet the NaN x column
    assert H.verdict() == "non-finite"


def test_inf_hessian_is_non_finite():
    point = landscape.Point({"x": jnp.array(1.0)}, lambda p: p["x"] ** 2 * jnp.inf)
    H = landscape.hessian_at(point)
    assert np.isinf(H.matrix).all()
    assert H.verdict() == "non-finite" and "Hessian block x: 1 inf" in H.describe()


def test_infinite_parameters_are_flagged_never_judged():
    """tanh saturates at inf: the loss (1) and the gradient (0) are finite there, yet the point
    is no critical point of anything; every judging probe says non-finite and names the leaf."""
    point = landscape.Point(
        {"w": jnp.array([jnp.inf, 0.0]), "b": jnp.zeros(())},
        lambda p: jnp.sum(jnp.tanh(p["w"]) ** 2) + p["b"] ** 2,
    )
    gradient = landscape.gradient_at(point)
    assert gradient.loss == 1.0 and gradient.norm == 0.0  # what fooled the verdict
    for result in (
        gradient,
        landscape.hessian_at(point),
        landscape.hessian_at(point, method="lanczos", num_iters=2),
    ):
        assert not result.finite and result.kind() is Curvature.NON_FINITE
        assert result.verdict() == "non-finite" and result.summary()["finite"] is False
        assert "parameter w: 1 inf" in result.describe()
    assert gradient.nonfinite_params == {"w": "1 inf"}


def test_a_diverged_runs_summary_locates_no_critical_point():
    """A run that diverged (NaN parameters): its row says non-finite, with a NaN distance to a
    critical point (0.0 would say the point is exactly at one)."""
    diverged = dataclasses.replace(
        ONE_RUN,
        final_params={"w": np.full((1, 2), np.nan, np.float32)},
        first_nonfinite_step=np.array([0]),
    )
    row = landscape.hessian_at(diverged.point(0, lambda p: jnp.sum(p["w"] ** 2))).summary()
    assert row["kind"] == "non-finite" and row["stationary"] == "non-finite"
    assert np.isnan(row["critical_distance"]) and not row["finite"]


def test_finite_points_keep_their_verdicts():
    H = landscape.hessian_at(QUADRATIC)  # at x = (1, 1): |g| = 2 sqrt(2), not a critical point
    # the model of a quadratic is exact: near-stationary (notes/landscape_geometry.md §9)
    assert H.finite and H.kind() is Curvature.MINIMUM
    assert H.verdict() == (
        "near-stationary local minimum (positive definite): its critical point 1.4 away"
    )
    assert H.summary()["stationary"] == "near"
    assert H.summary()["critical_distance"] == pytest.approx(2**0.5)
    at_minimum = landscape.hessian_at(
        QUADRATIC.with_params({"x": jnp.zeros(2), "y": jnp.zeros(())})
    )
    assert at_minimum.verdict() == "local minimum (positive definite)"
    gradient = landscape.gradient_at(QUADRATIC)
    assert gradient.finite and gradient.kind(tol=1e-12) is Curvature.NOT_STATIONARY
    assert "not stationary (|g| = 2.828e+00" in gradient.verdict()
    assert "non-finite" not in H.describe() and "non-finite" not in gradient.describe()


def test_scipy_eigsh_on_hvp_flat_as_documented_gives_the_dense_hessians_eigenvalues():
    """The reliability page's snippet: LinearOperator((D, D), matvec) (scipy probes the
    operator's dtype with an int8 vector) and eigsh; the extreme eigenvalues are the dense
    Hessian's, and a (D, 1) vector gives a (D, 1) product."""
    import scipy.sparse.linalg

    rng = np.random.default_rng(0)
    M = jnp.asarray(rng.normal(size=(6, 6)))
    point = landscape.Point(
        {"w": jnp.asarray(rng.normal(size=6))}, lambda p: jnp.sum(jnp.cos(M @ p["w"]))
    )
    x0, matvec = landscape.hvp_flat(point)
    H = scipy.sparse.linalg.LinearOperator((x0.size, x0.size), matvec)
    assert H.dtype == x0.dtype
    dense = np.linalg.eigvalsh(landscape.hessian_at(point).matrix)
    largest = scipy.sparse.linalg.eigsh(H, k=2, which="LA", return_eigenvectors=False)
    smallest = scipy.sparse.linalg.eigsh(H, k=2, which="SA", return_eigenvectors=False)
    np.testing.assert_allclose(np.sort(largest), dense[-2:], rtol=1e-8)
    np.testing.assert_allclose(np.sort(smallest), dense[:2], rtol=1e-8)
    column = np.asarray(x0)[:, None]
    assert matvec(column).shape == (6, 1)
    np.testing.assert_allclose(matvec(column)[:, 0], matvec(np.asarray(x0)), rtol=1e-12)


@pytest.mark.parametrize("paper", landscape.PAPERS)
def test_another_papers_workdir_given_to_trained_point_is_one_sentence(paper, tmp_path):
    """A workdir's config.json says whose run it holds: another paper's trained_point names
    that paper and the function to use, before reading any arrays."""
    import importlib

    module = importlib.import_module(f"landscape.{paper}.experiment")
    landscape.records.Workdir(tmp_path).write_config(module.default_config())
    for other in landscape.PAPERS:
        if other == paper:
            continue
        trained_point = importlib.import_module(f"landscape.{other}").trained_point
        with pytest.raises(landscape.records.WorkdirError) as info:
            trained_point(tmp_path)
        assert str(info.value) == (
            f"workdir {tmp_path} holds a {paper} run: give it to "
            f"landscape.{paper}.trained_point, not landscape.{other}.trained_point."
        )
    sweep = tmp_path / "sweep"
    landscape.records.Workdir(sweep).write_config({"num_steps": 4, "grid": {"lr": [0.1]}})
    with pytest.raises(landscape.records.WorkdirError, match=r"holds no paper's run \("):
        importlib.import_module(f"landscape.{paper}").trained_point(sweep)


def test_a_points_dtype_is_its_floating_leaves_whatever_their_order():
    # an integer leaf (a step counter) may come first; parameters with no leaf are float64's
    def loss(p):
        return jnp.sum(p["w"])

    counted = landscape.Point({"a_step": jnp.int32(3), "w": jnp.ones(2, jnp.float32)}, loss)
    assert counted.dtype == np.float32
    assert landscape.Point({}, lambda p: jnp.float32(0.0)).dtype == np.float64
