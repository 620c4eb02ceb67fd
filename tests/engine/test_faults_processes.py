"""Faults among processes: the report's worker processes end with their parent however it ends
(SIGTERM as `timeout` sends it, kill -9), and the processes of one run over jax.distributed
refuse different configs in one sentence before training."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests import children
from tests.engine.test_distributed import _free_port, _start

ROOT = pathlib.Path(__file__).resolve().parents[2]

POOL = """\
import concurrent.futures, signal, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal: a suite run as a
# background job ignores SIGINT, and its children inherit that (no preexec_fn: it can deadlock
# a child forked from a process with threads, as a test worker running jax is)
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


def _pair_flags(port: int, i: int) -> list[str]:
    return [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"]


def test_a_process_that_never_joins_is_named_after_the_stated_wait(tmp_path):
    """Process 0 alone, and (elsewhere) process 1 alone: each says how long it waits, then names
    the process that never joined in one sentence, instead of jax's abort minutes later."""
    common = ["--config=configs/syn_small.py", "--host_devices=1", "--process_timeout=3"]
    started = time.monotonic()
    alone = [
        _start([*common, f"--workdir={tmp_path / str(i)}", *_pair_flags(_free_port(), i)])
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in alone]
    assert time.monotonic() - started < 60
    assert [p.returncode for p in alone] == [1, 1], outputs
    expected = ["process 1 never joined", "process 0 (the coordinator, at 127.0.0.1:"]
    for i, output in enumerate(outputs):
        lines = output.strip().splitlines()
        assert lines[0].startswith("waiting up to 3 s for every process to join at "), lines
        assert lines[-1].startswith(expected[i]), lines
        assert f"within 3 s (this is process {i} of 2)" in lines[-1], lines
        assert "Traceback" not in output and "Check failure" not in output, output
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # 21-43 s, for the CI budget (a process that never joins: the test above)
def test_a_killed_process_ends_the_other_naming_it(tmp_path):
    """Process 1 killed (kill -9) while both train: process 0 ends within seconds, in one
    sentence naming process 1, instead of a C++ stack a minute later; summary.json says so."""
    port = _free_port()
    run = [
        "--config=configs/syn_small.py",
        "--config.train.num_steps=2000000",
        "--config.train.chunk_steps=1000",
        "--host_devices=1",
        "--process_timeout=20",
        f"--workdir={tmp_path / 'run'}",
    ]
    pair = [_start([*run, *_pair_flags(port, i)]) for i in range(2)]
    try:
        seen = []
        while not any(line.startswith("step ") for line in seen):  # training
            line = pair[0].stdout.readline()
            assert line, "".join(seen)
            seen.append(line)
        pair[1].kill()
        killed = time.monotonic()
        rest = pair[0].communicate(timeout=120)[0]
        assert time.monotonic() - killed < 20 + 5
        assert pair[0].returncode == 1, rest
        assert (
            rest.strip()
            .splitlines()[-1]
            .startswith("process 1 stopped answering (killed, crashed or hung: silent for ")
        ), rest
        assert "Traceback" not in rest and "Check failure" not in rest, rest
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["status"] == "stopped: a process was lost", summary
        assert summary["message"].startswith("process 1 stopped answering"), summary
    finally:
        for p in pair:
            p.kill()
            p.communicate(timeout=60)


FORKS = """\
import os, sys, time
from landscape.engine import records
records.lock(sys.argv[1])
child = os.fork()
if child == 0:
    time.sleep(600)  # a worker the run started, e.g. a data loader's
    os._exit(0)
print(child, flush=True)
time.sleep(600)
"""


def test_a_forked_child_never_keeps_the_lock_of_a_killed_run(tmp_path):
    """flock belongs to the open file, which fork() shares: the child closes its copy, so the
    lock ends with the run that took it (kill -9) while the child lives on."""
    from landscape.engine import records

    holder = children.start(FORKS, str(tmp_path))
    child = int(holder.stdout.readline())
    try:
        with pytest.raises(records.WorkdirError, match=f"in use by process {holder.pid}"):
            records.check_free(tmp_path)
        holder.kill()
        holder.wait(timeout=60)  # the child keeps the pipe open: no communicate()
        holder.stdout.close()
        assert _alive(child)
        records.check_free(tmp_path)  # free while the child lives
        records.unlock(tmp_path, records.lock(tmp_path))
    finally:
        os.kill(child, signal.SIGKILL)
