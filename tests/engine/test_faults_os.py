"""The operating system's faults while a run writes: a read-only workdir (a refused write, or
orbax's PERMISSION_DENIED), the workdir moved away, a dangling workdir link, a folder where a
record goes; and signals: a second SIGTERM while a checkpoint is written, a Ctrl-C that a library
swallows, Ctrl-C during the imports. Each ends in one sentence and an honest summary.json
status, and `--resume` continues to records bit-identical to an uninterrupted run's.

In-process through `cli.main` (the faults injected where the run writes), beside the runs of
tests/engine/test_faults.py (scan & snap, 400 steps in chunks of 100, a checkpoint at every chunk).
"""

import errno
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import types

import numpy as np
import pytest

from experiments import cli
from landscape.engine import checkpoints, records, training, writes
from tests.engine.test_faults import ARGS, ROOT, _main, _same_records, session_runs


@pytest.fixture(scope="module")
def reference(tmp_path_factory, request):
    """An uninterrupted run's workdir."""
    return session_runs(tmp_path_factory, request)[0]


def _sentence(status, capsys, expected_status=cli.EXIT_FAILED):
    out = capsys.readouterr()
    assert status == expected_status, (status, out.err[-2000:])
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def _after_step(step, action):
    """write_rows that runs `action()` once, after the rows of the chunk that ends at `step`."""
    write_rows, done = records.MetricsRecorder.write_rows, []

    def patched(self, first_step, loss, *rest, **kwargs):
        write_rows(self, first_step, loss, *rest, **kwargs)
        if loss is not None and first_step + loss.shape[1] == step and not done:
            done.append(step)
            action()

    return patched


def _summary(path):
    return json.loads((path / "summary.json").read_text())


def test_a_workdir_gone_read_only_is_one_sentence_and_resumes(reference, tmp_path, capsys):
    """After step 200's rows every write in the workdir is refused (EROFS), the status too: one
    sentence naming the file and the resume command; summary.json keeps "running"."""
    workdir = tmp_path / "run"
    read_only = []

    def opener(file, *args, **kwargs):
        if read_only and str(file).startswith(str(workdir)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
        return open(file, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writes, "open", opener, raising=False)
        patch.setattr(records, "open", opener, raising=False)
        patch.setattr(
            records.MetricsRecorder, "write_rows", _after_step(200, lambda: read_only.append(1))
        )
        status = _main(*ARGS, f"--workdir={workdir}")
    sentence = _sentence(status, capsys)
    assert "could not be written (Read-only file system); the records up to the last" in sentence
    assert sentence.endswith(f"--workdir={workdir} --resume"), sentence
    assert _summary(workdir)["status"] == "running"
    assert _main(f"--workdir={workdir}", "--resume") == 0
    assert "resumed at step 100/400" in capsys.readouterr().out
    _same_records(workdir, reference)


def test_orbax_refused_a_save_is_one_sentence_and_resumes(reference, tmp_path, capsys):
    """orbax's writer (tensorstore) says PERMISSION_DENIED in words: the sentence names the
    step folder, summary.json says the record could not be written, and a resume continues."""
    workdir = tmp_path / "run"
    save = checkpoints.Checkpoint.save

    def refused_at_300(self, step, *args):
        if step == 300:
            with checkpoints.writes_to(self.path / str(step)):
                raise ValueError(
                    "PERMISSION_DENIED: Error opening file: Permission denied [tensorstore]"
                )
        return save(self, step, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoints.Checkpoint, "save", refused_at_300)
        status = _main(*ARGS, f"--workdir={workdir}")
    sentence = _sentence(status, capsys)
    assert sentence.startswith(
        f"{workdir}/checkpoints/cell0/300 could not be written (Permission denied)"
    )
    summary = _summary(workdir)
    assert summary["status"] == "stopped: a record could not be written", summary
    assert _main(f"--workdir={workdir}", "--resume") == 0
    assert "resumed at step 200/400" in capsys.readouterr().out
    _same_records(workdir, reference)


def test_a_workdir_moved_mid_run_is_one_sentence_and_resumes_where_it_went(
    reference, tmp_path, capsys
):
    workdir, moved = tmp_path / "run", tmp_path / "moved"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            records.MetricsRecorder, "write_rows", _after_step(200, lambda: workdir.rename(moved))
        )
        status = _main(*ARGS, f"--workdir={workdir}")
    sentence = _sentence(status, capsys)
    assert f"{workdir} was moved or removed while the run wrote it" in sentence, sentence
    assert sentence.endswith("--workdir=NEW_PLACE --resume"), sentence
    assert not workdir.exists()
    assert _main(f"--workdir={moved}", "--resume") == 0
    assert "resumed at step 100/400" in capsys.readouterr().out
    _same_records(moved, reference)


def test_a_dangling_workdir_link_is_one_sentence(tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    status = _main(*ARGS, f"--workdir={link}")
    sentence = _sentence(status, capsys, cli.EXIT_USAGE)
    assert f"is a link to {tmp_path / 'nowhere'}, which does not exist" in sentence, sentence
    assert not (tmp_path / "nowhere").exists()


def test_a_folder_where_a_record_goes_mid_run_is_one_sentence(reference, tmp_path, capsys):
    workdir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            records.MetricsRecorder,
            "write_rows",
            _after_step(400, lambda: (workdir / "arrays.npz").mkdir()),
        )
        status = _main(*ARGS, f"--workdir={workdir}")
    sentence = _sentence(status, capsys)
    assert sentence.startswith(f"{workdir / 'arrays.npz'} could not be written (Is a directory)")
    assert _summary(workdir)["status"] == "stopped: a record could not be written"
    status = _main(f"--workdir={workdir}", "--resume")
    assert "arrays.npz is a folder" in _sentence(status, capsys, cli.EXIT_USAGE)
    (workdir / "arrays.npz").rmdir()
    assert _main(f"--workdir={workdir}", "--resume") == 0
    capsys.readouterr()
    _same_records(workdir, reference)


# ----------------------------------------------------------------------------------- signals


def test_a_second_sigterm_during_a_checkpoint_save_waits_for_it(reference, tmp_path, capsys):
    """SIGTERM after step 100's rows (a stop at step 200), then another while step 200's
    checkpoint is written: the save finishes, the run stops there in the CLI's sentence."""
    workdir = tmp_path / "run"
    save = checkpoints.Checkpoint.save

    def sigterm_inside(self, step, *args):
        if step == 200:
            signal.raise_signal(signal.SIGTERM)
        return save(self, step, *args)

    with pytest.MonkeyPatch.context() as patch:
        term = lambda: signal.raise_signal(signal.SIGTERM)  # noqa: E731 -- one call
        patch.setattr(records.MetricsRecorder, "write_rows", _after_step(200, term))
        patch.setattr(checkpoints.Checkpoint, "save", sigterm_inside)
        status = _main(*ARGS, f"--workdir={workdir}")
    out = capsys.readouterr()
    assert status == cli.EXIT_INTERRUPTED and "Traceback" not in out.err, out.err[-2000:]
    assert "SIGTERM: stopping once the checkpoint is written" in out.err
    assert out.err.strip().splitlines()[-1].startswith("Interrupted at step 200: ")
    assert _summary(workdir)["status"] == "interrupted" and _summary(workdir)["step"] == 200
    assert _main(f"--workdir={workdir}", "--resume") == 0
    assert "resumed at step 200/400" in capsys.readouterr().out
    _same_records(workdir, reference)


def test_a_ctrl_c_a_library_swallows_is_not_lost(reference, tmp_path, capsys):
    """Ctrl-C once training is over raises KeyboardInterrupt at once; raised inside a callback
    that swallows it (as jax's gc callback does), the run goes on to its end: the CLI still
    ends in the interrupted status 130, saying the records are complete."""
    workdir = tmp_path / "run"
    save_arrays = records.Workdir.save_arrays

    def swallowed(self, **arrays):
        try:  # what an `except Exception`-proof callback would do
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return save_arrays(self, **arrays)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records.Workdir, "save_arrays", swallowed)
        status = _main(*ARGS, f"--workdir={workdir}")
    sentence = _sentence(status, capsys, cli.EXIT_INTERRUPTED)
    assert sentence == (
        "Interrupted: the run had written its records when it could stop; they are complete in "
        f"{workdir}."
    )
    _same_records(workdir, reference)


def _python(args, timeout):
    """`python ARGS` in a subprocess from the repository root (its output captured)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "program, argv",
    [
        ("experiments.scan_snap", "['experiments/scan_snap.py', '--config=configs/syn_small.py']"),
        ("experiments.report", "['experiments/report', '--list']"),
    ],
)
def test_ctrl_c_during_the_imports_is_one_line(program, argv):
    """A KeyboardInterrupt while a CLI program or the report still imports (jax takes seconds):
    one line, no traceback, the interrupted exit status."""
    code = (  # SIGINT as from a terminal: a suite run as a background job ignores it, and its
        "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"  # children
        "import os, runpy, sys\n"  # would inherit that (no preexec_fn: it can deadlock a child)
        "class Interrupt:  # SIGINT as the program starts to import jax\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'jax':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        f"sys.argv = {argv}\n"
        f"runpy.run_module('{program}', run_name='__main__', alter_sys=True)"
    )
    done = _python(["-c", code], timeout=60)
    assert done.returncode in (cli.EXIT_INTERRUPTED, -signal.SIGINT), done
    assert done.stderr.strip() == "Interrupted before the run started: nothing was written.", (
        done.stderr
    )


def test_importing_the_clis_leaves_the_excepthook_alone():
    """Only a CLI program installs its Ctrl-C hook: importing the package, its CLI or a paper's
    program (a test, a notebook) changes nothing process-wide."""
    code = (
        "import sys\nhook = sys.excepthook\n"
        "import experiments, experiments.cli, experiments.scan_snap, experiments.run\n"
        "assert sys.excepthook is hook, sys.excepthook"
    )
    done = _python(["-c", code], timeout=120)
    assert done.returncode == 0, done.stderr


def test_resume_with_another_papers_cli_names_the_right_one(tmp_path, capsys):
    """A scan & snap workdir resumed through the Markov CLI: one sentence naming
    `python -m experiments.scan_snap`, instead of "config.theory... is not a known field"."""
    from landscape.markov import experiment as markov

    workdir = tmp_path / "run"
    shutil.copytree(make_stopped_only(tmp_path), workdir)
    capsys.readouterr()
    status = cli.main(markov, ["experiments/markov.py", f"--workdir={workdir}", "--resume"])
    sentence = _sentence(status, capsys, cli.EXIT_USAGE)
    assert sentence == (
        f"--resume: {workdir} holds a run of python -m experiments.scan_snap, not of python -m "
        f"experiments.markov: continue it with python -m experiments.scan_snap --workdir={workdir} "
        "--resume."
    )


def make_stopped_only(tmp_path):
    """A small interrupted scan & snap workdir (Ctrl-C after the first chunk)."""
    workdir = tmp_path / "small"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            records.MetricsRecorder, "write_rows", _after_step(100, training.request_stop)
        )
        assert _main(*ARGS, f"--workdir={workdir}") == cli.EXIT_INTERRUPTED
    return pathlib.Path(workdir)


# ------------------------------------------------------------------------- the device count

STOP_AT_200 = """\
import runpy
from landscape.engine import records, training
write_rows = records.MetricsRecorder.write_rows
def stop(self, first_step, loss, *rest, **kwargs):
    write_rows(self, first_step, loss, *rest, **kwargs)
    if loss is not None and first_step + loss.shape[1] >= 200:
        training.request_stop()
records.MetricsRecorder.write_rows = stop
runpy.run_module("experiments.scan_snap", run_name="__main__", alter_sys=True)
"""


def _cli(args, devices, stop=False):
    """The scan & snap CLI in a subprocess on `devices` host devices (stopped at step 200)."""
    program = ["-c", STOP_AT_200] if stop else ["-m", "experiments.scan_snap"]
    return _python([*program, *args, f"--host_devices={devices}"], timeout=600)


@pytest.fixture(scope="module")
def six_runs(tmp_path_factory):
    """(the arguments of a run of 6 runs, its uninterrupted workdir on 2 devices)."""
    six = [*ARGS, "--config.num_seeds=3"]
    workdir = tmp_path_factory.mktemp("six_runs") / "reference"
    reference = _cli([*six, f"--workdir={workdir}"], devices=2)
    assert reference.returncode == 0, reference.stderr[-3000:]
    return six, workdir


@pytest.mark.slow
@pytest.mark.parametrize("before, after, rows", [(2, 4, (6, 8)), (4, 2, (8, 6))])
def test_a_resume_on_another_device_count_regroups_the_runs(
    six_runs, tmp_path, before, after, rows
):
    """6 runs saved on 2 devices (6 rows) resumed on 4 (padded to 8 rows), and back: the real
    runs continue bit for bit (it ended in IndivisibleError, or in "compiled with key<fry>[6]
    and called with key<fry>[8]")."""
    six, reference = six_runs
    stopped = _cli([*six, f"--workdir={tmp_path / 'run'}"], devices=before, stop=True)
    assert stopped.returncode == cli.EXIT_INTERRUPTED, stopped.stderr[-3000:]
    resumed = _cli([f"--workdir={tmp_path / 'run'}", "--resume"], devices=after)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"6 runs saved as {rows[0]} rows, padded to {rows[1]} here" in resumed.stdout
    assert "resumed at step 200/400" in resumed.stdout
    _same_records(tmp_path / "run", reference)


def test_a_split_batch_resumes_only_on_its_device_count():
    from landscape.engine import regroup

    host = {"devices": np.int64(2), "shares": np.int64(2)}
    regroup.check_devices(host, devices=2, shares=2)
    with pytest.raises(records.WorkdirError) as error:
        regroup.check_devices(host, devices=4, shares=4)
    assert str(error.value) == (
        "--resume: this program split its run's batch over 2 devices, and 4 would sum the "
        "shares in another order: resume it on 2 devices (--host_devices=2)."
    )
    regroup.check_devices({"devices": np.int64(2), "shares": np.int64(1)}, devices=4, shares=1)


def test_closed_loop_errors_of_a_failed_save_are_left_unsaid(tmp_path):
    """A disk of 48 KB (a tmpfs) ended in the full-disk sentence and then orbax's "RuntimeError:
    Event loop is closed" tracebacks (tensorstore's callbacks, unraisable): from a save on,
    those alone are left unsaid."""
    seen = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "unraisablehook", seen.append)
        checkpoints.Checkpoint(tmp_path / "cell0").save(1, {"x": np.zeros(3)}, {})
        for error in (RuntimeError("Event loop is closed"), RuntimeError("another")):
            sys.unraisablehook(types.SimpleNamespace(exc_value=error))
    assert [str(u.exc_value) for u in seen] == ["another"]


# ------------------------------------------------------------- stdout that cannot be written


class _Unwritable:
    """A stdout every write to which fails: a closed pipe (`| head -1`) or /dev/full."""

    def __init__(self, error):
        self.error = error

    def write(self, text):
        raise self.error

    def flush(self):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        BrokenPipeError(errno.EPIPE, "Broken pipe"),
        pytest.param(OSError(errno.ENOSPC, "No space left on device"), marks=pytest.mark.slow),
    ],
    ids=["closed pipe", "/dev/full"],
)
def test_a_run_whose_stdout_cannot_be_written_completes(
    error, reference, tmp_path, capsys, monkeypatch
):
    """The progress lines go nowhere, the run and its records do not: no false "a record could
    not be written", no traceback, no empty workdir. /dev/full (-m slow) takes the closed
    pipe's path, another OSError on a write: the closed pipe is its fast sibling."""
    monkeypatch.setattr(sys, "stdout", _Unwritable(error))
    assert _main(*ARGS, f"--workdir={tmp_path / 'w'}") == 0
    err = capsys.readouterr().err
    assert f"stdout cannot be written ({error.strerror})" in err and "Traceback" not in err
    _same_records(tmp_path / "w", reference)


def test_a_usage_mistake_with_stdout_closed_is_one_sentence(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)  # `>&-`: Python starts with no sys.stdout
    status = _main(*ARGS, "--config.train.num_steps=-1", f"--workdir={tmp_path / 'w'}")
    err = capsys.readouterr().err
    assert status == cli.EXIT_USAGE and err.strip() == (
        "config.train.num_steps = -1: must be an integer >= 1."
    )
    assert sys.stdout is None and not (tmp_path / "w").exists()


def test_a_sigterm_with_stdout_closed_exits_130_and_resumes(
    reference, tmp_path, capsys, monkeypatch
):
    """`>&-`: SIGTERM stops the run at the next chunk boundary with exit status 130 (stops.fail
    flushed a None stdout: AttributeError, exit 1), and --resume completes it."""
    workdir = tmp_path / "run"
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.MonkeyPatch.context() as patch:
        term = lambda: signal.raise_signal(signal.SIGTERM)  # noqa: E731 -- one call
        patch.setattr(records.MetricsRecorder, "write_rows", _after_step(200, term))
        status = _main(*ARGS, f"--workdir={workdir}")
    err = capsys.readouterr().err
    assert status == cli.EXIT_INTERRUPTED and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("Interrupted at step 200: ")
    assert _summary(workdir)["status"] == "interrupted"
    monkeypatch.undo()
    assert _main(f"--workdir={workdir}", "--resume") == 0
    capsys.readouterr()
    _same_records(workdir, reference)
