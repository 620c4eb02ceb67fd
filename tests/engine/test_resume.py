"""Killed runs resume to the numbers of an uninterrupted run, bit for bit; records never mix."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

import configs.syn_medium
from landscape.engine import records
from landscape.scan_snap import experiment
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _same_records(a: pathlib.Path, b: pathlib.Path) -> None:
    arrays_a, arrays_b = load_npz(a / "arrays.npz"), load_npz(b / "arrays.npz")
    assert sorted(list(arrays_a)) == sorted(list(arrays_b))
    for name in list(arrays_a):
        np.testing.assert_array_equal(arrays_a[name], arrays_b[name], err_msg=name)
    assert (a / "metrics.jsonl").read_text() == (b / "metrics.jsonl").read_text()
    summary_a, summary_b = (json.loads((p / "summary.json").read_text()) for p in (a, b))
    assert summary_a["status"] == summary_b["status"] == "complete"
    assert summary_a["claims"] == summary_b["claims"]


class Crash(Exception):
    pass


@pytest.mark.slow
def test_crash_between_rows_and_checkpoint_resumes_bit_identical(tmp_path):
    """Two programs (K = 2 and K = 6); the run dies in the second one after streaming a chunk's
    rows but before checkpointing it (as a kill would): resume skips the finished program, cuts
    metrics.jsonl back to the checkpoint and continues."""
    cfg = configs.syn_medium.get_config("quick")
    cfg.train.update(num_steps=60, log_every=10, chunk_steps=10)
    experiment.run(
        cfg, records.Workdir(tmp_path / "reference", checkpoint_seconds=0), progress=None
    )

    lines = []

    def dies_in_second_program(line):
        lines.append(line)
        if sum(text.startswith("step") for text in lines) == 6 + 3:  # cell 1, after step 30's rows
            raise Crash

    with pytest.raises(Crash):
        experiment.run(
            cfg,
            records.Workdir(tmp_path / "run", checkpoint_seconds=0),
            progress=dies_in_second_program,
        )
    assert (
        records.latest_checkpoint_metrics_bytes(tmp_path / "run")
        < (tmp_path / "run" / "metrics.jsonl").stat().st_size
    )  # rows past the checkpoint
    resumed = []
    experiment.run(
        cfg,
        records.Workdir.open(tmp_path / "run", resume=True, checkpoint_seconds=0),
        progress=resumed.append,
    )
    assert any(line.startswith("resumed at step 60/60") for line in resumed)  # cell 0: finished
    assert any(line.startswith("resumed at step 20/60") for line in resumed)  # cell 1: from step 20
    _same_records(tmp_path / "run", tmp_path / "reference")


def test_overwrite_starts_over(tmp_path):
    cfg = configs.syn_medium.get_config("quick")
    cfg.train.update(num_steps=20, log_every=10)
    cfg.sweep = {"optim": {"lr_z": [0.5], "lr_y_over_lr_z": [1.0]}}
    cfg.claims = "none"
    experiment.run(cfg, records.Workdir(tmp_path / "a"), progress=None)
    first = (tmp_path / "a" / "metrics.jsonl").read_text()
    with pytest.raises(records.WorkdirError, match="already holds the records"):
        records.Workdir.open(tmp_path / "a")
    experiment.run(cfg, records.Workdir.open(tmp_path / "a", overwrite=True), progress=None)
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == first  # no duplicated rows


def _cli(*args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "experiments.scan_snap", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kwargs,
    )


@pytest.mark.slow
def test_ctrl_c_then_resume_through_the_cli(tmp_path):
    """Its two runs sharded over two host devices, so resuming restores a sharded state."""
    args = [
        "--config=configs/syn_small.py",
        "--config.train.num_steps=1500",
        "--config.train.chunk_steps=100",
        "--host_devices=2",
        "--checkpoint_seconds=0",
    ]
    run = _cli(*args, f"--workdir={tmp_path / 'run'}")
    for line in run.stdout:  # wait for training to be under way
        if line.startswith("step  200/1500"):
            break
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("Interrupted at step ") and "--resume" in last, last
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 200 <= summary["step"] < 1500

    resumed = _cli(f"--workdir={tmp_path / 'run'}", "--resume", "--host_devices=2")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resumed at step {summary['step']}/1500" in out
    reference = _cli(*args, f"--workdir={tmp_path / 'reference'}")
    reference.communicate(timeout=300)
    assert reference.returncode == 0
    _same_records(tmp_path / "run", tmp_path / "reference")
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["provenance"]["backend"] == "cpu" and config["provenance"]["packages"]["jax"]
    assert config["provenance"]["matmul_precision"] == "highest"
