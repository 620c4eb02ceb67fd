"""Parameters at chosen steps and curvature tracked inside the compiled run: against closed-form
Hessians, a separate shorter run, a stopped-and-resumed run and the records read back."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import landscape
from landscape import point as point_lib
from landscape.engine import config as config_lib
from landscape.engine import memory, records, sweeps, training
from landscape.engine import track as track_lib

DIM = 6
RNG = np.random.default_rng(7)
B = RNG.normal(size=(DIM, DIM))
B = jnp.asarray((B + B.T) / 4)  # indefinite: eigenvalues on both sides of 0
A = jnp.asarray(RNG.uniform(0.5, 2.0, DIM))


def cosine_loss(w):
    """L(w) = w^T B w / 2 + sum_i A_i cos w_i: H(w) = B - diag(A cos w), grad = B w - A sin w."""
    return 0.5 * w @ B @ w + jnp.sum(A * jnp.cos(w))


def hessian(w):
    return np.asarray(B) - np.diag(np.asarray(A) * np.cos(w))


def cosine_problem():
    """SGD on L plus a key-dependent linear term (the minibatch noise)."""

    def loss(params, key, hp):
        noise = 0.3 * jax.random.normal(key, (DIM,), jnp.float64)
        return cosine_loss(params["w"]) + noise @ params["w"], {}

    return training.Problem(
        init=lambda key, hp: {"w": jax.random.normal(key, (DIM,), jnp.float64)},
        loss=loss,
        learning_rates=lambda hp: hp["lr"],
    )


def track(**kw):
    kw = dict(
        dict(every=4, num_lanczos=DIM, loss=lambda params, hp: cosine_loss(params["w"])), **kw
    )
    return landscape.Track(**kw)


def optim():
    return training.default_optim_config()


def run(num_steps=24, workdir=None, progress=None, **kw):
    kw = dict(dict(log_every=2, chunk_steps=8, params_every=8, track=track()), **kw)
    hp = {"lr": [0.05, 0.02, 0.1]}
    return training.train(
        cosine_problem(),
        optim(),
        hp,
        [0, 1, 2],
        num_steps=num_steps,
        progress=progress,
        workdir=workdir,
        **kw,
    )


def test_tracked_curvature_is_the_dense_hessians_at_the_kept_parameters():
    """At every tracked step s, lambda_min / lambda_max are the extreme eigenvalues of
    H(w_s) = B - diag(A cos w_s) at the parameters kept for step s (D Lanczos steps: exact),
    track_grad_norm is |B w_s - A sin w_s| and track_loss is L(w_s)."""
    result = run(track=track(every=8))
    np.testing.assert_array_equal(result.tracked_steps, [0, 8, 16, 24])
    np.testing.assert_array_equal(result.params_steps, [0, 8, 16, 24])
    assert result.metrics["lambda_min"].shape == (3, 4)
    for r in range(3):
        for j, step in enumerate(result.tracked_steps):
            w = result.params_at(int(step), r)["w"]
            eigenvalues = np.linalg.eigvalsh(hessian(w))
            assert eigenvalues[0] < 0 < eigenvalues[-1]  # a saddle: both signs are tested
            np.testing.assert_allclose(
                result.metrics["lambda_min"][r, j], eigenvalues[0], rtol=1e-10
            )
            np.testing.assert_allclose(
                result.metrics["lambda_max"][r, j], eigenvalues[-1], rtol=1e-10
            )
            gradient = np.asarray(B) @ w - np.asarray(A) * np.sin(w)
            np.testing.assert_allclose(
                result.metrics["track_grad_norm"][r, j], np.linalg.norm(gradient), rtol=1e-12
            )
            np.testing.assert_allclose(
                result.metrics["track_loss"][r, j], cosine_loss(w), rtol=1e-12
            )
    assert np.ptp(result.metrics["lambda_min"][0]) > 1e-3  # the Hessian moves along training


def test_least_squares_curvature_is_the_spectrum_of_a_transpose_a():
    """A constant Hessian: the least-squares loss |M w - y|^2 / 2 has H = M^T M whatever w, so
    every tracked step gives its smallest and largest eigenvalues (0 for a wide M)."""
    M = jnp.asarray(RNG.normal(size=(4, DIM)))
    tracked = landscape.Track(
        loss=lambda params, hp: 0.5 * jnp.sum((M @ params["w"] - 1.0) ** 2),
        every=2,
        num_lanczos=DIM,
    )
    result = run(num_steps=8, track=tracked, params_every=0)
    eigenvalues = np.linalg.eigvalsh(np.asarray(M.T @ M))
    np.testing.assert_allclose(result.metrics["lambda_max"], eigenvalues[-1], rtol=1e-12)
    np.testing.assert_allclose(result.metrics["lambda_min"], 0.0, atol=1e-12 * eigenvalues[-1])
    assert result.params_steps is None and result.tracked_steps.tolist() == [0, 2, 4, 6, 8]


def test_a_tracked_evaluation_set_in_batches_is_its_mean():
    """The least-squares loss over 8 rows of M in 4 batches: mean over batches of each batch's
    |M_b w - 1|^2 / 2 is |M w - 1|^2 / 8, so H = M^T M / 4 at every tracked step."""
    M = jnp.asarray(RNG.normal(size=(8, DIM)))
    tracked = landscape.Track(
        loss=lambda params, hp, rows: 0.5 * jnp.sum((rows @ params["w"] - 1.0) ** 2),
        every=2,
        num_lanczos=DIM,
        batches=landscape.batches(M, batch_size=2),
    )
    result = run(num_steps=4, track=tracked, params_every=0)
    eigenvalues = np.linalg.eigvalsh(np.asarray(M.T @ M)) / 4
    np.testing.assert_allclose(result.metrics["lambda_max"], eigenvalues[-1], rtol=1e-12)
    np.testing.assert_allclose(result.metrics["lambda_min"], eigenvalues[0], rtol=1e-9)
    with pytest.raises(ValueError, match="same leading axis of B batches"):
        landscape.Track(loss=tracked.loss, every=2, batches=(M, M[:3]))


def test_negative_mass_is_the_start_vectors_quadrature():
    """With D Lanczos steps the Gauss rule of a start vector v is exact: the negative mass is
    sum over negative eigenvalues of (u_i . v)^2 / |v|^2, averaged over the probes, with v drawn
    as the tracker draws it (fold_in(key(seed), step), split per probe, then start / restart)."""
    result = run(num_steps=8, track=track(every=8, probes=3, negative_mass=True, seed=5))
    for r in range(3):
        for j, step in enumerate(result.tracked_steps):
            eigenvalues, vectors = np.linalg.eigh(hessian(result.params_at(int(step), r)["w"]))
            keys = jax.random.split(jax.random.fold_in(jax.random.key(5), int(step)), 3)
            masses = []
            for key in keys:
                v = np.asarray(jax.random.normal(jax.random.split(key)[0], (DIM,), jnp.float64))
                weights = (vectors.T @ v) ** 2 / (v @ v)
                masses.append(weights[eigenvalues < -1e-4 * np.abs(eigenvalues).max()].sum())
            assert 0 < np.mean(masses) < 1
            np.testing.assert_allclose(result.metrics["negative_mass"][r, j], np.mean(masses))


def test_kept_parameters_equal_a_separate_shorter_run_bit_for_bit():
    """The parameters kept at step s are those a run of s steps ends with, bit for bit (the
    constant schedule: the step's arithmetic does not depend on num_steps), for a keeping
    cadence longer than the chunk (one slot, filled at some chunk ends) and shorter (several)."""
    for chunk_steps, params_every in ((4, 8), (8, 4)):
        result = run(chunk_steps=chunk_steps, params_every=params_every, track=None)
        assert result.params_steps.tolist() == list(range(0, 25, params_every))
        for step in (params_every, 16):
            short = run(num_steps=step, params_every=0, track=None)
            np.testing.assert_array_equal(result.params_at(step)["w"], short.final_params["w"])
        np.testing.assert_array_equal(result.params_at(0)["w"], result.initial_params["w"])
        np.testing.assert_array_equal(result.params_at(24)["w"], result.final_params["w"])


def test_tracking_and_keeping_change_no_number_of_the_run():
    """Losses, metrics and final parameters of a tracked run are those of the plain run; runs
    in groups (a lax.map over groups of 2, the last padded) keep and track the same numbers."""
    plain = run(params_every=0, track=None)
    tracked = run()
    np.testing.assert_array_equal(plain.losses, tracked.losses)
    np.testing.assert_array_equal(plain.final_params["w"], tracked.final_params["w"])
    grouped = training.train(
        dataclasses.replace(cosine_problem(), runs_per_group=2),
        optim(),
        {"lr": [0.05, 0.02, 0.1]},
        [0, 1, 2],
        num_steps=24,
        log_every=2,
        chunk_steps=8,
        params_every=8,
        track=track(),
        progress=None,
    )
    np.testing.assert_array_equal(grouped.kept_params["w"], tracked.kept_params["w"])
    for name, value in tracked.metrics.items():
        np.testing.assert_allclose(grouped.metrics[name], value, rtol=1e-12, err_msg=name)


@pytest.mark.slow
def test_stop_and_resume_keeps_parameters_and_curvature_bit_identical(
    tmp_path, stop_at_first_chunk
):
    reference = run()
    workdir = records.Workdir(tmp_path / "run", checkpoint_seconds=0)
    stop_at_first_chunk(lambda progress: run(workdir=workdir, progress=progress))
    opened = records.Workdir.open(tmp_path / "run", resume=True, checkpoint_seconds=0)
    lines = []
    resumed = run(workdir=opened, progress=lines.append)
    assert any(line.startswith("resumed at step 8/24") for line in lines)
    np.testing.assert_array_equal(resumed.params_steps, reference.params_steps)
    np.testing.assert_array_equal(resumed.kept_params["w"], reference.kept_params["w"])
    for name in ("lambda_min", "lambda_max", "track_grad_norm", "track_loss"):
        np.testing.assert_array_equal(resumed.metrics[name], reference.metrics[name], name)
    np.testing.assert_array_equal(resumed.tracked_steps, reference.tracked_steps)


def test_records_load_round_trips_a_sweep(tmp_path):
    """sweeps.run's record read back by records.load: every array, the kept parameters, the
    tracked metrics (also in metrics.jsonl, at the tracked steps only) and a trained point."""
    grid = sweeps.Grid.make({"lr": [0.05, 0.1]}, seeds=[3, 4])
    result = sweeps.run(
        cosine_problem(),
        optim(),
        {"lr": 0.1},
        grid,
        num_steps=16,
        log_every=2,
        params_every=8,
        track=track(every=4),
        dtype=np.float64,
        workdir=tmp_path / "w",
        progress=None,
    )
    loaded = records.load(tmp_path / "w")
    for name in ("losses", "seeds", "snapshot_steps", "params_steps", "tracked_steps"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(result, name), name)
    assert set(loaded.metrics) == set(result.metrics) == set(track().names)
    for name, value in result.metrics.items():
        np.testing.assert_array_equal(loaded.metrics[name], value, name)
    np.testing.assert_array_equal(loaded.hparams["lr"], result.hparams["lr"])
    for which in ("initial", "final"):
        np.testing.assert_array_equal(loaded.params(which)["w"], result.params(which)["w"])
    np.testing.assert_array_equal(
        loaded.params_at(8, {"lr": 0.1, "seed": 4})["w"], result.params_at(8, 3)["w"]
    )
    point = loaded.point({"lr": 0.1, "seed": 4}, lambda p: cosine_loss(p["w"]), step=8)
    assert point.name == "run 3 (lr=0.1, seed 4), step 8" and "prediction" not in point.meta
    assert point.loss() == pytest.approx(float(cosine_loss(result.params_at(8, 3)["w"])))
    rows = [
        json.loads(line)
        for line in (tmp_path / "w" / "metrics.jsonl").read_text().split("\n")
        if line
    ]
    tracked_rows = [row for row in rows if "lambda_min" in row]
    assert sorted({row["step"] for row in tracked_rows}) == [0, 4, 8, 12, 16]
    assert {row["step"] for row in rows} == set(range(0, 17, 2))
    row = next(r for r in tracked_rows if r["step"] == 12 and r["run"] == 1)
    assert row["lambda_min"] == result.metrics["lambda_min"][1, 3]
    train = json.loads((tmp_path / "w" / "config.json").read_text())["train"]
    assert train["params_every"] == 8 and train["track"]["every"] == 4
    assert train["track"]["num_lanczos"] == DIM and "loss" not in train["track"]


def test_params_at_and_point_name_what_was_kept():
    result = run(track=None)
    with pytest.raises(
        ValueError,
        match=r"step = 12: this result kept the parameters at steps "
        r"0, 8, 16, 24 \(train with params_every",
    ):
        result.params_at(12)
    plain = run(params_every=0, track=None)
    np.testing.assert_array_equal(plain.params_at(24)["w"], plain.final_params["w"])
    with pytest.raises(ValueError, match="no steps but the first and last"):
        plain.params_at(8)
    point = result.point(1, lambda p: cosine_loss(p["w"]), step=16)
    assert point.name == "run 1 (lr=0.02, seed 1), step 16"


def test_bad_arguments_get_one_sentence():
    for kw, error, match in (
        (dict(params_every=3), ValueError, "params_every = 3: must be 0 .* multiple of log_every"),
        (dict(params_every=-2), ValueError, "params_every = -2"),
        (dict(params_every=True), TypeError, "params_every = True: must be an integer"),
        (dict(track=track(every=3)), ValueError, "track.every = 3 must be a multiple of log_"),
        (dict(track="lanczos"), TypeError, "track = 'lanczos': must be a landscape.Track"),
        (
            dict(track=track(every=16)),
            ValueError,
            "track.every = 16 exceeds the run's num_steps = 8: only step 0 would be tracked",
        ),
    ):
        with pytest.raises(error, match=match):
            run(num_steps=8, **kw)
    for kw, match in (
        (dict(every=0), "every = 0"),
        (dict(num_lanczos=0), "num_lanczos = 0"),
        (dict(probes=1.5), "probes = 1.5"),
        (dict(negative_below=-1.0), "negative_below = -1: must be a finite number >= 0"),
    ):
        with pytest.raises(ValueError, match=match):
            track(**kw)
    with pytest.raises(TypeError, match="loss = 3: must be a function"):
        landscape.Track(loss=3, every=2)


def test_kept_bytes_are_said_and_refused_when_they_do_not_fit(monkeypatch):
    lines = []
    run(num_steps=8, progress=lines.append, params_every=4, track=None)
    # 3 steps x 3 runs x 6 float64 parameters
    assert "keeping the parameters every 4 steps: 3 steps x 3 runs, 432 B" in lines
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 100.0)
    with pytest.raises(
        config_lib.ConfigError,
        match=r"params_every = 4 keeps the parameters at "
        r"3 steps of 3 runs, 432 B, but 100 B of memory is available",
    ):
        run(num_steps=8, params_every=4, track=None)


def test_point_renamed_and_replaced():
    """A construction's point renamed (a trained point is not the construction): no prediction;
    dataclasses.replace works on points made from an objective."""
    base = point_lib.Point(
        {"w": jnp.zeros(DIM)},
        objective=lambda p, inputs: cosine_loss(p["w"] + inputs),
        inputs=jnp.ones(DIM),
        name="construction",
        meta={"prediction": "saddle (Thm 1)", "expected_loss": 1.0, "k": 2},
    )
    renamed = base.renamed("run 0, step 8")
    assert renamed.name == "run 0, step 8" and dict(renamed.meta) == {"k": 2}
    replaced = dataclasses.replace(base, name="other", inputs=jnp.zeros(DIM))
    assert replaced.name == "other" and replaced.loss() == pytest.approx(float(jnp.sum(A)))
    moved = base.with_params({"w": jnp.ones(DIM)}, name="moved", meta={})
    assert moved.name == "moved" and dict(moved.meta) == {}
    assert base.with_params({"w": jnp.ones(DIM)}).name == "construction"


def test_a_track_every_beyond_the_configs_steps_is_one_sentence():
    cfg = ml_collections.ConfigDict(
        {"train": dict(num_steps=8, log_every=2, **track_lib.default_tracking())}
    )
    cfg.train.track_every = 16
    with pytest.raises(config_lib.ConfigError, match=r"train.track_every = 16: .* at most "):
        track_lib.validate_tracking(cfg)
    cfg.train.track_every = 8
    track_lib.validate_tracking(cfg)


def test_one_loss_rule_across_track_point_and_result_point():
    """Track takes loss(params, hparams) or loss(params) (and with batches loss(params,
    hparams, batch) or loss(params, batch)), told apart by the positional arguments; the same
    results either way. result.point takes either, filling in the run's hyperparameters; Point
    refuses a loss of the wrong form in one sentence naming the argument."""

    def short(p):
        return cosine_loss(p["w"])

    with_hp = run(num_steps=4, track=track(), params_every=0)
    without = run(num_steps=4, track=track(loss=short), params_every=0)
    for name in ("lambda_min", "lambda_max", "track_loss"):
        np.testing.assert_array_equal(with_hp.metrics[name], without.metrics[name])
    M = jnp.asarray(RNG.normal(size=(8, DIM)))
    batched = [
        landscape.Track(loss=f, every=2, num_lanczos=DIM, batches=landscape.batches(M, 2))
        for f in (
            lambda p, hp, rows: jnp.sum((rows @ p["w"]) ** 2),
            lambda p, rows: jnp.sum((rows @ p["w"]) ** 2),
        )
    ]
    first, second = (run(num_steps=2, track=t, params_every=0) for t in batched)
    np.testing.assert_array_equal(first.metrics["lambda_max"], second.metrics["lambda_max"])
    point = with_hp.point(2, lambda p, hp: hp["lr"] * cosine_loss(p["w"]))
    final = with_hp.final_params["w"][2]
    assert point.loss() == pytest.approx(0.1 * float(cosine_loss(final)), rel=1e-12)
    assert with_hp.point(2, short).loss() == pytest.approx(float(cosine_loss(final)), rel=1e-12)
    for bad, match in (
        (dict(loss_fn=lambda p, hp: 0.0), r"loss_fn: .* cannot be called as loss_fn\(params\); "),
        (dict(objective=lambda p: 0.0, inputs=()), r"objective: .* as objective\(params, inp"),
    ):
        with pytest.raises(TypeError, match=match):
            point_lib.Point({"w": jnp.zeros(DIM)}, **bad)
    with pytest.raises(TypeError, match=r"loss: .* as loss\(params, hparams\) or loss\(params\)"):
        landscape.Track(loss=lambda a, b, c, d: 0.0, every=2)


def test_a_tracked_loss_of_the_wrong_output_or_hyperparameter_is_one_sentence():
    """Checked while the chunk is traced, before any step runs."""
    for loss, error, match in (
        (lambda p: p["w"], TypeError, r"track.loss returned an array of shape \(6,\) and dtype"),
        (
            lambda p, hp: hp["beta"] * cosine_loss(p["w"]),
            ValueError,
            r"track.loss reads hparams\['beta'\], which this run does not have \(its "
            r"hyperparameters: lr\)\.",
        ),
    ):
        with pytest.raises(error, match=match):
            run(num_steps=2, chunk_steps=2, params_every=0, track=track(loss=loss, every=2))
