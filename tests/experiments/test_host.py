"""Entry points give the CPU backend one device per core unless the user chose a count; the
compilation cache that setup() turns on serves a second process every program of a probe."""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = """
import sys, jax
from landscape.engine import host
count = None if sys.argv[1] == "None" else int(sys.argv[1])
print(host.use_host_devices(count), jax.device_count())
try:
    host.use_host_devices(jax.device_count() + 1)     # too late: the backend is up
except RuntimeError:
    print("too late")
"""


@pytest.mark.parametrize(
    "count, xla_flags, expected",
    [
        (None, "", f"{len(os.sched_getaffinity(0))} {len(os.sched_getaffinity(0))}"),
        (3, "", "3 3"),
        (None, "--xla_force_host_platform_device_count=2", "None 2"),  # the user's count stays
        (3, "--xla_force_host_platform_device_count=2", "3 3"),  # an explicit count wins
    ],
)
def test_use_host_devices(count, xla_flags, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(PYTHONPATH=ROOT, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(count)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[:2] == [expected, "too late"]


CACHED_PROCESS = """
import json, sys
import numpy as np
import landscape
from experiments.bench.timing import counting_compiles

landscape.setup(compilation_cache=sys.argv[1], progress=None)
import jax, jax.numpy as jnp

rng = np.random.default_rng(0)
params = {"w1": rng.standard_normal((8, 16)), "w2": rng.standard_normal((16, 3))}
params = {k: v.astype(np.float32) for k, v in params.items()}
x, y = rng.standard_normal((32, 8)).astype(np.float32), rng.integers(0, 3, 32)

def objective(p, data):
    x, y = data
    z = jnp.tanh(x @ p["w1"]) @ p["w2"]
    return jnp.mean(jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, y[:, None], -1)[:, 0])

with counting_compiles() as counted:
    x0, matvec = landscape.hvp_flat(landscape.Point(params, objective=objective, inputs=(x, y)))
    hv = np.asarray(matvec(np.ones(x0.size, np.float32)))
print(json.dumps(dict(counted.as_dict(), hv=hv.tolist())))
"""


def test_a_second_process_loads_every_program_of_a_probe_from_the_cache(tmp_path):
    """landscape.setup(compilation_cache=DIR): the first process compiles hvp_flat's programs
    (eager operations included) and writes them; a second one with the same model compiles
    none and gives the same product."""
    skip = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")

    def process() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", CACHED_PROCESS, str(tmp_path / "cache")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = process(), process()
    assert first["compiled"] >= 1 and first["loaded"] == 0  # the product (one program)
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"]
    assert second["hv"] == first["hv"]


# ------------------------------------------------------------------ the compilation cache's faults

_CACHE_FLAGS = (
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
    "jax_persistent_cache_enable_xla_caches",
)


@pytest.fixture
def own_cache(monkeypatch):
    """This process's compilation cache as `setup` sets it (not the suite's, which
    JAX_COMPILATION_CACHE_DIR names), the suite's back afterwards."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    from landscape.engine import host

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    before = {name: getattr(jax.config, name) for name in _CACHE_FLAGS}
    current = host._current
    yield host
    compilation_cache.reset_cache()  # JAX opens the suite's cache again from the flags below
    for name, value in before.items():
        jax.config.update(name, value)
    host._current = current


def _compiled(name, factor):
    """A program of its own (`jit_<name>`) compiled and run: factor * sum(x) at x = 1, 2, 3."""
    import jax
    import jax.numpy as jnp

    def program(x):
        return factor * jnp.sum(x)

    program.__name__ = program.__qualname__ = name
    return float(jax.jit(program)(np.arange(1.0, 4.0, dtype=np.float32)))


def _entries(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _entry(folder, name):
    (path,) = [p for p in folder.iterdir() if p.name.startswith(f"jit_{name}-")]
    return path


def test_setup_moves_the_cache_and_turns_it_off(own_cache, tmp_path):
    """setup(cache A), then B, then off: each program goes where the latest setup said (JAX
    opens its cache once per process; setup opens it again), and each setup reports it."""
    a, b = tmp_path / "a", tmp_path / "b"
    calls = dict(float32_matmuls=False, tune_allocator=False, progress=None)
    assert own_cache.setup(compilation_cache=str(a), **calls).compilation_cache == str(a)
    assert _compiled("into_a", 2.0) == 12.0
    assert own_cache.setup(compilation_cache=str(b), **calls).compilation_cache == str(b)
    assert _compiled("into_b", 3.0) == 18.0
    assert own_cache.setup(compilation_cache="", **calls).compilation_cache is None
    assert _compiled("into_none", 4.0) == 24.0
    assert [n.split("-")[0] for n in _entries(a)] == ["jit_into_a"]
    assert [n.split("-")[0] for n in _entries(b)] == ["jit_into_b"]


def test_a_jax_that_cannot_reopen_its_cache_is_reported_as_it_is(own_cache, tmp_path, monkeypatch):
    """Where JAX's cache cannot be reopened (a JAX without the hooks setup uses), a second setup
    says in one sentence that programs still go to the folder opened first, and reports it."""
    a, b = tmp_path / "a", tmp_path / "b"
    own_cache._install(None)  # nothing opened yet
    monkeypatch.setattr(own_cache, "_jax_internals", lambda: None)
    calls = dict(float32_matmuls=False, tune_allocator=False, progress=None)
    assert own_cache.setup(compilation_cache=str(a), **calls).compilation_cache == str(a)
    assert _compiled("opened_a", 2.0) == 12.0  # JAX opens its own cache at a
    for given in (str(b), ""):
        settings = own_cache.setup(compilation_cache=given, **calls)
        assert settings.compilation_cache == str(a)
        assert settings.note.endswith(  # after the backend's own sentence where it had started
            f"This JAX keeps its compilation cache where it first opened it ({a}) for the rest "
            "of the process, so programs still go there."
        )
    assert _compiled("still_a", 3.0) == 18.0
    assert sorted(n.split("-")[0] for n in _entries(a)) == ["jit_opened_a", "jit_still_a"]
    assert not b.exists() or _entries(b) == []


def test_a_damaged_or_foreign_entry_is_compiled_again_never_loaded(own_cache, tmp_path):
    """An entry holding another program's bytes is skipped (compiled again, the file left as
    it is, no JAX layout traceback); an empty one, which only a write cut short leaves, is
    removed and written again; JAX's own entries in the folder are never read or touched."""
    import jax

    folder = tmp_path / "cache"
    assert own_cache.compilation_cache_in_use(str(folder))[0] == str(folder)
    assert (_compiled("first", 2.0), _compiled("second_one", 5.0)) == (12.0, 30.0)
    assert _compiled("third", 7.0) == 42.0
    first, second, third = (_entry(folder, n) for n in ("first", "second_one", "third"))
    first.write_bytes(second.read_bytes())  # another program's bytes
    third.write_bytes(b"")  # a write cut short
    jax_own = folder / "jit_first-0123-cache"
    jax_own.write_bytes(b"")
    jax.clear_caches()
    own_cache.compilation_cache_in_use(str(folder))  # a new process, as far as JAX knows
    assert (_compiled("first", 2.0), _compiled("second_one", 5.0)) == (12.0, 30.0)
    assert _compiled("third", 7.0) == 42.0
    assert first.read_bytes() == second.read_bytes()  # not ours to replace: skipped
    cache = own_cache.CheckedCache(folder, print)
    assert cache.get(third.name[: -len(cache.SUFFIX)]) is not None  # written again, whole
    assert jax_own.exists() and jax_own.stat().st_size == 0


def test_a_full_disk_leaves_no_entry_and_says_so_once(own_cache, tmp_path, monkeypatch):
    """A write that fails half-way (ENOSPC) leaves neither an entry nor its temporary file,
    says so in one line, and the process writes no more there; the answers are right."""
    folder, lines = tmp_path / "cache", []

    def full(file, data):
        file.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(own_cache, "write_all", full)
    own_cache.compilation_cache_in_use(str(folder), lines.append)
    assert (_compiled("full_one", 2.0), _compiled("full_two", 3.0)) == (12.0, 18.0)
    assert _entries(folder) == []
    assert len(lines) == 1 and "No space left on device" in lines[0]
    assert "writes no more programs there" in lines[0]


def test_a_folder_that_cannot_hold_the_cache_turns_it_off_in_one_line(
    own_cache, tmp_path, monkeypatch
):
    """A file given as the folder, a folder under a file (HOME on a filesystem that refuses
    it), a folder that refuses writes: setup says why in one line, runs without a cache, and
    JAX writes nothing (no warning per program)."""
    import types

    afile = tmp_path / "afile"
    afile.write_text("mine")
    refused = tmp_path / "refused"
    refused.mkdir()
    monkeypatch.setenv("HOME", str(afile / "home"))
    calls = dict(float32_matmuls=False, tune_allocator=False)

    def refuse(**_):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    for given, reason in (
        (str(afile), f"{afile} is a file, not a folder"),
        (own_cache.DEFAULT_CACHE, "cannot make the folder ~/.cache/landscape/jax (Not a"),
        (str(refused), f"cannot write in {refused} (Permission denied)"),
    ):
        if given == str(refused) and os.geteuid() == 0:  # root writes anyway: refuse it here
            monkeypatch.setattr(own_cache, "tempfile", types.SimpleNamespace(mkstemp=refuse))
        elif given == str(refused):
            refused.chmod(0o555)
        lines = []
        settings = own_cache.setup(compilation_cache=given, progress=lines.append, **calls)
        assert settings.compilation_cache is None and len(lines) == 1
        assert f"No compilation cache: {reason}" in lines[0] == str(settings)
        assert settings.cache_note in settings.note and "cache_note" not in settings.as_dict()
        assert _compiled(f"off_{len(given)}", 2.0) == 12.0
    assert afile.read_text() == "mine" and _entries(refused) == []
    refused.chmod(0o755)


def _cli(args, **env_changes):
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.update({"PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", **env_changes})
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # two CLI runs that compile everything (~15 s)
def test_the_cli_runs_on_without_a_cache_it_cannot_make(tmp_path):
    """HOME where no folder can be made (the default cache under it), and a file given as
    --compilation_cache: the run says so in one line, goes on without a cache and records why.
    Fast sibling: test_a_folder_that_cannot_hold_the_cache_turns_it_off_in_one_line (setup's
    sentence, no cache, the note a run records)."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    args = [
        "-m",
        "experiments.scan_snap",
        "--config=configs/syn_small.py",
        "--config.train.num_steps=20",
        "--config.train.chunk_steps=10",
    ]
    for extra, env, reason in (
        ([], {"HOME": str(afile / "home"), "MPLCONFIGDIR": str(tmp_path / "mpl")}, "make the"),
        ([f"--compilation_cache={afile}"], {}, "is a file, not a folder"),
    ):
        workdir = tmp_path / f"run_{len(extra)}"
        out = _cli([*args, f"--workdir={workdir}", *extra], **env)
        assert out.returncode == 0, out.stderr[-2000:]
        notes = [line for line in out.stdout.splitlines() if "compilation cache" in line.lower()]
        assert notes[0].startswith("No compilation cache: ") and reason in notes[0]
        assert "Traceback" not in out.stderr and "compilation cache: off" in notes[1]
        provenance = json.loads((workdir / "config.json").read_text())["provenance"]
        assert provenance["setup"]["compilation_cache"] is None
        assert notes[0] in provenance["setup"]["note"]
    assert afile.read_text() == "mine"


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA GPU")
def test_a_backend_that_is_not_there_is_one_sentence(tmp_path):
    """JAX_PLATFORMS=cuda on a machine without it: JAX ends in a bare AssertionError; setup()
    raises one sentence naming JAX_PLATFORMS, and the CLI prints it and exits 2."""
    script = "import landscape; landscape.setup(progress=None)"
    out = _cli(["-c", script], JAX_PLATFORMS="cuda")
    assert out.returncode == 1 and "AssertionError" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("landscape.engine.host.BackendUnavailable: landscape.setup: JAX ")
    assert "JAX_PLATFORMS='cuda'" in last and "set JAX_PLATFORMS=cpu" in last
    cli = _cli(
        ["-m", "experiments.scan_snap", "--config=configs/syn_small.py", f"--workdir={tmp_path}"],
        JAX_PLATFORMS="cuda",
    )
    assert cli.returncode == 2 and cli.stderr.strip() == last.split(": ", 1)[1]
