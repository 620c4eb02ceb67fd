"""A task of one's own on the engine: complete records from sweeps.run, initial parameters and
points from a result, refused optimizer fields, nested and dotted sweep axes, a user's module
through `experiments.run` (override, interruption, --resume), and the tutorial at tiny size."""

import json
import os
import pathlib
import runpy
import sys
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import landscape
from experiments import run as run_cli
from landscape.engine import config as config_lib
from landscape.engine import records, sweeps, training
from tests import own_experiment
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _least_squares(steps=12):
    cfg = own_experiment.default_config()
    cfg.train.num_steps = steps
    return cfg, own_experiment.problem(cfg)


def test_sweeps_run_writes_complete_records(tmp_path):
    cfg, problem = _least_squares()
    grid = sweeps.Grid.make({"optim": {"lr": [0.05, 0.1]}}, seeds=[3, 4])
    result = sweeps.run(
        problem,
        {"name": "sgd", "momentum": 0.5},
        {"optim.lr": 0.1},
        grid,
        num_steps=12,
        log_every=4,
        workdir=tmp_path / "w",
        config={"my_study": 1},
        progress=None,
    )
    w = tmp_path / "w"
    arrays = load_npz(w / "arrays.npz")
    np.testing.assert_array_equal(arrays["losses"], result.losses)
    assert arrays["metric_grad_norm"].shape == (4, 12)
    np.testing.assert_array_equal(arrays["metric_grad_norm"], result.metrics["grad_norm"])
    np.testing.assert_array_equal(arrays["optim_lr"], [0.05, 0.05, 0.1, 0.1])
    np.testing.assert_array_equal(arrays["initial_params"], result.initial_params)
    np.testing.assert_array_equal(arrays["final_params"], result.final_params)
    # the initial parameters are problem.init at the run's key (the engine's derivation), in
    # the run's dtype (float32 by default: this init gives float64 with x64 on)
    for r, seed in enumerate(result.seeds):
        expected = problem.init(training.run_keys(seed)[0], {})
        assert expected.dtype == np.float64 and result.params("initial", r).dtype == np.float32
        np.testing.assert_array_equal(result.params("initial", r), expected.astype(np.float32))
    np.testing.assert_array_equal(result.initial_params[0], result.initial_params[2])  # seed 3
    config = json.loads((w / "config.json").read_text())
    assert config["my_study"] == 1
    assert config["provenance"]["device_count"] == jax.device_count()
    summary = json.loads((w / "summary.json").read_text())
    assert summary["status"] == "complete" and "claims" not in summary and "total" not in summary
    assert summary["run"]["optim"]["momentum"] == 0.5 and summary["run"]["seeds"] == [3, 4]
    assert summary["backend"] == result.backend == jax.default_backend()
    assert summary["program_devices"] == result.program_devices >= 1
    assert not (w / "figures").exists()
    assert len((w / "metrics.jsonl").read_text().splitlines()) == 4 * 4  # 4 runs x steps 0..12


def test_a_run_is_a_point(tmp_path):
    cfg, problem = _least_squares()
    grid = sweeps.Grid.make({"optim.lr": [0.05, 0.1]}, seeds=[0, 1])
    result = sweeps.run(
        problem, cfg.optim, {"optim.lr": 0.1}, grid, num_steps=12, log_every=4, progress=None
    )
    target = jnp.arange(1.0, 5.0)

    def population(w):  # E_x[(x.(w - t))^2] / 2 for x ~ N(0, I)
        return 0.5 * jnp.sum((w - target) ** 2)

    run = result.run_index({"optim.lr": 0.1, "seed": 1})
    assert run == 3
    for which in ("initial", "final"):
        point = result.point({"optim.lr": 0.1, "seed": 1}, population, which=which)
        w = result.params(which, run)
        assert point.loss() == pytest.approx(float(population(w)), rel=1e-6)
        np.testing.assert_allclose(landscape.hessian_at(point).eigenvalues, np.ones(4), rtol=1e-6)
    shared = result.point(run, (lambda w, t: 0.5 * jnp.sum((w - t) ** 2), target))
    assert shared.loss() == pytest.approx(float(population(result.params("final", run))))
    assert shared.loss() < result.point(run, population, which="initial").loss()
    with pytest.raises(KeyError, match="matches 2 runs"):
        result.run_index({"optim.lr": 0.1})


def test_an_ignored_optimizer_field_is_refused():
    cfg, _ = _least_squares()
    problem = training.Problem(
        init=lambda key, hp: jnp.zeros(2),
        loss=lambda w, key, hp: (jnp.sum(w**2), {}),
        learning_rates=lambda hp: hp["lr"],
    )
    optim = training.default_optim_config()
    optim.lr = 0.5
    grid = sweeps.Grid.make({"lr": [0.1, 0.2]}, seeds=[0])
    with pytest.raises(config_lib.ConfigError, match=r"optim.lr = 0.5 would be ignored"):
        sweeps.run(problem, optim, {"lr": 0.1}, grid, num_steps=2, log_every=1, progress=None)
    lines = []
    sweeps.run(
        problem,
        {"name": "adam", "momentum": 0.9},
        {"lr": 0.1},
        grid,
        num_steps=2,
        log_every=1,
        progress=lines.append,
    )
    note = "note: optim.momentum not read by optim.name='adam', optim.schedule='constant'."
    assert lines[0] == note


def test_nested_and_dotted_sweep_axes_are_one_grid():
    nested = sweeps.Grid.make({"optim": {"lr": [0.1, 0.2]}, "init.eps": [1.0]}, seeds=[0, 1])
    dotted = sweeps.Grid.make({"optim.lr": [0.1, 0.2], "init": {"eps": [1.0]}}, seeds=[0, 1])
    config = sweeps.Grid.make(ml_collections.ConfigDict({"optim": {"lr": [0.1, 0.2]}}), [0])
    assert list(nested.axes) == list(dotted.axes) == ["optim.lr", "init.eps"]
    np.testing.assert_array_equal(nested.flat()[0]["optim.lr"], dotted.flat()[0]["optim.lr"])
    assert list(config.axes) == ["optim.lr"]


def test_a_resume_under_other_code_in_the_functions_words(tmp_path, monkeypatch):
    """sweeps.run(resume=True) of a record other code wrote: refused naming other_code=True,
    which continues it; the manifest lists both versions, config.json's provenance both starts."""
    from landscape.engine import integrity

    cfg, problem = _least_squares(4)
    grid = sweeps.Grid.make({}, seeds=[0])
    kwargs = dict(num_steps=4, log_every=2, workdir=tmp_path, progress=None)
    sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, **kwargs)
    ours = integrity.code_sha256()
    monkeypatch.setattr(integrity, "code_sha256", lambda: "e" * 64)
    with pytest.raises(records.WorkdirError, match=r"other code .*pass other_code=True"):
        sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, resume=True, **kwargs)
    sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, resume=True, other_code=True, **kwargs)
    assert json.loads((tmp_path / "manifest.json").read_text())["code"] == [ours, "e" * 64]
    provenance = json.loads((tmp_path / "config.json").read_text())["provenance"]
    assert provenance["code"] == ours and provenance["resumes"][0]["code"] == "e" * 64
    assert provenance["resumes"][0]["other_code"] and "other_code" not in provenance


def test_records_refuse_a_used_folder_in_the_functions_words(tmp_path):
    cfg, problem = _least_squares(4)
    grid = sweeps.Grid.make({}, seeds=[0])
    kwargs = dict(num_steps=4, log_every=2, workdir=tmp_path, progress=None)
    sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, **kwargs)
    with pytest.raises(records.WorkdirError, match="pass resume=True to continue it"):
        sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, **kwargs)
    (tmp_path / "notes.txt").write_text("the user's")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "sketch.png").write_bytes(b"the user's")
    with pytest.raises(records.WorkdirError, match=r"figures/sketch.png.*keep_others=True"):
        sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, overwrite=True, **kwargs)
    sweeps.run(
        problem, cfg.optim, {"optim.lr": 0.1}, grid, overwrite=True, keep_others=True, **kwargs
    )
    assert (tmp_path / "notes.txt").read_text() == "the user's"
    assert (tmp_path / "figures" / "sketch.png").read_bytes() == b"the user's"
    assert "config.json" in records.read_manifest(tmp_path)


CONFIG = """
from tests.own_experiment import default_config

def get_config():
    c = default_config().to_dict()
    c["sweep"] = {"optim.lr": [0.05, 0.1]}   # dotted, in a plain dict
    return c
"""


def _cli(*args):
    return run_cli.main(["experiments/run.py", "tests.own_experiment", *args])


def test_a_user_module_runs_through_the_cli_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "config.py").write_text(CONFIG)
    args = [f"--config={tmp_path / 'config.py'}", "--config.train.num_steps=40"]
    assert _cli(*args, f"--workdir={tmp_path / 'reference'}") == 0

    original = training._progress_line

    def stops(*a, **k):  # as a SIGTERM would: stop at the next chunk boundary
        training.request_stop()
        return original(*a, **k)

    monkeypatch.setattr(training, "_progress_line", stops)
    run = tmp_path / "run"
    assert _cli(*args, f"--workdir={run}", "--checkpoint_seconds=0") == 130
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    monkeypatch.setattr(training, "_progress_line", original)
    assert _cli(f"--workdir={run}", "--resume") == 0
    out = capsys.readouterr()
    assert "python -m experiments.run tests.own_experiment --workdir=" in out.err
    a, b = load_npz(tmp_path / "reference" / "arrays.npz"), load_npz(run / "arrays.npz")
    assert sorted(list(a)) == sorted(list(b)) and "metric_grad_norm" in list(a)
    for name in list(a):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    np.testing.assert_array_equal(a["optim_lr"], [0.05, 0.05, 0.1, 0.1])
    assert a["losses"].shape == (4, 40)
    assert (run / "metrics.jsonl").read_text() == (
        tmp_path / "reference" / "metrics.jsonl"
    ).read_text()
    config = json.loads((run / "config.json").read_text())
    assert config["sweep"] == {"optim": {"lr": [0.05, 0.1]}}
    assert config["train"]["num_steps"] == 40
    assert config["provenance"]["command"].startswith("python -m experiments.run tests.own")


def test_a_module_without_the_contract_gets_one_sentence(capsys, monkeypatch):
    broken = types.ModuleType("broken_study")
    broken.default_config = own_experiment.default_config
    monkeypatch.setitem(sys.modules, "broken_study", broken)
    assert run_cli.main(["run", "broken_study", "--config=x.py"]) == 2
    assert "broken_study is not an experiment module: it has no function validate()" in (
        capsys.readouterr().err
    )
    assert run_cli.main(["run", "no_such_study_module"]) == 2
    assert "no module no_such_study_module" in capsys.readouterr().err


def test_a_user_module_without_config_is_shown_its_own_config_form(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert _cli() == 2
    err = capsys.readouterr().err
    assert "--config is required: a Python file whose get_config() returns the config" in err
    assert "--config=tests/config.py" in err and "syn_small" not in err


def test_a_failing_problem_leaves_its_workdir_failed_not_running(tmp_path):
    def loss(w, key, hp):
        raise ValueError("the user's bug")

    problem = training.Problem(
        init=lambda key, hp: jnp.zeros(2), loss=loss, learning_rates=lambda hp: hp["lr"]
    )
    grid = sweeps.Grid.make({}, seeds=[0])

    def run():
        sweeps.run(problem, {"name": "sgd"}, {"lr": 0.1}, grid, num_steps=4, log_every=2,
                   workdir=tmp_path / "w")  # fmt: skip

    with pytest.raises(ValueError, match="the user's bug"):
        run()
    summary = json.loads((tmp_path / "w" / "summary.json").read_text())
    assert summary == {"status": "failed", "message": "ValueError: the user's bug"}
    # a next run into the folder needs overwrite=True (or resume), as after any run
    with pytest.raises(records.WorkdirError, match="already holds the records"):
        run()


@pytest.mark.slow
def test_the_tutorial_runs_at_tiny_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LANDSCAPE_TUTORIAL_TINY", "1")
    monkeypatch.setenv("LANDSCAPE_TUTORIAL_WORKDIR", str(tmp_path / "own"))
    space = runpy.run_path(str(ROOT / "docs" / "tutorials" / "own_task.py"), run_name="__main__")
    out = capsys.readouterr().out
    result, problem, w = space["result"], space["problem"], tmp_path / "own"
    arrays = load_npz(w / "arrays.npz")
    assert arrays["losses"].shape == (8, space["STEPS"])
    assert arrays["metric_grad_norm"].shape == (8, space["STEPS"])
    assert any(k.startswith("initial_params/") for k in list(arrays))
    for r in (0, 5):  # compiled as the engine compiles it (eagerly: 1-ulp differences), in
        # the run's float32 (with x64 on, Flax's normal() initializer gives float64)
        init = jax.jit(problem.init)(training.run_keys(result.seeds[r])[0], {})
        leaves = jax.tree.leaves(result.params("initial", r))
        for a, b in zip(leaves, jax.tree.leaves(init), strict=True):
            assert a.dtype == np.float32
            np.testing.assert_array_equal(a, np.asarray(b, np.float32))
    assert result.losses[:, -5:].mean() < result.losses[:, :5].mean()  # it learns
    assert (w / "figures" / "loss.png").stat().st_size > 5_000
    summary = json.loads((w / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["runs"] == 8
    assert "provenance" in json.loads((w / "config.json").read_text())
    assert "landscape.setup:" in out and out.count("eigenvalues from") == 2


def test_a_sweep_releases_its_workdir_when_it_stops(tmp_path):
    """sweeps.run into a folder holds its lock while it runs and releases it however it ends,
    so the same process (a notebook keeping the stopped run's traceback) can resume at once."""
    cfg, problem = _least_squares(4)
    grid = sweeps.Grid.make({}, seeds=[0])
    kwargs = dict(num_steps=8, log_every=2, chunk_steps=2, workdir=tmp_path)

    def stop(line):
        assert f"{os.getpid()}" in (tmp_path / records.LOCK).read_text()
        with pytest.raises(records.WorkdirError, match=f"in use by process {os.getpid()}"):
            records.check_path(tmp_path, resume=True)
        training.request_stop()

    try:
        with pytest.raises(training.Interrupted) as stopped:
            sweeps.run(problem, cfg.optim, {"optim.lr": 0.1}, grid, progress=stop, **kwargs)
    finally:
        training.clear_stop()
    assert stopped.value.step == 2  # the traceback (holding the run's frames) is still alive
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == {"status": "interrupted", "step": 2, "resume": "run again with resume=True"}
    lines = []
    sweeps.run(
        problem, cfg.optim, {"optim.lr": 0.1}, grid, resume=True, progress=lines.append, **kwargs
    )
    assert any(line.startswith("resumed at step 2/8") for line in lines), lines
