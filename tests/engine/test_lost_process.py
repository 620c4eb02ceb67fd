"""A process lost in a jax.distributed run is named: the survivor's collective error becomes one
sentence (ProcessLost) naming the lost process and its host, and the survivor exits with the
CLIs' status for a failed run instead of aborting in jax's shutdown barrier."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from landscape.engine import distributed
from tests.engine.test_distributed import _free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]

GLOO_CLOSED = (
    "UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:547] "
    "Connection closed by peer [127.0.0.1]:16548"
)
GLOO_RESET = (
    "UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:538] "
    "Read error [10.0.0.7]:27789: Connection reset by peer"
)
HEARTBEAT = (
    "INTERNAL: Barrier failed because: task is set to ERROR: UNAVAILABLE: Task 2 heartbeat "
    "timeout. This indicates that the remote task has failed, got preempted, or crashed "
    "unexpectedly. Barrier Id: Shutdown::7902793196765830790::0, Task: 1"
)
UNHEALTHY = (
    "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n3\n"
    "The tasks have crashed."
)


def test_the_sentence_names_the_lost_process_and_its_host():
    said = distributed.lost_sentence(GLOO_CLOSED, 0, 2)
    assert said == (
        "process 1 (host 127.0.0.1) of this jax.distributed run was lost (killed or crashed), "
        "so this process (0 of 2) stops too: start every process again."
    )
    assert distributed.lost_sentence(GLOO_RESET, 1, 2).startswith("process 0 (host 10.0.0.7) ")
    assert distributed.lost_sentence(HEARTBEAT, 0, 4).startswith("process 2 of this ")
    assert distributed.lost_sentence(UNHEALTHY, 0, 4).startswith("process 3 of this ")
    # three or more processes and gloo's text alone: the host, not which process
    assert distributed.lost_sentence(GLOO_CLOSED, 0, 3).startswith(
        "a peer process (host 127.0.0.1) of this "
    )


def test_other_errors_and_one_process_are_left_alone():
    assert distributed.lost_sentence("INVALID_ARGUMENT: shapes differ", 0, 2) is None
    assert distributed.lost_sentence(GLOO_CLOSED, 0, 1) is None
    with pytest.raises(ValueError, match="shapes"):  # one process: the error as it was
        with distributed.lost_processes_named():
            raise ValueError("shapes differ; Connection closed by peer [127.0.0.1]:1")
    with pytest.raises(ValueError, match=r"^patience=0: must be a number of seconds above 0\.$"):
        with distributed.lost_processes_named(patience=0):
            pass


PEER = """\
import os, signal, sys, time
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
port, me, victim, waits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
jax.distributed.initialize(f"127.0.0.1:{port}", 2, me, heartbeat_timeout_seconds=30)
import numpy as np, jax.numpy as jnp
from landscape.engine import distributed
mesh = jax.make_mesh((2,), ("d",))
total = jax.jit(jnp.sum, out_shardings=jax.NamedSharding(mesh, jax.P()))
x = distributed.to_devices(np.arange(2.0), jax.NamedSharding(mesh, jax.P("d")))
with distributed.lost_processes_named(patience=4):
    for step in range(100000):
        if step == 20:
            print(f"step 20 at {time.time()}", flush=True)
            if me == victim:
                os.kill(os.getpid(), signal.SIGKILL)
            if waits:  # no collective to fail: the beats name the lost process
                time.sleep(60)
        assert float(total(x)) == 1.0
        time.sleep(0.05)
"""


@pytest.mark.parametrize(
    "victim, waits, host",
    [(1, False, "127.0.0.1"), (0, False, "127.0.0.1"), (1, True, socket.gethostname())],
    ids=["process 1 killed", "process 0 killed", "process 1 killed, the other waiting"],
)
def test_a_killed_process_is_named_by_the_survivor(victim, waits, host):
    """~8 s each on 2 cores: the survivor ends at once on a failed collective, within the
    patience (4 s) and a beat when it waits, well within the coordinator's 30 s heartbeat."""
    port = _free_port()
    pair = [
        subprocess.Popen(
            [sys.executable, "-c", PEER, str(port), str(i), str(victim), str(int(waits))],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    survivor = pair[1 - victim]
    err = survivor.communicate(timeout=120)[1]
    ended = time.time()
    victim_out = pair[victim].communicate(timeout=30)[0]
    assert pair[victim].returncode == -signal.SIGKILL
    assert survivor.returncode == distributed.EXIT_LOST, err
    sentence = (
        f"process {victim} (host {host}) of this jax.distributed run was lost (killed or "
        f"crashed), so this process ({1 - victim} of 2) stops too: start every process again."
    )
    raised = "" if waits else "landscape.engine.distributed.ProcessLost: "
    assert err.strip().splitlines()[-1] == raised + sentence, err
    assert "Check failure" not in err  # no abort in jax's shutdown barrier
    killed = float(victim_out.split("step 20 at ")[1].split()[0])
    assert ended - killed < (4 + 3 if waits else 3), (ended - killed, err)
