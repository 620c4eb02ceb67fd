"""Workdir files: JSON that stays valid, arrays that merge, claims with verdicts."""

import hashlib
import json
import math
import os

import numpy as np
import pytest

from landscape.engine import records


def test_workdir_files(tmp_path):
    w = records.Workdir(tmp_path / "run")
    w.append_metrics([{"step": 0, "loss": float("nan"), "x": np.float32(1.5)}])
    w.append_metrics([{"step": 1, "loss": 0.25, "x": np.int64(2)}])
    rows = [json.loads(line) for line in (w.path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 0, "loss": None, "x": 1.5}, {"step": 1, "loss": 0.25, "x": 2}]
    w.save_arrays(a=np.arange(3))
    w.save_arrays(b=np.ones((2, 2)))
    with np.load(w.path / "arrays.npz") as saved:
        assert set(saved.files) == {"a", "b"} and saved["a"].tolist() == [0, 1, 2]
    claims = [
        records.Claim("x > 1", 1.5, "> 1", True, "eq. 1"),
        records.Claim("y < 0", math.inf, "< 0", False),
    ]
    summary = w.write_summary(claims, timing={"run_seconds": 0.1})
    on_disk = json.loads((w.path / "summary.json").read_text())
    assert on_disk == summary and on_disk["reproduced"] == 1 and on_disk["total"] == 2
    assert (
        on_disk["claims"][1]["measured"] is None
        and on_disk["claims"][1]["verdict"] == "NOT reproduced"
    )
    assert "1/2 claims reproduced" in records.format_claims(claims)


def test_new_workdirs_do_not_collide(tmp_path):
    a, b = records.Workdir.new("x", root=tmp_path), records.Workdir.new("x", root=tmp_path)
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()
    assert not (a.path / "figures").exists()  # made when a figure is drawn
    assert a.figure_path("loss").parent.is_dir()


def test_a_claim_set_that_raises_is_reported_not_raised():
    def broken():
        return [records.claim("fine", 1, 1, True)] + [1 / 0]

    (claim,) = records.evaluated("grad_norm", broken)
    assert not claim.passed and "could not be evaluated" in claim.claim
    assert claim.measured.startswith("ZeroDivisionError")
    assert records.evaluated("ok", lambda: [records.claim("fine", 1, 1, True)])[0].passed


def _earlier_run(path):
    """A workdir as a run leaves it: records, a table, a text report, a figure, a checkpoint."""
    w = records.Workdir(path)
    w.write_config({"name": "x"})
    w.append_metrics([{"step": 0, "loss": 1.0}])
    w.save_arrays(a=np.arange(3))
    w.save_table("table", [{"a": 1}])
    w.write_text("report.txt", "text")
    w.figure_path("loss").write_bytes(b"png")
    checkpoint = w.next_checkpoint()
    checkpoint.path.mkdir(parents=True)
    w.file("checkpoints/cell0/host-1.npz").write_bytes(b"state")  # entered, as a save does
    w.write_summary([])
    return w


def _user_files(path):
    (path / "notes.txt").write_text("my notes")
    (path / "data.csv").write_text("x,y\n")
    (path / "figures" / "sketch.png").write_bytes(b"mine")


def test_overwrite_removes_what_runs_wrote_and_nothing_else(tmp_path):
    path = tmp_path / "run"
    _earlier_run(path)
    assert records.others(path) == []
    _user_files(path)
    assert records.others(path) == ["data.csv", "notes.txt", "figures/sketch.png"]
    with pytest.raises(records.WorkdirError, match=r"holds files no run wrote \(data.csv, notes"):
        records.Workdir.open(path, overwrite=True)
    assert (path / "config.json").exists()  # refused before anything was removed
    fresh = records.Workdir.open(path, overwrite=True, keep_others=True)
    left = sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
    assert left == [".lock", "data.csv", "figures", "figures/sketch.png", "notes.txt"]
    assert (path / "notes.txt").read_text() == "my notes"
    fresh.write_config({"name": "y"})  # the new run's manifest lists its own files only
    assert records.read_manifest(path) == ["config.json"]


def test_overwrite_of_a_clean_run_folder_leaves_it_empty(tmp_path):
    path = tmp_path / "run"
    _earlier_run(path)
    (path / ".arrays.npz.tmp").write_bytes(b"half")  # what a killed write leaves
    with records.Workdir.open(path, overwrite=True):
        assert [p.name for p in path.iterdir()] == [".lock"]  # the lock, held by the new run
    assert list(path.iterdir()) == []  # its file goes with it


def test_a_folder_without_a_manifest_owns_nothing(tmp_path):
    """A model folder's config.json (no manifest lists it) is someone else's: no mode replaces
    or removes it, and no sentence suggests a flag that would (--keep_others, --force)."""
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "plateaus.csv").write_text("a\n")
    assert records.others(tmp_path) == ["config.json", "plateaus.csv"]
    assert not records.has_records(tmp_path)
    for kwargs in ({}, {"overwrite": True}, {"overwrite": True, "keep_others": True}):
        with pytest.raises(records.WorkdirError) as refused:
            records.Workdir.open(tmp_path, **kwargs)
        sentence = str(refused.value)
        assert "config.json was not written by a run" in sentence and "move that file" in sentence
        assert "--keep_others" not in sentence and "--force" not in sentence
    with pytest.raises(records.WorkdirError, match="holds no manifest a run wrote"):
        records.Workdir.open(tmp_path, overwrite=True, force=True)
    with pytest.raises(records.WorkdirError, match="config.json was not written by a run"):
        records.Workdir(tmp_path).write_config({"name": "x"})
    assert (tmp_path / "config.json").read_text() == '{"model_type": "bert"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "plateaus.csv"]


def test_a_manifest_of_someone_else_suggests_no_force(tmp_path):
    (tmp_path / "manifest.json").write_text('{"name": "a web app", "icons": []}')
    (tmp_path / "config.json").write_text("{}")
    for kwargs in ({"overwrite": True}, {"resume": True}):
        with pytest.raises(records.WorkdirError, match="someone else's file") as refused:
            records.Workdir.open(tmp_path, **kwargs)
        assert "--force" not in str(refused.value)
    with pytest.raises(records.WorkdirError, match="holds no manifest a run wrote"):
        records.Workdir.open(tmp_path, overwrite=True, force=True)
    assert (tmp_path / "config.json").read_text() == "{}"


@pytest.mark.parametrize("where", ["/", "/etc", "home", "source", "package"])
def test_a_workdir_among_other_files_is_refused(tmp_path, monkeypatch, where):
    """The filesystem root, a system folder, the home folder and a source tree are never a
    workdir (records and checkpoints/ would land among their files)."""
    home = tmp_path / "home" / "me"
    (home / "src" / "pkg").mkdir(parents=True)
    (home / "src" / "pyproject.toml").write_text("[project]\n")
    (home / "src" / "pkg" / "__init__.py").write_text("")
    monkeypatch.setenv("HOME", str(home))
    path = {"home": home, "source": home / "src", "package": home / "src" / "pkg"}.get(where)
    with pytest.raises(records.WorkdirError, match=r"records go in a folder of their own"):
        records.check_path(path or where)
    records.check_path(home / "runs" / "a")  # a folder of its own: fine


def test_a_lock_file_of_someone_else_is_never_replaced(tmp_path):
    (tmp_path / ".lock").write_text("poetry's lock, say\n")
    with pytest.raises(records.WorkdirError, match="does not hold a process id"):
        records.Workdir.open(tmp_path)
    assert (tmp_path / ".lock").read_text() == "poetry's lock, say\n"


def test_a_manifest_that_is_not_ours_is_refused(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "manifest.json").write_text('{"name": "a user file"}')
    with pytest.raises(records.WorkdirError, match="is not a landscape manifest"):
        records.Workdir.open(tmp_path, overwrite=True)


def test_the_manifest_holds_each_files_size_and_sha256(tmp_path):
    path = tmp_path / "run"
    _earlier_run(path)
    entries = records.read_entries(path)
    for name in ("config.json", "arrays.npz", "summary.json", "table.csv", "report.txt"):
        data = (path / name).read_bytes()
        assert entries[name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    rows = (path / "metrics.jsonl").read_bytes()  # sealed with its rows: the run is complete
    assert entries["metrics.jsonl"] == {
        "size": len(rows),
        "sha256": hashlib.sha256(rows).hexdigest(),
        "rows": 1,
    }
    assert entries["figures/loss.png"]["size"] == 3  # every file of a complete run is sealed
    assert entries["checkpoints/cell0"] is None  # a checkpoint folder
    assert records.verify(path) == [
        ("arrays.npz", None),
        ("config.json", None),
        ("figures/loss.png", None),
        ("report.txt", None),
        ("summary.json", None),
        ("table.csv", None),
        ("metrics.jsonl", None),
    ]
    (path / "table.csv").write_bytes(b"a\r\n2\r\n")  # the same size, another digit
    assert dict(records.verify(path))["table.csv"] == (
        "differs from the sha256 manifest.json recorded for it"
    )


def test_overwrite_removes_the_librarys_checkpoint_files_only(tmp_path):
    """Only what the manifest lists, by exact path, and what a killed write of it left: a
    user's numeric folder, a file named like a step and a link named like one all stay."""
    path, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    w = _earlier_run(path)
    cell = w.checkpoints / "cell0"
    w.file("checkpoints/cell0/1")  # a step folder, entered before orbax writes into it
    (cell / "1" / "default").mkdir(parents=True)
    (cell / "1" / "default" / "_METADATA").write_text("{}")
    w.file("checkpoints/cell0/2")  # a step whose save was killed midway
    (cell / "2" / "default.orbax-checkpoint-tmp-17").mkdir(parents=True)
    (cell / "3.orbax-checkpoint-tmp-17").mkdir()  # a killed save of the older layout
    (cell / ".host-2.npz.tmp").write_bytes(b"half")  # a killed host write
    (cell / "my_notes.txt").write_text("mine")
    (cell / "7").write_text("a file named like a step is not orbax's folder")
    (cell / "2024").mkdir()
    (cell / "2024" / "notes.txt").write_text("a folder named like a step is not ours")
    (cell / "999").symlink_to(outside)
    mine = [f"checkpoints/cell0/{n}" for n in ("2024/notes.txt", "7", "999", "my_notes.txt")]
    assert sorted(records.others(path)) == mine
    records.Workdir.open(path, overwrite=True, keep_others=True).close()
    left = sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
    assert left == ["checkpoints", "checkpoints/cell0", "checkpoints/cell0/2024", *mine]
    assert outside.is_dir()


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/x", "", "link/x"])
def test_a_manifest_naming_a_path_outside_removes_nothing(tmp_path, name):
    path, outside = tmp_path / "run", tmp_path / "outside"
    _earlier_run(path)
    outside.mkdir()
    (outside / "x").write_text("not yours")
    (path / "link").symlink_to(outside)
    name = str(outside / "x") if name == "/x" else name
    (path / "manifest.json").write_text(json.dumps([*records.read_manifest(path), name]))
    with pytest.raises(records.WorkdirError, match="a path outside the workdir: it is not a"):
        records.Workdir.open(path, overwrite=True, keep_others=True)
    with pytest.raises(records.WorkdirError, match="a path outside the workdir"):
        records.remove_records(path)
    assert (outside / "x").read_text() == "not yours" and (path / "config.json").exists()


def test_one_writer_per_workdir(tmp_path):
    path = tmp_path / "run"
    _earlier_run(path)
    first = records.Workdir.open(path, resume=True)
    assert (path / records.LOCK).read_text() == f"{os.getpid()}\n"
    sentence = rf"--workdir={path} is in use by process {os.getpid()} \(it holds"
    for kwargs in ({"resume": True}, {"overwrite": True}):
        with pytest.raises(records.WorkdirError, match=sentence):
            records.Workdir.open(path, **kwargs)
    with pytest.raises(records.WorkdirError, match=sentence):
        records.check_path(path, resume=True)
    assert (path / "config.json").exists()
    first.close()
    with records.Workdir.open(path, resume=True) as second:
        assert second.path == path
    records.check_path(path, resume=True)  # released at the end of the with block


def test_records_is_a_module_import():
    import landscape.engine.records
    import landscape.records

    assert landscape.records is landscape.engine.records
    from landscape.records import load  # noqa: F401 -- the import is the test


def test_damaged_records_are_named_in_one_sentence(tmp_path):
    w = records.Workdir(tmp_path)
    w.save_arrays(losses=np.zeros((1, 2)))
    (tmp_path / "arrays.npz").write_bytes(b"PK\x03\x04 garbled")
    with pytest.raises(records.WorkdirError, match=r"arrays.npz cannot be read as arrays \("):
        records.load(tmp_path)
    with open(tmp_path / "arrays.npz", "wb") as f:
        np.savez(f, losses=np.array([object()], dtype=object))
    with pytest.raises(records.WorkdirError, match=r"arrays.npz cannot be read as arrays \("):
        records.load(tmp_path)
    (tmp_path / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(records.WorkdirError, match=r"config.json is not valid JSON \("):
        records.load_config_json(tmp_path / "config.json")


def test_a_complete_run_seals_every_file_before_its_summary_says_so(tmp_path, capsys):
    """The final sealing comes before summary.json's "complete": a kill between them leaves a
    run that says "running". A complete run with a file left unsealed (what a kill during the
    sealing left when it came after) is BAD in `records check`, a row appended since too."""
    from experiments import records as records_cli

    w = records.Workdir(tmp_path)
    w.write_config({"name": "x"})
    w.write_status("running")
    w.append_metrics([{"step": 1, "loss": 1.0}])
    w.figure_path("loss").write_bytes(b"png")
    w.seal_all = lambda: (_ for _ in ()).throw(SystemExit("killed"))  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        w.write_summary([])
    assert w.read_summary()["status"] == "running"
    del w.seal_all
    w.write_summary([])
    entries = records.read_entries(tmp_path)
    assert all(isinstance(entries[n], dict) for n in ("metrics.jsonl", "figures/loss.png"))
    assert records_cli.main(["records", "check", str(tmp_path)]) == 0
    capsys.readouterr()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["files"]["metrics.jsonl"] = manifest["files"]["figures/loss.png"] = None
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "loss": 0.5}\n')
    assert records_cli.main(["records", "check", str(tmp_path)]) == 1
    bad = [line for line in capsys.readouterr().out.splitlines() if line.startswith("BAD")]
    assert [line.split(":")[0] for line in bad] == ["BAD  figures/loss.png", "BAD  metrics.jsonl"]
    assert all("not sealed in manifest.json, though summary.json says" in line for line in bad)
