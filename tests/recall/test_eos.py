"""The edge-of-stability study end to end on the recall model at a tiny size (configs/recall.py:
eos; landscape/recall/eos.py): the tracked λ_max at step 0 against the dense Hessian of the
population loss at the initial weights, the records, and the page's tables read back."""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from configs import recall
from landscape.engine import records
from landscape.recall import eos, experiment
from landscape.recall import model as model_lib
from tools import eos_page


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = recall.get_config("eos")
    cfg.num_seeds = 2
    cfg.train.update(num_steps=60, log_every=10, track_every=10, track_lanczos=20)
    cfg.eos.update(step_sizes=[1.0, 30.0], adam_step_sizes=[0.01])
    path = tmp_path_factory.mktemp("eos") / "recall"
    return cfg, experiment.run(cfg, records.Workdir(path), progress=None), path


def test_the_tracked_sharpness_at_step_0_is_the_dense_hessian_s(tiny):
    """λ_max at step 0 is the top eigenvalue of jax.hessian of the population loss at the run's
    initial weights (D = 20 Lanczos steps: all of them, exact)."""
    cfg, _, path = tiny
    result = records.load(path, cell=0)
    model = model_lib.from_config(cfg)
    for r in range(len(result.seeds)):
        init = jax.tree.map(lambda x, r=r: jnp.asarray(x[r]), result.initial_params)
        flat, unravel = ravel_pytree(init)
        assert flat.size == 20
        loss = lambda v, unravel=unravel: model_lib.population_loss(unravel(v), model)  # noqa: E731
        dense = jax.hessian(loss)(flat)
        top = np.linalg.eigvalsh(np.asarray(dense))[-1]
        np.testing.assert_allclose(result.metrics["lambda_max"][r, 0], top, rtol=1e-8)


def test_the_records_hold_a_row_per_run_and_the_claims(tiny):
    cfg, summary, path = tiny
    with open(path / "eos_runs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["optimizer"], float(r["lr"])) for r in rows] == [
        ("gd", 1.0),
        ("gd", 1.0),
        ("gd", 30.0),
        ("gd", 30.0),
        ("adam", 0.01),
        ("adam", 0.01),
    ]
    assert [float(r["threshold"]) for r in rows[:3]] == [2.0, 2.0, 2 / 30]
    assert float(rows[4]["threshold"]) == pytest.approx(3800.0)
    jumps = {f"phase jump {h}" for h in range(1, 4)}
    assert {k for k in rows[0] if k.startswith("phase ")} == jumps
    # the same initial weights per seed: λ_max(0) / (2/η) grows with η, 30 times from 1 to 30
    for seed in (0, 1):
        ratio = float(rows[2 + seed]["initial_ratio"]) / float(rows[seed]["initial_ratio"])
        assert ratio == pytest.approx(30.0, rel=1e-6)
    assert summary["total"] == 2 * (3 + 3)  # per optimizer: reach, hover, monotone, 3 jumps
    assert (path / "figures" / "edge_of_stability.png").is_file()


def test_the_page_tables_read_the_records(tiny):
    _, summary, path = tiny
    data = eos_page.eos_extract(path.parent)
    assert list(data) == ["recall"]
    assert [c["verdict"] for c in data["recall"]["claims"]] == [
        c["verdict"] for c in summary["claims"]
    ]
    tables = eos_page.eos_tables(json.loads(json.dumps(data)))
    assert (
        "| recall | GD | 30 |" in tables["eos runs"]
        and "| recall | Adam | 0.01 |" in tables["eos runs"]
    )


def test_phases_are_the_jumps_of_the_evaluation_loss():
    """A loss stepping down the plateau levels at steps 20 and 40 has jumps 1, 2 there."""
    cfg = recall.get_config("eos")
    levels = np.asarray(eos.theory.plateau_levels(cfg.task.k, cfg.task.num_responses))
    steps = np.arange(0, 60, 10)
    loss = np.array([levels[0], levels[0], levels[1], levels[1], levels[2], levels[2]])

    class Result:
        snapshot_steps = steps
        snapshots = {"eval_loss": loss[None]}

    out = eos.phases(cfg, Result())  # type: ignore[arg-type]
    assert out["jump 1"].tolist() == [15] and out["jump 2"].tolist() == [35]
    assert out["jump 3"].tolist() == [-1]
