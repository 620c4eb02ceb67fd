"""Faults where records could mix or vanish without a word: stale checkpoints of another run, a
manifest removed or garbled, steps and files deleted, rows appended, user folders and links named
like steps, a folder where a record goes, the lock file deleted or replaced. Each case ends in
records bit-identical to an uninterrupted run's, or in one sentence (exit 2, no traceback) that
leaves the workdir as it was.

In-process through `cli.main`, on copies of the stopped run of tests/engine/test_faults.py (scan &
snap, 400 steps, stopped at step 200) and of a two-program run stopped in its second program.
"""

import json
import os
import pathlib
import shutil

import pytest

from experiments import cli
from experiments import records as records_cli
from landscape.engine import records, training
from tests import children
from tests.engine.test_faults import (
    ARGS,
    ROOT,
    _files,
    _main,
    _one_sentence,
    _same_records,
    session_runs,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """(an uninterrupted run's workdir, a workdir of the same run stopped at step 200)."""
    return session_runs(tmp_path_factory, request)


@pytest.fixture
def stopped(runs, tmp_path):
    """A copy of the stopped run, for one case to damage."""
    return pathlib.Path(shutil.copytree(runs[1], tmp_path / "run"))


def _check(path, capsys):
    """`records check` on `path`: (exit status, its lines)."""
    status = records_cli.main(["records", "check", str(path)])
    return status, capsys.readouterr().out.splitlines()


def _bad(lines):
    return [line for line in lines if line.startswith("BAD")]


# ------------------------------------------------------------- a checkpoint belongs to its records


def test_a_fresh_run_never_restores_a_checkpoint_it_did_not_write(runs, stopped, capsys):
    """Only checkpoints/ is left of an earlier run: a fresh run is refused, --resume has no
    manifest to tie them to, --overwrite names them as files no run (of a manifest) wrote, and
    --keep_others too is refused (the new run would save beside them); moved away, the run is
    the uninterrupted one."""
    for name in ("config.json", "metrics.jsonl", "summary.json", "manifest.json", "arrays.npz"):
        (stopped / name).unlink()
    before = _files(stopped)
    args = [*ARGS, "--config.optim.lr_z=0.5", f"--workdir={stopped}"]
    _one_sentence(_main(*args), capsys, "already holds the records of an earlier run")
    _one_sentence(_main(f"--workdir={stopped}", "--resume"), capsys, "holds no manifest.json")
    _one_sentence(_main(*args, "--overwrite"), capsys, "checkpoints/cell0/host-200.npz")
    sentence = _one_sentence(_main(*args, "--overwrite", "--keep_others"), capsys)
    assert "holds checkpoints that no run of its manifest wrote" in sentence, sentence
    assert "checkpoints/cell0/200" in sentence and "never removed, nor restored" in sentence
    assert _files(stopped) == before
    shutil.move(stopped / "checkpoints", stopped.parent / "old_checkpoints")
    assert _main(*ARGS, f"--workdir={stopped}", "--overwrite", "--keep_others") == 0
    assert "resumed" not in capsys.readouterr().out
    _same_records(stopped, runs[0])


def test_a_resume_without_a_manifest_is_refused_whatever_config_json_says(stopped, capsys):
    """manifest.json removed and the learning rate edited in config.json: the checkpoints
    cannot be tied to the records, so nothing is continued at another learning rate."""
    (stopped / "manifest.json").unlink()
    config = stopped / "config.json"
    config.write_text(config.read_text().replace('"lr_z": 1.0', '"lr_z": 0.5'))
    before = _files(stopped)
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "holds no manifest.json", "another --workdir")
    assert _files(stopped) == before


def test_a_checkpoint_saved_with_another_config_is_refused(stopped, capsys):
    """config.json edited and its manifest entry sealed again to match: the checkpoint still
    carries the digest of the config it was saved with."""
    config = stopped / "config.json"
    config.write_text(config.read_text().replace('"lr_z": 1.0', '"lr_z": 0.5'))
    manifest = json.loads((stopped / "manifest.json").read_text())
    manifest["files"]["config.json"] = None
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "host-200.npz was saved by a run of another config")


def test_a_checkpoint_of_another_run_is_refused(stopped, capsys):
    manifest = json.loads((stopped / "manifest.json").read_text())
    manifest["run"] = "0" * 32
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, "host-200.npz was saved by another run (run id ")


@pytest.mark.parametrize("deleted", ["checkpoints/cell0/200", "checkpoints/cell0/host-200.npz"])
def test_a_deleted_step_or_host_record_is_named(stopped, capsys, deleted):
    target = stopped / deleted
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    status, lines = _check(stopped, capsys)
    assert status == 1 and any(deleted in line and "is missing" in line for line in _bad(lines))
    before = _files(stopped)
    _one_sentence(_main(f"--workdir={stopped}", "--resume"), capsys, deleted, "is missing")
    assert _files(stopped) == before


# ------------------------------------------------------------------------------- sealed records


@pytest.fixture
def finished(runs, tmp_path):
    """A copy of the uninterrupted run."""
    return pathlib.Path(shutil.copytree(runs[0], tmp_path / "run"))


def test_a_complete_run_seals_every_file(finished, capsys):
    entries = records.read_entries(finished)
    files = [p.relative_to(finished).as_posix() for p in finished.rglob("*") if p.is_file()]
    files.remove("manifest.json")
    assert sorted(files) == sorted(n for n, e in entries.items() if e is not None)
    assert entries["metrics.jsonl"]["rows"] == len(
        (finished / "metrics.jsonl").read_text().splitlines()
    )
    status, lines = _check(finished, capsys)
    assert status == 0 and not _bad(lines), lines


def test_a_row_appended_to_a_complete_run_is_reported(finished, capsys):
    metrics = finished / "metrics.jsonl"
    rows = metrics.read_text().splitlines()
    metrics.write_text("\n".join([*rows, rows[-1]]) + "\n")  # a valid-looking row
    status, lines = _check(finished, capsys)
    assert status == 1
    assert _bad(lines) == [
        f"BAD  metrics.jsonl: holds {len(rows) + 1} rows where manifest.json recorded {len(rows)}"
    ]


def test_deleted_checkpoints_and_cut_rows_of_a_complete_run_are_reported(finished, capsys):
    shutil.rmtree(finished / "checkpoints")
    metrics = finished / "metrics.jsonl"
    rows = metrics.read_text().splitlines()
    metrics.write_text("\n".join(rows[:-10]) + "\n")
    status, lines = _check(finished, capsys)
    bad = _bad(lines)
    assert status == 1
    assert "BAD  checkpoints/cell0/host-400.npz: is missing" in bad, bad
    assert "BAD  checkpoints/cell0/400/: is missing" in bad, bad
    assert any(line.startswith("BAD  metrics.jsonl: holds ") for line in bad), bad


def test_a_file_no_run_wrote_is_noted_and_not_bad(finished, capsys):
    (finished / "notes.txt").write_text("mine")
    status, lines = _check(finished, capsys)
    assert status == 0 and "ok   notes.txt (no run wrote it)" in lines, lines


# --------------------------------------------------------------------------- two programs (C)


def _c_args(workdir):
    return [
        f"--config={ROOT / 'configs/syn_small.py'}",
        "--config.sweep.data.num_last=[2,3]",
        "--config.claims=none",
        "--config.train.num_steps=100",
        "--config.train.chunk_steps=20",
        "--checkpoint_seconds=0",
        f"--workdir={workdir}",
    ]


@pytest.fixture(scope="module")
def two_programs(tmp_path_factory):
    """(a two-program run's workdir, the same run stopped in its second program at step 60)."""
    root = tmp_path_factory.mktemp("two_programs")
    assert _main(*_c_args(root / "reference")) == 0
    write_rows, started = records.MetricsRecorder.write_rows, []

    def stop_at_60_of_the_second(self, first_step, loss, *rest, **kwargs):
        write_rows(self, first_step, loss, *rest, **kwargs)
        started.append(loss is None)
        if sum(started) == 2 and loss is not None and first_step >= 40:
            training.request_stop()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records.MetricsRecorder, "write_rows", stop_at_60_of_the_second)
        assert _main(*_c_args(root / "stopped")) == cli.EXIT_INTERRUPTED
    return root / "reference", root / "stopped"


@pytest.fixture
def c_stopped(two_programs, tmp_path):
    return pathlib.Path(shutil.copytree(two_programs[1], tmp_path / "c"))


@pytest.mark.parametrize("deleted", ["checkpoints/cell0", "checkpoints/cell0/host-100.npz"])
def test_a_lost_first_program_is_named_not_trained_twice(c_stopped, capsys, deleted):
    """The first program's checkpoint folder (or its host records) deleted: resuming would
    retrain it and write its rows twice (or meet orbax's step 100 again); it is named instead."""
    target = c_stopped / deleted
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    before = _files(c_stopped)
    status = _main(f"--workdir={c_stopped}", "--resume")
    _one_sentence(status, capsys, "checkpoints/cell0/host-100.npz is missing", "--overwrite")
    assert _files(c_stopped) == before
    assert records_cli.main(["records", "check", str(c_stopped)]) == 1


def test_a_manifest_that_drops_the_first_program_is_refused(c_stopped, capsys):
    manifest = json.loads((c_stopped / "manifest.json").read_text())
    manifest["files"] = {
        k: v for k, v in manifest["files"].items() if not k.startswith("checkpoints/cell0/")
    }
    (c_stopped / "manifest.json").write_text(json.dumps(manifest))
    status = _main(f"--workdir={c_stopped}", "--resume")
    _one_sentence(status, capsys, "cell0 holds no sealed checkpoint, but checkpoints/cell1")


def test_two_programs_resume_bit_identical(two_programs, c_stopped, capsys):
    assert _main(f"--workdir={c_stopped}", "--resume") == 0
    out = capsys.readouterr().out
    assert "resumed at step 100/100" in out and "resumed at step 60/100" in out, out
    _same_records(c_stopped, two_programs[0])


# ------------------------------------------------------------------ only what the library wrote


def test_a_users_numeric_folder_and_a_link_named_like_a_step_are_never_removed_or_followed(
    runs, stopped, capsys, tmp_path
):
    """A user's folder named like a step (2024/) and a link named like one (999 -> elsewhere)
    in a checkpoint folder: a resume completes the same records around them and leaves no lock
    file; --overwrite refuses in one sentence naming both; --keep_others overwrites the run's
    files only, the folder kept and the link neither followed nor removed. (One stopped run for
    both entries: each resume and overwrite costs a 200- or 400-step run.)"""
    notes = stopped / "checkpoints" / "cell0" / "2024" / "notes.txt"
    notes.parent.mkdir()
    notes.write_text("mine")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "data.txt").write_text("not yours")
    link = stopped / "checkpoints" / "cell0" / "999"
    link.symlink_to(target)
    assert not (runs[0] / records.LOCK).exists() and not (runs[1] / records.LOCK).exists()
    assert _main(f"--workdir={stopped}", "--resume") == 0
    capsys.readouterr()
    assert not (stopped / records.LOCK).exists()  # the lock file goes when the run ends
    _same_records(stopped, runs[0])
    assert notes.read_text() == "mine"
    before = _files(stopped)
    status = _main(*ARGS, f"--workdir={stopped}", "--overwrite")
    _one_sentence(status, capsys, "2024/notes.txt", "cell0/999")
    assert _files(stopped) == before
    assert _main(*ARGS, f"--workdir={stopped}", "--overwrite", "--keep_others") == 0
    capsys.readouterr()
    assert notes.read_text() == "mine"
    assert link.is_symlink() and (target / "data.txt").read_text() == "not yours"
    _same_records(stopped, runs[0])


@pytest.mark.parametrize("mode", ["--resume", "--overwrite"])
def test_a_folder_where_summary_json_goes_is_one_sentence(stopped, capsys, mode):
    summary = stopped / "summary.json"
    summary.unlink()
    summary.mkdir()
    before = _files(stopped)
    args = [f"--workdir={stopped}", mode] + (ARGS if mode == "--overwrite" else [])
    _one_sentence(_main(*args), capsys, "summary.json is a folder", "move it out of the workdir")
    assert _files(stopped) == before and summary.is_dir()
    status, lines = _check(stopped, capsys)
    assert status == 1 and "BAD  summary.json: is a folder, where the run wrote a file" in lines


def test_a_garbled_manifest_has_a_way_out(runs, stopped, capsys):
    """Every command names `--overwrite --force`, which removes the files a run writes,
    recognised by name, keeps the rest, and runs."""
    (stopped / "manifest.json").write_text('{"format": 2, "files": [')
    (stopped / "my_notes.txt").write_text("mine")
    before = _files(stopped)
    for args in (
        [f"--workdir={stopped}", "--resume"],
        [*ARGS, f"--workdir={stopped}", "--overwrite"],
    ):
        _one_sentence(_main(*args), capsys, "manifest.json cannot be read", "--overwrite --force")
    assert _files(stopped) == before
    _one_sentence(_main(*ARGS, f"--workdir={stopped}", "--force"), capsys, "--force goes with")
    assert _main(*ARGS, f"--workdir={stopped}", "--overwrite", "--force") == 0
    capsys.readouterr()
    assert (stopped / "my_notes.txt").read_text() == "mine"
    _same_records(stopped, runs[0])


# ------------------------------------------------------------------------ the lock is the process


HOLD = """\
import sys, time
from landscape.engine import records
workdir = records.Workdir.open(sys.argv[1], resume=True)  # held while it lives
print("locked", flush=True)
time.sleep(600)
"""


def test_deleting_the_lock_file_admits_no_second_writer(stopped, capsys):
    holder = children.start(HOLD, str(stopped))
    try:
        assert holder.stdout.readline().strip() == "locked"
        (stopped / records.LOCK).unlink()
        before = _files(stopped)
        for args in (
            [f"--workdir={stopped}", "--resume"],
            [*ARGS, f"--workdir={stopped}", "--overwrite"],
        ):
            _one_sentence(_main(*args), capsys, "in use by another process (its .lock")
        assert _files(stopped) == before
    finally:
        holder.kill()
        holder.communicate(timeout=60)


def test_a_lock_that_is_not_a_file_is_one_sentence(stopped, capsys):
    (stopped / records.LOCK).mkdir()
    before = _files(stopped)
    status = _main(f"--workdir={stopped}", "--resume")
    _one_sentence(status, capsys, ".lock is a folder, not the lock file a run writes")
    assert _files(stopped) == before


def test_a_record_entered_but_not_written_yet_is_not_reported_missing(finished, capsys):
    """Beside a running writer: a figure is entered in the manifest before it is drawn (and a
    sealed record is unsealed before it is written again), so `records check` never reads a
    transient "figures/<name>.png is missing" or "differs"."""
    workdir = records.Workdir(finished)
    workdir.figure_path("being_drawn")
    workdir.file("summary.json")  # about to be written again
    status, lines = _check(finished, capsys)
    assert status == 0 and not _bad(lines), lines
    assert not any("being_drawn" in line for line in lines)
    assert records.read_entries(finished)["summary.json"] is None


def test_a_workdir_of_the_earlier_manifest_resumes_and_overwrites(runs, stopped, capsys):
    """A manifest as the version before listed a checkpoint (its files, not the step's folder;
    no run id): a resume restores it and ends bit-identical; an overwrite removes it whole."""
    manifest = json.loads((stopped / "manifest.json").read_text())
    del manifest["run"], manifest["files"]["checkpoints/cell0/200"]
    (stopped / "manifest.json").write_text(json.dumps(manifest))
    copy = pathlib.Path(shutil.copytree(stopped, stopped.parent / "copy"))
    assert _main(f"--workdir={stopped}", "--resume") == 0
    assert "resumed at step 200/400" in capsys.readouterr().out
    _same_records(stopped, runs[0])
    assert _main(*ARGS, f"--workdir={copy}", "--overwrite") == 0
    capsys.readouterr()
    _same_records(copy, runs[0])
    assert sorted(p.name for p in (copy / "checkpoints" / "cell0").iterdir()) == [
        "400",
        "host-400.npz",
    ]


@pytest.mark.parametrize("target", ["/dev/zero", "elsewhere"])
def test_a_link_where_metrics_jsonl_goes_is_named_never_read(stopped, capsys, target):
    """metrics.jsonl replaced by a link (to /dev/zero, or to a file of yours elsewhere): the
    manifest is fine, the file is what is wrong; nothing reads, writes or removes through it."""
    if target == "elsewhere":
        target = stopped.parent / "mine.jsonl"
        target.write_text("my rows\n")
    metrics = stopped / "metrics.jsonl"
    metrics.unlink()
    metrics.symlink_to(target)
    status, lines = _check(stopped, capsys)
    assert status == 1 and _bad(lines) == [
        f"BAD  metrics.jsonl: is a link to {target}, where the run wrote a file"
    ]
    for args in (
        [f"--workdir={stopped}", "--resume"],
        [*ARGS, f"--workdir={stopped}", "--overwrite"],
    ):
        _one_sentence(_main(*args), capsys, f"metrics.jsonl is a link to {target}, where a run")
    assert metrics.is_symlink() and os.readlink(metrics) == str(target)
    if target != "/dev/zero":
        assert target.read_text() == "my rows\n"
