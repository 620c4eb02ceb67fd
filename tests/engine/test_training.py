"""The shared training engine: optimizer semantics, vmapped runs, chunking, non-finite losses."""

import dataclasses
import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from landscape.engine import backend, records, training
from tests.arrays import load_npz


def quadratic_problem(dim=3):
    """loss = 0.5 |A w - b|^2; parameter groups 'u' and 'v'; the batch is a key-dependent b."""
    A = jnp.asarray(np.random.default_rng(0).normal(size=(dim, 2 * dim)))

    def loss(params, key, hp):
        b = jax.random.normal(key, (dim,), A.dtype)
        w = jnp.concatenate([params["u"], params["v"]])
        return 0.5 * jnp.sum((A @ w - b) ** 2), {"w_norm": jnp.linalg.norm(w)}

    return training.Problem(
        init=lambda key, hp: {
            "u": jax.random.normal(key, (dim,), jnp.float64),
            "v": jnp.ones((dim,), jnp.float64),
        },
        loss=loss,
        learning_rates=lambda hp: {"u": hp["lr"], "v": hp["lr"] * hp["ratio"]},
        snapshot=lambda params, hp: {"u": params["u"], "u0": params["u"][0]},
    ), A


def optim(**kw):
    cfg = training.default_optim_config()
    cfg.update(kw)
    return cfg


def reference_run(problem, make_tx, lr_u, lr_v, seed, num_steps):
    """The same run written out step by step with a plain optax optimizer per group."""
    init_key, key = jax.random.split(jax.random.key(seed))
    params = problem.init(init_key, None)
    txs = {"u": make_tx(lr_u), "v": make_tx(lr_v)}
    states = {k: txs[k].init(params[k]) for k in params}
    losses = []
    for _ in range(num_steps):
        key, batch_key = jax.random.split(key)
        (loss, _), grads = jax.value_and_grad(problem.loss, has_aux=True)(params, batch_key, None)
        losses.append(float(loss))
        for k in params:
            updates, states[k] = txs[k].update(grads[k], states[k], params[k])
            params[k] = optax.apply_updates(params[k], updates)
    return np.asarray(losses), params


@pytest.mark.parametrize(
    "name, make_tx, cfg",
    [
        ("sgd", lambda lr: optax.sgd(lr), optim(name="sgd")),
        ("momentum", lambda lr: optax.sgd(lr, momentum=0.9), optim(name="sgd", momentum=0.9)),
        (
            "nesterov",
            lambda lr: optax.sgd(lr, momentum=0.9, nesterov=True),
            optim(name="sgd", momentum=0.9, nesterov=True),
        ),
        ("adam", lambda lr: optax.adam(lr), optim(name="adam")),
        (
            "adamw",
            lambda lr: optax.adamw(lr, weight_decay=0.1),
            optim(name="adamw", weight_decay=0.1),
        ),
    ],
)
def test_optimizers_match_optax_per_group(name, make_tx, cfg):
    problem, _ = quadratic_problem()
    result = training.train(
        problem, cfg, {"lr": [0.01], "ratio": [3.0]}, [5], num_steps=12, log_every=3, progress=None
    )
    losses, params = reference_run(problem, make_tx, 0.01, 0.03, 5, 12)
    np.testing.assert_allclose(result.losses[0], losses, rtol=1e-12)
    for k in params:
        np.testing.assert_allclose(result.final_params[k][0], params[k], rtol=1e-12)


def test_sgd_momentum_is_pytorch_heavy_ball():
    """PyTorch: v <- mu v + g; p <- p - lr v (first step v = g), with L2 weight decay in g."""
    problem, _ = quadratic_problem()
    lr, mu, wd = 0.02, 0.9, 0.01
    result = training.train(
        problem,
        optim(name="sgd", momentum=mu, weight_decay=wd),
        {"lr": [lr], "ratio": [1.0]},
        [1],
        num_steps=5,
        log_every=5,
        progress=None,
    )
    init_key, key = jax.random.split(jax.random.key(1))
    p = problem.init(init_key, None)
    v = jax.tree.map(jnp.zeros_like, p)
    for _ in range(5):
        key, batch_key = jax.random.split(key)
        g = jax.grad(lambda q, k: problem.loss(q, k, None)[0])(p, batch_key)
        g = jax.tree.map(lambda gi, pi: gi + wd * pi, g, p)
        v = jax.tree.map(lambda vi, gi: mu * vi + gi, v, g)
        p = jax.tree.map(lambda pi, vi: pi - lr * vi, p, v)
    np.testing.assert_allclose(result.final_params["u"][0], p["u"], rtol=1e-12)


def test_warmup_cosine_schedule_multiplier():
    cfg = optim(schedule="warmup_cosine", warmup_steps=10, final_lr_fraction=0.1)
    s = training.schedule(cfg, 110)
    assert float(s(0)) == 0.0
    assert float(s(5)) == pytest.approx(0.5)
    assert float(s(10)) == pytest.approx(1.0)
    assert float(s(60)) == pytest.approx(0.55)  # half-way down the cosine: (1 + 0.1) / 2
    assert float(s(110)) == pytest.approx(0.1)


def test_vmapped_runs_equal_single_runs_and_chunking_does_not_matter():
    problem, _ = quadratic_problem()
    hp = {"lr": [0.01, 0.02, 0.05], "ratio": [1.0, 2.0, 0.5]}
    together = training.train(
        problem,
        optim(momentum=0.9),
        hp,
        [0, 1, 2],
        num_steps=20,
        log_every=2,
        chunk_steps=4,
        progress=None,
    )
    for r in range(3):
        alone = training.train(
            problem,
            optim(momentum=0.9),
            {k: [v[r]] for k, v in hp.items()},
            [r],
            num_steps=20,
            log_every=2,
            chunk_steps=20,
            progress=None,
        )
        np.testing.assert_allclose(together.losses[r], alone.losses[0], rtol=1e-12)
        np.testing.assert_allclose(together.snapshots["u"][r], alone.snapshots["u"][0], rtol=1e-12)
    assert together.snapshots["u"].shape == (3, 11, 3)
    np.testing.assert_array_equal(together.snapshot_steps, np.arange(0, 21, 2))
    assert together.metrics["w_norm"].shape == (3, 20)


def test_groups_of_runs_equal_all_runs_vmapped():
    """runs_per_group = 2 over 3 runs (a padded last group): the same results as one vmap."""
    problem, _ = quadratic_problem()
    hp = {"lr": [0.01, 0.02, 0.05], "ratio": [1.0, 2.0, 0.5]}

    def run(p):
        return training.train(
            p,
            optim(momentum=0.9),
            hp,
            [0, 1, 2],
            num_steps=8,
            log_every=2,
            chunk_steps=4,
            progress=None,
        )

    together, grouped = run(problem), run(dataclasses.replace(problem, runs_per_group=2))
    np.testing.assert_allclose(grouped.losses, together.losses, rtol=1e-12)
    np.testing.assert_allclose(grouped.snapshots["u"], together.snapshots["u"], rtol=1e-12)
    chex.assert_trees_all_close(grouped.final_params, together.final_params, rtol=1e-12)


def test_plain_groups_of_equal_size_equal_all_runs_vmapped():
    """Off the CPU a group holds what fits (here 4 runs of run_bytes in the memory given) and 5
    runs go in 2 groups of 3 (one padded run, not 3): the numbers of one vmap."""
    problem, _ = quadratic_problem()
    hp = {"lr": [0.01, 0.02, 0.05, 0.03, 0.04], "ratio": [1.0, 2.0, 0.5, 1.0, 3.0]}
    sized = dataclasses.replace(problem, run_bytes=1e6)
    memory = 4e6 / backend.USABLE

    def run(p):
        return training.train(p, optim(momentum=0.9), hp, range(5), num_steps=6, log_every=2)

    together = run(problem)
    with backend.tuning("plain", device_bytes=memory):
        assert backend.runs_per_group(None, sized.run_bytes) == 4
        grouped = run(sized)
        spec = training.step_spec(sized, optim(), num_steps=6, log_every=2)
        placed = training._place_runs(sized, hp, np.arange(5), None, None, None)
        state = jax.eval_shape(
            jax.vmap(functools.partial(training.init_state, spec)), placed.seeds_dev, placed.hparams
        )
        jaxpr = str(training._chunk_program(spec, placed).trace(state, 0, placed.hparams).jaxpr)
    # 2 groups of 3 runs of 3 parameters (unbalanced: groups of 4, f64[4,3])
    assert "length=2" in jaxpr and "f64[3,3]" in jaxpr and "f64[4,3]" not in jaxpr
    np.testing.assert_allclose(grouped.losses, together.losses, rtol=1e-12)
    chex.assert_trees_all_close(grouped.final_params, together.final_params, rtol=1e-12)


def test_same_seed_same_numbers_and_common_random_numbers_across_grid():
    problem, _ = quadratic_problem()
    hp = {"lr": [0.01, 0.03], "ratio": [1.0, 1.0]}

    def run():
        return training.train(problem, optim(), hp, [7, 7], num_steps=6, log_every=2, progress=None)

    a, b = run(), run()
    np.testing.assert_array_equal(a.losses, b.losses)
    assert a.losses[0, 0] == a.losses[1, 0]  # same seed: same init and first batch at any lr
    assert a.losses[0, -1] != a.losses[1, -1]


def test_nonfinite_loss_stops_names_the_step_and_keeps_records(tmp_path):
    problem, _ = quadratic_problem()
    workdir = records.Workdir(tmp_path)
    hp = {"lr": [0.01, 50.0], "ratio": [1.0, 1.0]}  # lr 50 diverges
    with pytest.raises(training.NonFiniteLossError, match=r"non-finite at step \d+ in run 1"):
        training.train(
            problem,
            optim(),
            hp,
            [0, 1],
            num_steps=400,
            log_every=10,
            chunk_steps=10,
            progress=None,
            workdir=workdir,
        )
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and rows[-1]["step"] >= 10
    assert {r["run"] for r in rows} == {0, 1} and rows[-1]["lr"] in (0.01, 50.0)
    saved = load_npz(tmp_path / "arrays.npz")
    assert saved["losses"].shape[0] == 2 and not np.isfinite(saved["losses"][1]).all()


def test_nonfinite_mark_mode_reports_first_bad_step():
    problem, _ = quadratic_problem()
    result = training.train(
        problem,
        optim(),
        {"lr": [0.01, 50.0], "ratio": [1.0, 1.0]},
        [0, 1],
        num_steps=400,
        log_every=10,
        progress=None,
        on_nonfinite="mark",
    )
    assert result.first_nonfinite_step[0] == -1
    bad = result.first_nonfinite_step[1]
    assert bad > 0 and np.isfinite(result.losses[1, :bad]).all()
    assert not np.isfinite(result.losses[1, bad])


def test_bad_arguments_are_named():
    problem, _ = quadratic_problem()
    with pytest.raises(ValueError, match="multiple of log_every"):
        training.train(
            problem,
            optim(),
            {"lr": [0.1], "ratio": [1.0]},
            [0],
            num_steps=10,
            log_every=3,
            progress=None,
        )


def test_weight_decay_mask_and_initial_lr_fraction():
    """Decay applies only where the mask says (AdamW on Linear weights only, GPT-2 style)."""
    problem, _ = quadratic_problem()
    masked = training.Problem(
        init=problem.init,
        loss=lambda p, k, hp: (0.0 * sum(jnp.sum(x) for x in jax.tree.leaves(p)), {}),
        learning_rates=problem.learning_rates,
        weight_decay_mask=lambda p: {"u": True, "v": False},
    )
    cfg = optim(name="adamw", weight_decay=0.5)
    result = training.train(
        masked, cfg, {"lr": [0.1], "ratio": [1.0]}, [0], num_steps=4, log_every=4, progress=None
    )
    init = masked.init(jax.random.split(jax.random.key(0))[0], None)
    np.testing.assert_allclose(result.final_params["v"][0], init["v"], rtol=1e-12)  # no decay
    np.testing.assert_allclose(result.final_params["u"][0], init["u"] * (1 - 0.05) ** 4, rtol=1e-9)
    s = training.schedule(
        optim(
            schedule="warmup_cosine",
            warmup_steps=10,
            initial_lr_fraction=0.01,
            final_lr_fraction=0.2,
        ),
        110,
    )
    assert float(s(0)) == pytest.approx(0.01) and float(s(110)) == pytest.approx(0.2)


def test_log_grad_norm_records_the_minibatch_gradient_norm():
    problem, A = quadratic_problem()
    problem = training.Problem(
        problem.init, problem.loss, problem.learning_rates, problem.snapshot, log_grad_norm=True
    )
    result = training.train(
        problem,
        optim(),
        {"lr": [0.01], "ratio": [1.0]},
        [4],
        num_steps=3,
        log_every=1,
        progress=None,
    )
    _, ref_params = reference_run(problem, lambda lr: optax.sgd(lr), 0.01, 0.01, 4, 2)
    # step 2's gradient, recomputed by hand from the reference parameters and step 2's batch
    init_key, key = jax.random.split(jax.random.key(4))
    for _ in range(3):
        key, batch_key = jax.random.split(key)
    b = jax.random.normal(batch_key, (3,), A.dtype)
    w = jnp.concatenate([ref_params["u"], ref_params["v"]])
    expected = float(jnp.linalg.norm(A.T @ (A @ w - b)))
    np.testing.assert_allclose(result.metrics["grad_norm"][0, 2], expected, rtol=1e-10)


def test_clip_norm_clips_the_global_gradient_before_the_group_learning_rates():
    """PyTorch: clip_grad_norm_(all parameters, c) then p <- p - lr_group g: one norm over both
    groups, then each group at its own lr."""
    problem, A = quadratic_problem()
    clip, lrs = 0.5, {"u": 0.1, "v": 0.3}
    result = training.train(
        problem,
        optim(clip_norm=clip),
        {"lr": [0.1], "ratio": [3.0]},
        [2],
        num_steps=4,
        log_every=1,
        progress=None,
    )
    init_key, key = jax.random.split(jax.random.key(2))
    params = problem.init(init_key, None)
    clipped = 0
    for _ in range(4):
        key, batch_key = jax.random.split(key)
        grads = jax.grad(lambda p, k: problem.loss(p, k, None)[0])(params, batch_key)
        norm = float(optax.tree.norm(grads))
        clipped += norm > clip
        params = {k: params[k] - lrs[k] * grads[k] * min(1.0, clip / norm) for k in params}
    assert clipped >= 3  # the clip acts in this test
    for k in params:
        np.testing.assert_allclose(result.final_params[k][0], params[k], rtol=1e-12)


def test_a_loss_that_takes_the_step_sees_the_global_step():
    """Problem.loss_takes_step: the 4th argument is the step (0, 1, ...), across chunks."""

    def loss(params, key, hp, step):
        return jnp.sum(params["w"]) * 0 + step.astype(jnp.float64), {}

    problem = training.Problem(
        init=lambda key, hp: {"w": jnp.zeros(2)},
        loss=loss,
        learning_rates=lambda hp: {"w": hp["lr"]},
        loss_takes_step=True,
    )
    result = training.train(
        problem,
        optim(),
        {"lr": [0.1, 0.2]},
        [0, 1],
        num_steps=12,
        log_every=2,
        chunk_steps=4,
        progress=None,
    )
    np.testing.assert_array_equal(result.losses, np.tile(np.arange(12.0), (2, 1)))


def _numpy_ema(trajectory, decay):
    """Debiased EMA of a parameter trajectory (rows: the parameters after steps 1, 2, ...),
    written out: m_t = decay m_{t-1} + (1 - decay) p_t, m_0 = 0, reported as m_t / (1 - decay^t)."""
    m, out = np.zeros_like(trajectory[0]), []
    for t, p in enumerate(trajectory, start=1):
        m = decay * m + (1 - decay) * p
        out.append(m / (1 - decay**t))
    return np.asarray(out)


def test_snapshots_at_averaged_parameters_equal_an_ema_computed_outside():
    """metrics_at = "both": the current parameters' snapshot (prefixed current_) is the trajectory;
    the snapshot under the plain names is at the debiased EMA of it, taken inside the compiled
    step. At step 0 (no update yet) both are the initial parameters."""
    problem, _ = quadratic_problem()
    hp = {"lr": [0.05, 0.02], "ratio": [1.0, 3.0]}
    decay = 0.9
    both = training.train(
        problem,
        optim(momentum=0.5),
        hp,
        [0, 1],
        num_steps=12,
        log_every=1,
        chunk_steps=4,
        progress=None,
        metrics_at="both",
        ema_decay=decay,
    )
    current = training.train(
        problem, optim(momentum=0.5), hp, [0, 1], num_steps=12, log_every=1, progress=None
    )
    np.testing.assert_array_equal(both.snapshots["current_u"], current.snapshots["u"])
    np.testing.assert_array_equal(both.losses, current.losses)  # the average never trains
    for r in range(2):
        trajectory = current.snapshots["u"][r]  # (13, 3): steps 0..12
        expected = _numpy_ema(trajectory[1:], decay)
        np.testing.assert_allclose(both.snapshots["u"][r, 1:], expected, rtol=1e-12)
        np.testing.assert_array_equal(both.snapshots["u"][r, 0], trajectory[0])
        np.testing.assert_allclose(both.snapshots["u0"][r, 1:], expected[:, 0], rtol=1e-12)
    # the average lags the trajectory (a real average, not a copy)
    assert np.abs(both.snapshots["u"] - current.snapshots["u"])[:, 2:].min() > 0
    ema_only = training.train(
        problem,
        optim(momentum=0.5),
        hp,
        [0, 1],
        num_steps=12,
        log_every=3,
        progress=None,
        metrics_at="ema",
        ema_decay=decay,
    )
    assert set(ema_only.snapshots) == {"u", "u0"}
    np.testing.assert_allclose(ema_only.snapshots["u"], both.snapshots["u"][:, ::3], rtol=1e-12)


def test_averaged_snapshots_resume_bit_identical(tmp_path, stop_at_first_chunk):
    """The EMA is part of the checkpointed state: a run stopped after a chunk and resumed gives
    the uninterrupted run's snapshots."""
    problem, _ = quadratic_problem()
    hp = {"lr": [0.05], "ratio": [1.0]}
    kw = dict(num_steps=12, log_every=2, chunk_steps=4, metrics_at="both", ema_decay=0.8)
    reference = training.train(problem, optim(), hp, [3], progress=None, **kw)
    workdir = records.Workdir(tmp_path / "run", checkpoint_seconds=0)
    stop_at_first_chunk(
        lambda progress: training.train(
            problem, optim(), hp, [3], progress=progress, workdir=workdir, **kw
        )
    )
    resumed = training.train(
        problem,
        optim(),
        hp,
        [3],
        progress=None,
        workdir=records.Workdir.open(tmp_path / "run", resume=True, checkpoint_seconds=0),
        **kw,
    )
    for name in reference.snapshots:
        np.testing.assert_array_equal(resumed.snapshots[name], reference.snapshots[name], name)


def test_metrics_at_and_ema_decay_are_checked():
    problem, _ = quadratic_problem()
    for kw, match in (
        (dict(metrics_at="average"), "metrics_at"),
        (dict(ema_decay=1.0), "ema_decay"),
    ):
        with pytest.raises(ValueError, match=match):
            training.train(
                problem,
                optim(),
                {"lr": [0.1], "ratio": [1.0]},
                [0],
                num_steps=2,
                log_every=1,
                progress=None,
                **kw,
            )


# ----------------------------------------------------------------------------- the step alone


def fixed_quadratic(A, b):
    """loss = 0.5 |A w - b|^2 with w = (u, v), the same batch at every key."""

    def loss(params, key, hp):
        w = jnp.concatenate([params["u"], params["v"]])
        return 0.5 * jnp.sum((A @ w - b) ** 2), {}

    return training.Problem(
        init=lambda key, hp: {"u": jnp.ones(2, jnp.float64), "v": -jnp.ones(2, jnp.float64)},
        loss=loss,
        learning_rates=lambda hp: {"u": hp["lr"], "v": hp["lr"] * hp["ratio"]},
    )


def test_one_sgd_step_is_the_hand_computed_update():
    A = jnp.asarray([[1.0, 2.0, 0.0, -1.0], [0.5, 0.0, 3.0, 1.0]])
    b = jnp.asarray([1.0, -2.0])
    problem = fixed_quadratic(A, b)
    spec = training.step_spec(problem, optim(name="sgd", momentum=0.9), num_steps=10)
    hp = {"lr": jnp.float64(0.1), "ratio": jnp.float64(2.0)}
    state = training.init_state(spec, jnp.uint32(3), hp)
    w0 = np.asarray([1.0, 1.0, -1.0, -1.0])
    residual = np.asarray(A) @ w0 - np.asarray(b)  # (3, -1.5): loss 0.5 (9 + 2.25)
    g0 = np.asarray(A).T @ residual
    lrs = np.asarray([0.1, 0.1, 0.2, 0.2])
    state, (loss, _) = training.train_step(spec, state, jnp.int32(0), hp)
    np.testing.assert_allclose(float(loss), 5.625, rtol=1e-12)
    w1 = w0 - lrs * g0
    np.testing.assert_allclose(np.concatenate([state.params["u"], state.params["v"]]), w1)
    # heavy ball, PyTorch semantics: v <- 0.9 v + g; w <- w - lr v
    state, _ = training.train_step(spec, state, jnp.int32(1), hp)
    g1 = np.asarray(A).T @ (np.asarray(A) @ w1 - np.asarray(b))
    w2 = w1 - lrs * (0.9 * g0 + g1)
    np.testing.assert_allclose(np.concatenate([state.params["u"], state.params["v"]]), w2)


@pytest.mark.parametrize(
    "schedule, rtol",
    [
        ("constant", 1e-12),
        # the multiplier is float32: its cosine rounds differently compiled inside the scan;
        # a chunk that numbered its steps wrongly would be off by tens of percent
        ("warmup_cosine", 1e-6),
    ],
)
def test_a_chunk_is_its_steps_one_by_one(schedule, rtol):
    problem, _ = quadratic_problem()
    cfg = optim(name="sgd", momentum=0.9, schedule=schedule, warmup_steps=3)
    spec = training.step_spec(problem, cfg, num_steps=8, log_every=2, chunk_steps=8)
    assert spec.snapshots_per_chunk == 4
    hp = {"lr": jnp.float64(0.05), "ratio": jnp.float64(0.5)}
    start = training.init_state(spec, jnp.uint32(1), hp)
    chunked, losses, _, snaps, _, _ = training.train_chunk(spec, start, jnp.int32(0), hp)
    step_once = jax.jit(functools.partial(training.train_step, spec))
    state, single = start, []
    for step in range(8):
        state, (loss, _) = step_once(state, jnp.int32(step), hp)
        single.append(float(loss))
        if step % 2 == 1:  # a snapshot after every log_every steps
            np.testing.assert_allclose(snaps["u"][step // 2], state.params["u"], rtol=rtol)
    np.testing.assert_allclose(losses, single, rtol=rtol)
    chex.assert_trees_all_close(chunked.params, state.params, rtol=rtol)
    np.testing.assert_array_equal(jax.random.key_data(chunked.key), jax.random.key_data(state.key))
