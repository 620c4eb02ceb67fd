"""Faults a workdir meets: damaged, truncated or deleted files of each kind, a second writer, an
overwrite among files the library did not write, a resume that would change the config. Each
case ends in records bit-identical to an uninterrupted run's, or in one sentence (exit status 2,
no traceback) that leaves the workdir as it was.

In-process through `cli.main`; one stopped run (scan & snap, 400 steps, stopped at step 200 with
a checkpoint there) is copied for each case.
"""

import contextlib
import hashlib
import json
import os
import pathlib
import resource
import shlex
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from experiments import cli
from experiments import records as records_cli
from landscape.engine import integrity, records, training
from landscape.engine.checkpoints import Checkpoint
from landscape.scan_snap import experiment as scan_snap
from tests import once
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARGS = [
    f"--config={ROOT / 'configs/syn_small.py'}",
    "--config.train.num_steps=400",
    "--config.train.chunk_steps=100",
    "--checkpoint_seconds=0",
]
STOPPED = "stopped;touch PWNED"  # a workdir name a shell would split


def _main(*args):
    return cli.main(scan_snap, ["experiments/scan_snap.py", *args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """(an uninterrupted run's workdir, a workdir of the same run stopped at step 200)."""
    return session_runs(tmp_path_factory, request)


def session_runs(tmp_path_factory, request):
    """`make_runs` once a test session, for every fault module and pytest-xdist worker: the
    cases copy the stopped run before they touch it and only read the uninterrupted one."""
    folder = once.session_folder(tmp_path_factory, request)

    def compute():
        (folder / "faults").mkdir(exist_ok=True)
        return {"runs": [str(path) for path in make_runs(folder / "faults")]}

    found = once.once(folder / "faults_runs.json", compute)
    return tuple(pathlib.Path(path) for path in found["runs"])


def make_runs(root):
    """An uninterrupted run and the same run stopped at step 200, under `root`."""
    assert _main(*ARGS, f"--workdir={root / 'reference'}") == 0
    write_rows = records.MetricsRecorder.write_rows

    def stop_after_step_200(self, first_step, *rest, **kwargs):
        write_rows(self, first_step, *rest, **kwargs)
        if first_step >= 100:
            training.request_stop()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records.MetricsRecorder, "write_rows", stop_after_step_200)
        assert _main(*ARGS, f"--workdir={root / STOPPED}") == cli.EXIT_INTERRUPTED
    summary = json.loads((root / STOPPED / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["step"] == 200
    return root / "reference", root / STOPPED


@pytest.fixture
def stopped(runs, tmp_path):
    """A copy of the stopped run, for one case to damage."""
    return pathlib.Path(shutil.copytree(runs[1], tmp_path / "run"))


def _same_records(a, b):
    arrays_a, arrays_b = load_npz(a / "arrays.npz"), load_npz(b / "arrays.npz")
    assert sorted(arrays_a) == sorted(arrays_b)
    for name in arrays_a:
        np.testing.assert_array_equal(arrays_a[name], arrays_b[name], err_msg=name)
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()
    summaries = [json.loads((p / "summary.json").read_text()) for p in (a, b)]
    assert summaries[0]["status"] == summaries[1]["status"] == "complete"
    assert summaries[0].get("claims") == summaries[1].get("claims")


def _files(path):
    """Every file under `path` with a digest of its bytes (the lock file aside)."""
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != records.LOCK
    }


def _one_sentence(status, capsys, *words):
    out = capsys.readouterr()
    assert status == cli.EXIT_USAGE, (status, out.err[-2000:])
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_a_stopped_run_resumes_bit_identical_and_checks_intact(runs, stopped, capsys):
    """The resume, then a second one of the complete run (nothing left to train): every
    start's provenance kept, the records the same."""
    assert records_cli.main(["records", "check", str(stopped)]) == 0
    assert "BAD" not in capsys.readouterr().out
    first = json.loads((stopped / "config.json").read_text())["provenance"]
    assert _main(f"--workdir={stopped}", "--resume") == 0
    assert "resumed at step 200/400" in capsys.readouterr().out
    _same_records(stopped, runs[0])
    assert records_cli.main(["records", "check", str(stopped)]) == 0
    capsys.readouterr()
    assert _main(f"--workdir={stopped}", "--resume") == 0
    capsys.readouterr()
    provenance = json.loads((stopped / "config.json").read_text())["provenance"]
    assert {k: v for k, v in provenance.items() if k != "resumes"} == first
    assert [r["command"].split()[-1] for r in provenance["resumes"]] == ["--resume"] * 2
    assert all(set(first) <= set(r) for r in provenance["resumes"])
    _same_records(stopped, runs[0])


def test_the_resume_command_is_shell_quoted(runs):
    summary = json.loads((runs[1] / "summary.json").read_text())
    words = shlex.split(summary["resume"])
    assert f"--workdir={runs[1]}" in words and "touch" not in words


def _cut(file, size):
    file.write_bytes(file.read_bytes()[:size])


def _flip(file, at):
    data = bytearray(file.read_bytes())
    data[at] = 0xFF
    file.write_bytes(bytes(data))


def _change_a_digit(file):
    text = file.read_text()
    at = text.index('"loss": ') + len('"loss": ') + 3
    file.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :])


METRICS_FAULTS = {
    "truncated": (lambda f: _cut(f, f.stat().st_size // 2), "holds"),
    "deleted": (lambda f: f.unlink(), "is missing"),
    "not UTF-8": (lambda f: _flip(f, 100), "differs"),
    "a changed digit": (_change_a_digit, "differs"),
    "a torn last line": (lambda f: _cut(f, f.stat().st_size - 5), "holds"),
}


@pytest.mark.parametrize("fault", sorted(METRICS_FAULTS))
def test_damaged_metrics_are_refused_on_resume(stopped, capsys, fault):
    damage, words = METRICS_FAULTS[fault]
    damage(stopped / "metrics.jsonl")
    before = _files(stopped)
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "metrics.jsonl", words, "--overwrite")
    assert _files(stopped) == before  # nothing cut, nothing removed
    assert records_cli.main(["records", "check", str(stopped)]) == 1
    assert "BAD  metrics.jsonl" in capsys.readouterr().out


def _host(path):
    (host,) = (path / "checkpoints" / "cell0").glob("host-*.npz")
    return host


def _pickled(file):
    with open(file, "wb") as f:
        np.savez(f, losses=np.array([object()], dtype=object))


HOST_FAULTS = {
    "garbled": (lambda f: _flip(f, f.stat().st_size // 2), "differs from the sha256"),
    "truncated": (lambda f: _cut(f, 100), "holds 100 bytes"),
    "pickled objects": (_pickled, "host-200.npz"),
}


@pytest.mark.parametrize("fault", sorted(HOST_FAULTS))
def test_damaged_host_records_are_refused_on_resume(stopped, capsys, fault):
    damage, words = HOST_FAULTS[fault]
    damage(_host(stopped))
    before = _files(stopped)
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "host-200.npz", words, "--overwrite")
    assert _files(stopped) == before


def test_a_host_record_the_manifest_does_not_seal_is_never_restored(runs, stopped, capsys):
    """A step whose save the manifest does not seal (entered, not sealed: a killed save, or a
    manifest edited by hand) is never restored: a resume removes it, starts that program over,
    says so, and ends in the uninterrupted run's records."""
    manifest = json.loads((stopped / "manifest.json").read_text())
    manifest["files"]["checkpoints/cell0/host-200.npz"] = None
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    assert _main(f"--workdir={stopped}", "--resume") == 0
    out = capsys.readouterr().out
    assert "started at step 0: " in out and "holds no sealed checkpoint" in out, out
    assert "resumed at step" not in out
    _same_records(stopped, runs[0])


CONFIG_FAULTS = {
    "garbled": (lambda f: f.write_text(f.read_text()[:50]), "config.json holds 50 bytes"),
    "deleted": (lambda f: f.unlink(), "config.json is missing"),
    "edited": (
        lambda f: f.write_text(f.read_text().replace('"lr_z": 1.0', '"lr_z": 0.5')),
        "config.json differs from the sha256",
    ),
}


@pytest.mark.parametrize("fault", sorted(CONFIG_FAULTS))
def test_a_damaged_config_is_refused_on_resume(stopped, capsys, fault):
    damage, words = CONFIG_FAULTS[fault]
    damage(stopped / "config.json")
    before = _files(stopped)
    _one_sentence(_main(f"--workdir={stopped}", "--resume"), capsys, words)
    assert _files(stopped) == before


def test_a_config_garbled_without_a_checksum_is_named(stopped, capsys):
    manifest = json.loads((stopped / "manifest.json").read_text())
    manifest["files"]["config.json"] = None
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    _cut(stopped / "config.json", 50)
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "config.json is not valid JSON (", "--overwrite")
    with pytest.raises(records.WorkdirError, match=r"config.json is not valid JSON \("):
        records.load_config_json(stopped / "config.json")


@pytest.mark.parametrize(
    "override, words",
    [
        ("--config.optim.lr_z=0.5", "config.optim.lr_z = 0.5 differs"),
        ("--config.train.num_steps=100", "config.train.num_steps = 100 differs"),
    ],
)
def test_a_resume_never_changes_the_config(stopped, capsys, override, words):
    before = _files(stopped)
    status = _main(f"--workdir={stopped}", "--resume", override)
    _one_sentence(status, capsys, words, "resume without overrides")
    assert _files(stopped) == before


def test_damaged_arrays_and_summary_resume_bit_identical(runs, stopped, capsys):
    """A resume rewrites arrays.npz and summary.json whole: damage there is simply replaced;
    records.load of the damaged files says which one cannot be read."""
    _cut(stopped / "arrays.npz", 50)
    with pytest.raises(records.WorkdirError, match=r"arrays.npz cannot be read as arrays"):
        records.load(stopped)
    (stopped / "summary.json").write_text("{not json")
    assert records_cli.main(["records", "check", str(stopped)]) == 1
    assert _main(f"--workdir={stopped}", "--resume") == 0
    capsys.readouterr()
    _same_records(stopped, runs[0])
    (stopped / "summary.json").write_text("{not json")
    with pytest.raises(records.WorkdirError, match=r"summary.json is not valid JSON"):
        records.load(stopped)


def test_a_second_writer_is_refused_naming_the_first(runs, stopped, capsys):
    descriptor = records.lock(stopped)  # as a run in this process holds it
    try:
        before = _files(stopped)
        words = (f"in use by process {os.getpid()}",)
        _one_sentence(_main(f"--workdir={stopped}", "--resume"), capsys, *words)
        _one_sentence(_main(*ARGS, f"--workdir={stopped}", "--overwrite"), capsys, *words)
        assert _files(stopped) == before
    finally:
        os.close(descriptor)
    assert _main(f"--workdir={stopped}", "--resume") == 0
    capsys.readouterr()
    _same_records(stopped, runs[0])


@pytest.mark.slow  # a drill; fast siblings below
def test_a_killed_writer_leaves_the_workdir_free(runs, stopped, capsys):
    """Another process holds the lock (as a run does); killed, the OS releases it. Its fast
    siblings: test_faults_processes.py's test_a_forked_child_never_keeps_the_lock_of_a_killed_run
    (a holder named, then killed: the workdir free) and, above, the second writer refused in
    one sentence naming it, then the resume to the same records."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom landscape.engine import records\n"
            "records.lock(sys.argv[1]); print('locked', flush=True); time.sleep(600)",
            str(stopped),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        status = _main(f"--workdir={stopped}", "--resume")
        _one_sentence(status, capsys, f"in use by process {holder.pid}")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=60)
    assert _main(f"--workdir={stopped}", "--resume") == 0
    capsys.readouterr()
    _same_records(stopped, runs[0])


def test_a_model_folders_config_json_is_never_records_nor_replaced(tmp_path, capsys):
    """Someone else's config.json (no manifest lists it): every mode stops in one sentence
    naming it, suggesting no flag that would replace it (--keep_others, --force)."""
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    args = [*ARGS, f"--workdir={folder}"]
    for extra in ([], ["--overwrite"], ["--overwrite", "--keep_others"]):
        sentence = _one_sentence(_main(*args, *extra), capsys, "config.json was not written")
        assert "earlier run" not in sentence and "--keep_others" not in sentence
        assert "--force" not in sentence and "--overwrite" not in sentence
    _one_sentence(_main(*args, "--resume"), capsys, "holds no records of an earlier run")
    _one_sentence(_main(*args, "--overwrite", "--force"), capsys, "no manifest a run wrote")
    assert _files(folder) == {"config.json": hashlib.sha256(b'{"model_type": "bert"}').hexdigest()}


def test_a_users_figure_where_the_run_draws_one_is_never_replaced(runs, tmp_path, capsys):
    """A fresh run into a folder holding the user's figures/loss.png stops in one sentence
    naming it, the figure as it was; moved away, --resume completes the same records."""
    folder = tmp_path / "run"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "loss.png").write_bytes(b"my plot")
    status = _main(*ARGS, f"--workdir={folder}")
    _one_sentence(status, capsys, "figures/loss.png was not written by a run", "--resume")
    assert (folder / "figures" / "loss.png").read_bytes() == b"my plot"
    (folder / "figures" / "loss.png").rename(tmp_path / "my_loss.png")
    assert _main(f"--workdir={folder}", "--resume") == 0
    capsys.readouterr()
    _same_records(folder, runs[0])
    assert (tmp_path / "my_loss.png").read_bytes() == b"my plot"


@pytest.mark.parametrize("where", [".", "/", "/etc", "~"])
def test_a_workdir_among_the_sources_or_the_system_is_refused(where, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = sorted(p.name for p in ROOT.iterdir())
    status = _main(*ARGS, f"--workdir={os.path.expanduser(where)}")
    _one_sentence(status, capsys, "records go in a folder of their own")
    assert sorted(p.name for p in ROOT.iterdir()) == before


def test_a_resume_under_other_code_is_refused_or_recorded(runs, stopped, capsys, monkeypatch):
    """The library's sources changed since the run stopped: --resume is one sentence naming
    --other_code, which continues and leaves both code versions in the manifest and config.json."""
    ours = integrity.code_sha256()
    assert json.loads((stopped / "manifest.json").read_text())["code"] == [ours]
    monkeypatch.setattr(integrity, "code_sha256", lambda: "f" * 64)
    before = _files(stopped)
    sentence = _one_sentence(_main(f"--workdir={stopped}", "--resume"), capsys, "other code")
    assert f"code {ours[:12]}" in sentence and "--other_code" in sentence
    _one_sentence(_main(*ARGS, f"--workdir={stopped}1", "--other_code"), capsys, "goes with")
    assert _files(stopped) == before
    assert _main(f"--workdir={stopped}", "--resume", "--other_code") == 0
    assert "resumed at step 200/400" in capsys.readouterr().out
    _same_records(stopped, runs[0])  # the same numbers: only the digest was made to differ
    assert json.loads((stopped / "manifest.json").read_text())["code"] == [ours, "f" * 64]
    provenance = json.loads((stopped / "config.json").read_text())["provenance"]
    assert provenance["code"] == ours and "other_code" not in provenance
    assert provenance["resumes"][0]["code"] == "f" * 64 and provenance["resumes"][0]["other_code"]
    assert records_cli.main(["records", "check", str(stopped)]) == 0


def test_overwrite_keeps_a_users_file_in_a_checkpoint_folder(stopped, capsys):
    notes = stopped / "checkpoints" / "cell0" / "my_notes.txt"
    notes.write_text("mine")
    before = _files(stopped)
    status = _main(*ARGS, f"--workdir={stopped}", "--overwrite")
    _one_sentence(status, capsys, "checkpoints/cell0/my_notes.txt", "--keep_others")
    assert _files(stopped) == before
    args = [*ARGS, "--config.train.num_steps=100", f"--workdir={stopped}"]
    assert _main(*args, "--overwrite", "--keep_others") == 0
    capsys.readouterr()
    assert notes.read_text() == "mine"
    assert sorted(p.name for p in notes.parent.iterdir()) == ["100", "host-100.npz", "my_notes.txt"]


@pytest.mark.parametrize("where", ["../outside/x", "a/../../outside/x", "absolute", "a link"])
def test_overwrite_never_reaches_outside_the_workdir(stopped, capsys, where):
    outside = stopped.parent / "outside"
    outside.mkdir()
    (outside / "x").write_text("not yours")
    name = {"absolute": str(outside / "x"), "a link": "link/x"}.get(where, where)
    if where == "a link":
        (stopped / "link").symlink_to(outside)
    manifest = json.loads((stopped / "manifest.json").read_text())
    manifest["files"][name] = None
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    before = _files(stopped)
    for keep in ([], ["--keep_others"]):
        status = _main(*ARGS, f"--workdir={stopped}", "--overwrite", *keep)
        _one_sentence(status, capsys, "a path outside the workdir", "nothing was removed")
    assert (outside / "x").read_text() == "not yours"
    assert _files(stopped) == before


def test_an_override_error_never_echoes_a_long_value_whole(capsys):
    for value in ("x" * 100_000, "[" + ", ".join(["1.0"] * 30_000) + "]"):
        status = _main(*ARGS, f"--config.optim.lr_z={value}")
        sentence = _one_sentence(status, capsys, "config.optim.lr_z = ", "characters)")
        assert len(sentence) < 300, len(sentence)


def test_the_check_command_says_what_it_checks(tmp_path, capsys):
    assert records_cli.main([]) == 2
    assert records_cli.main(["records", "check", str(tmp_path)]) == 2
    assert "holds no records of a run" in capsys.readouterr().err


def test_a_damaged_orbax_step_is_refused_on_resume(stopped, capsys):
    """Each file of the checkpoint's orbax step has its size and sha256 in the manifest: a
    garbled one is named before orbax reads it (which ended in ~90 lines and DATA_LOSS)."""
    step = stopped / "checkpoints" / "cell0" / "200"
    biggest = max((p for p in step.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    _flip(biggest, biggest.stat().st_size // 2)
    before = _files(stopped)
    status = _main(f"--workdir={stopped}", "--resume")
    name = biggest.relative_to(stopped).as_posix()
    _one_sentence(status, capsys, name, "differs from the sha256", "--overwrite")
    assert _files(stopped) == before
    assert records_cli.main(["records", "check", str(stopped)]) == 1
    assert f"BAD  {name}" in capsys.readouterr().out


def test_metrics_of_a_checkpoint_without_a_digest_are_read_as_rows(stopped, capsys):
    """A checkpoint written before digests (its host records hold only metrics.jsonl's size):
    bytes in the rows that are not UTF-8 JSON are still named before anything is cut."""
    host = _host(stopped)
    arrays = load_npz(host)
    del arrays["metrics_sha256"]
    with open(host, "wb") as f:
        np.savez(f, **arrays)
    manifest = json.loads((stopped / "manifest.json").read_text())
    data = host.read_bytes()  # sealed as it now is
    entry = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["files"][host.relative_to(stopped).as_posix()] = entry
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    _flip(stopped / "metrics.jsonl", 100)
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "metrics.jsonl holds bytes that are not UTF-8 JSON rows")


@contextlib.contextmanager
def _file_size_limit(size):
    """Writes past `size` bytes fail with EFBIG, as on a full disk (RLIMIT_FSIZE, SIGXFSZ
    ignored): a real limit on this process, lifted after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


LIMITED = """\
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
runpy.run_module("experiments.scan_snap", run_name="__main__", alter_sys=True)
"""


def _full_disk_run(workdir, size):
    """The CLI in a subprocess whose files may not grow past `size` bytes (RLIMIT_FSIZE), on as
    many host devices as this process has (the runs it is compared with split their seeds
    over them: another count rounds differently)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    return subprocess.run(
        [sys.executable, "-c", LIMITED, str(size), *ARGS, f"--workdir={workdir}"]
        + ["--compilation_cache=", f"--host_devices={jax.local_device_count()}"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "case",
    [
        pytest.param((80_000, "checkpoints/cell0/host-300.npz", True), marks=pytest.mark.slow),
        (1_000, "config.json", False),
    ],
)
def test_a_full_disk_ends_in_one_sentence_and_the_run_continues(runs, tmp_path, capsys, case):
    """Files may not grow past `size` bytes: the run stops where a record does not fit with one
    sentence naming it; once the limit is lifted, `--resume` (or, when the config itself did
    not fit and nothing was kept, the same command) gives the uninterrupted run's records.
    The disk full mid-run (-m slow) has fast siblings: the config.json case (the same limit),
    test_a_stop_whose_status_does_not_fit_still_ends_in_one_sentence (a full disk, then a
    resume to the same records) and test_metrics_rows_that_do_not_fit_name_the_file."""
    size, file, kept = case
    workdir = tmp_path / "run"
    done = _full_disk_run(workdir, size)
    assert done.returncode == cli.EXIT_FAILED, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    (sentence,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert sentence.startswith(f"{workdir / file} could not be written: the disk is full ("), (
        sentence
    )
    if kept:
        assert sentence.endswith(
            f"continue with: python -m experiments.scan_snap --workdir={workdir} --resume"
        )
        summary = json.loads((workdir / "summary.json").read_text())
        assert summary["status"] == "stopped: the disk is full"
        assert _main(f"--workdir={workdir}", "--resume") == 0
        assert "resumed at step 200/400" in capsys.readouterr().out
    else:
        assert sentence.endswith("free space, then run the same command again.")
        assert not records.has_records(workdir)
        assert _main(*ARGS, f"--workdir={workdir}") == 0
    _same_records(workdir, runs[0])


def test_a_stop_whose_status_does_not_fit_still_ends_in_one_sentence(runs, tmp_path, capsys):
    """Ctrl-C (a stop at step 200) on a disk that is full by the time summary.json says
    "interrupted": the CLI's sentence with the resume command, no traceback; summary.json keeps
    "running" (as after a kill), and `--resume` gives the uninterrupted run's records."""
    workdir = tmp_path / "run"
    write_rows, write_status = records.MetricsRecorder.write_rows, records.Workdir.write_status

    def stop_after_step_200(self, first_step, *rest, **kwargs):
        write_rows(self, first_step, *rest, **kwargs)
        if first_step >= 100:
            training.request_stop()

    def full_at_the_stop(self, status, **fields):
        if status == "interrupted":
            raise records.DiskFullError(28, os.strerror(28), str(self.path / "summary.json"))
        return write_status(self, status, **fields)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records.MetricsRecorder, "write_rows", stop_after_step_200)
        patch.setattr(records.Workdir, "write_status", full_at_the_stop)
        status = _main(*ARGS, f"--workdir={workdir}")
    out = capsys.readouterr()
    assert status == cli.EXIT_INTERRUPTED, out.err[-2000:]
    assert "Traceback" not in out.err + out.out
    (sentence,) = [line for line in out.err.splitlines() if line.startswith("Interrupted")]
    assert sentence.startswith("Interrupted at step 200:"), sentence
    assert sentence.endswith(f"--workdir={workdir} --resume"), sentence
    assert json.loads((workdir / "summary.json").read_text())["status"] == "running"
    assert _main(f"--workdir={workdir}", "--resume") == 0
    assert "resumed at step 200/400" in capsys.readouterr().out
    _same_records(workdir, runs[0])


def test_metrics_rows_that_do_not_fit_name_the_file(tmp_path):
    workdir = records.Workdir(tmp_path)
    rows = [{"step": i, "loss": 0.5} for i in range(200)]
    with _file_size_limit(2000), pytest.raises(records.DiskFullError) as error:
        workdir.append_metrics(rows)
    assert error.value.filename == str(tmp_path / "metrics.jsonl")
    assert error.value.strerror == "File too large"


@pytest.mark.parametrize("argument", ["--workdir", "--config.name"])
def test_a_name_longer_than_the_filesystem_takes_is_refused_first(tmp_path, capsys, argument):
    """A folder name of 300 bytes (Errno 36 at the first write): one sentence naming the
    argument, before anything is created."""
    long = "n" * 300
    value = str(tmp_path / long / "run") if argument == "--workdir" else long
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # where runs/<config.name>/ would go
        status = _main(*ARGS, f"{argument}={value}")
    sentence = _one_sentence(status, capsys, "is 300 bytes long, more than the 255")
    named = "--workdir" if argument == "--workdir" else "config.name"
    assert sentence.startswith(f"{named}: the name nnnn"), sentence
    assert list(tmp_path.iterdir()) == []


def test_an_orbax_save_that_does_not_fit_names_its_step_and_says_nothing_else(tmp_path, capfd):
    """orbax's threads meet the limit (EFBIG inside tensorstore): one DiskFullError naming the
    step, none of orbax's logged tracebacks, and no step that a resume would take as saved."""
    checkpoint = Checkpoint(tmp_path / "cell0")
    state = {"x": np.arange(100_000, dtype=np.float32)}
    with _file_size_limit(20_000), pytest.raises(records.DiskFullError) as error:
        checkpoint.save(1, state, {})
    assert error.value.filename == str(tmp_path / "cell0" / "1")
    assert checkpoint.latest_step() is None
    out = capfd.readouterr()
    assert "Traceback" not in out.err + out.out and "ERROR" not in out.err, out.err[-2000:]
