"""Faults among processes: the report's worker processes end with their parent however it ends
(SIGTERM as `timeout` sends it, kill -9), and the processes of one run over jax.distributed
refuse different configs in one sentence before training."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests.test_distributed import _free_port, _start

ROOT = pathlib.Path(__file__).resolve().parent.parent

POOL = """\
import concurrent.futures, time
from experiments import workers
with workers.pool(2, grace=2) as pool:
    futures = [pool.submit(time.sleep, 600) for _ in range(3)]
    while len(pool._processes) < 2:
        time.sleep(0.05)
    time.sleep(1)  # the workers started and took their first task
    print(*pool._processes, flush=True)
    concurrent.futures.wait(futures)
"""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie that no one has reaped yet counts as ended)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name
)
def test_the_pools_workers_end_with_their_parent(sig):
    parent = subprocess.Popen(
        [sys.executable, "-c", POOL],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids), parent.stderr.read()
        parent.send_signal(sig)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)], f"workers alive after {sig.name}"
    finally:
        parent.kill()
        parent.communicate(timeout=30)


def test_processes_given_different_configs_refuse_before_training(tmp_path):
    """Two processes of one run (jax.distributed over gloo), process 1 given another learning
    rate: both refuse in one sentence (exit 2) before anything is written or trained."""
    port = _free_port()
    common = ["--config=configs/syn_small.py", "--host_devices=1", "--compilation_cache="]
    pair = [
        _start(
            [
                *common,
                *(["--config.optim.lr_z=0.5"] if i == 1 else []),
                f"--workdir={tmp_path / 'run'}",
                f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2",
                f"--process_id={i}",
            ]
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in pair]
    assert [p.returncode for p in pair] == [2, 2], outputs
    for output in outputs:
        assert "Traceback" not in output and "step " not in output, output
        last = output.strip().splitlines()[-1]
        assert last.startswith("process 1 was given another config than process 0 (sha256 ")
        assert last.endswith("in every process."), last
    assert not (tmp_path / "run").exists()
