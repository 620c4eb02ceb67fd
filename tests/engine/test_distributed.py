"""One sweep over two processes (jax.distributed, CPU collectives over gloo on 127.0.0.1) gives
one process's numbers: stopped by a SIGTERM to process 1 alone and resumed (as SLURM tasks, found
by `--distributed`), its records (written by process 0 only) equal an uninterrupted one-process
run's bit for bit."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from landscape.engine import records
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port(low: int = 0) -> int:
    """A free port on 127.0.0.1 (from `low` up to 65535 when `low` is given)."""
    for port in [0] if not low else np.random.default_rng().permutation(np.arange(low, 65536)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", int(port)))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def _start(args: list[str], **env: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.scan_snap", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _two_processes(
    workdir: pathlib.Path, *extra: str, slurm: bool = False
) -> list[subprocess.Popen]:
    """Two processes of one run: given --coordinator_address/--num_processes/--process_id, or
    (slurm) --distributed in the environment of two SLURM tasks on this machine (jax's SLURM
    detection puts the coordinator at port 61440 + job id % 4096 of the first node)."""
    if slurm:
        job = _free_port(low=61440) - 61440
        return [
            _start(
                [f"--workdir={workdir}", "--host_devices=1", *extra, "--distributed"],
                SLURM_JOB_ID=str(job),
                SLURM_STEP_NODELIST="127.0.0.1",
                SLURM_NTASKS="2",
                SLURM_PROCID=str(i),
                SLURM_LOCALID=str(i),
            )
            for i in range(2)
        ]
    port = _free_port()
    return [
        _start(
            [
                f"--workdir={workdir}",
                "--host_devices=1",
                *extra,
                f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2",
                f"--process_id={i}",
            ]
        )
        for i in range(2)
    ]


def _rows(workdir: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # ~90 s on 2 cores (5 processes, each compiling Fig. 6's CI grid); the
# default suite keeps the two-process refusal below and the one-process resume tests
def test_two_processes_stop_together_resume_and_give_one_process_numbers(tmp_path):
    run = ["--config=configs/syn_medium.py:quick", "--config.train.chunk_steps=10"]
    two, one = tmp_path / "two", tmp_path / "one"
    pair = _two_processes(two, *run, "--checkpoint_seconds=0")
    reference = _start([*run, "--host_devices=2", f"--workdir={one}"])
    deadline = time.monotonic() + 240
    while not list((two / "checkpoints").glob("cell0/host-*.npz")):  # a first chunk saved
        assert time.monotonic() < deadline and pair[0].poll() is None, pair[0].communicate()[0]
        time.sleep(0.05)
    pair[1].send_signal(signal.SIGTERM)  # process 1 alone: both stop at one boundary
    stopped = [p.communicate(timeout=240)[0] for p in pair]
    assert [p.returncode for p in pair] == [130, 130], stopped
    for output in stopped:  # process 1 too names process 0's workdir to resume from
        assert "Interrupted at step" in output and f"--workdir={two} --resume" in output, output
    assert json.loads((two / "summary.json").read_text())["status"] == "interrupted"

    resumed = _two_processes(two, "--resume", slurm=True)
    outputs = [p.communicate(timeout=240)[0] for p in resumed]
    outputs.append(reference.communicate(timeout=240)[0])
    assert [p.returncode for p in resumed + [reference]] == [0, 0, 0], outputs
    assert "resumed at step" in outputs[0], outputs[0]
    assert "over 2 processes (this is process 1)" in outputs[1]
    assert "read only" not in outputs[1], outputs[1]  # orbax's warning, kept quiet
    assert "claims reproduced" in outputs[0] and "claims reproduced" not in outputs[1]

    a, b = load_npz(one / "arrays.npz"), load_npz(two / "arrays.npz")
    assert sorted(list(a)) == sorted(list(b))
    for name in list(a):
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    assert _rows(two) == _rows(one)  # no row lost or written twice across the stop
    summaries = [json.loads((w / "summary.json").read_text()) for w in (one, two)]
    assert summaries[0]["claims"] == summaries[1]["claims"]


def test_every_process_refuses_a_used_workdir(tmp_path):
    """Process 1 checks the workdir too (one sentence, exit 2), instead of waiting for a
    coordinator that has already refused it."""
    records.Workdir(tmp_path).write_status("interrupted")  # an earlier run's, with its manifest
    pair = _two_processes(tmp_path, "--config=configs/syn_small.py")
    outputs = [p.communicate(timeout=120)[0] for p in pair]
    assert [p.returncode for p in pair] == [2, 2], outputs
    for output in outputs:
        assert output.strip().splitlines()[-1] == (
            f"--workdir={tmp_path} already holds the records of an earlier run: pass --resume "
            "to continue it or --overwrite to start over."
        ), output
        assert "Traceback" not in output
