"""One sweep over two processes (jax.distributed, CPU collectives over gloo on 127.0.0.1) gives
one process's numbers, and only process 0 writes records."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow     # ~50 s: three CLI processes; kept out of CI's 20-minute budget
def test_two_processes_give_one_process_numbers(tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "experiments.scan_snap",
               "--config=configs/syn_medium.py:quick", "--host_devices=1",
               f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
               f"--workdir={tmp_path / 'two'}"]
    runs = [command + [f"--process_id={i}"] for i in range(2)]
    runs.append(command[:4] + ["--host_devices=2", f"--workdir={tmp_path / 'one'}"])
    processes = [subprocess.Popen(run, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for run in runs]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0], outputs
    assert "over 2 processes (this is process 1)" in outputs[1]
    assert "claims reproduced" in outputs[0] and "claims reproduced" not in outputs[1]
    assert not (tmp_path / "two" / "checkpoints").exists()    # none yet over several processes
    one, two = np.load(tmp_path / "one" / "arrays.npz"), np.load(tmp_path / "two" / "arrays.npz")
    assert sorted(one.files) == sorted(two.files)
    for name in one.files:
        np.testing.assert_array_equal(two[name], one[name], err_msg=name)
    summaries = [json.loads((tmp_path / w / "summary.json").read_text()) for w in ("one", "two")]
    assert summaries[0]["claims"] == summaries[1]["claims"]
