"""experiments/bench/device_check_rows.py: the device check runs its rows fastest first within a
budget, skips with a note what does not fit, stops what overruns, and writes its rows as JSON
and as a markdown table (run in-process, at a budget of seconds)."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from experiments.bench import device_check_rows
from landscape.scan_snap import text

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_tiny_budget_skips_every_row_with_a_note(tmp_path, capsys):
    rows = device_check_rows.check(0.5, tmp_path, trap=True)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("device check on cpu (cpu,") and "budget 0 s" in printed[0]
    names = [r.name for r in device_check_rows.rows(trap=True)]
    assert [r["row"] for r in rows][-1] == "markov_trap_gpu"  # the optional study last
    assert sorted(r["row"] for r in rows) == sorted(names)
    for row in rows:  # nothing fits in half a second: each says what it needs
        assert row["skipped"].startswith("needs ~") and row["what"]
    report = json.loads((tmp_path / "rows.json").read_text())
    assert report["device"].startswith("cpu") and report["rows"] == rows
    table = (tmp_path / "rows.md").read_text().splitlines()
    assert table[0].startswith("Device check on cpu") and table[2].startswith("| row |")
    assert len(table) == 4 + len(rows) and "skipped needs ~16 s" in table[4]


def test_rows_run_fastest_first_and_the_budget_stops_an_overrun(tmp_path):
    def quick(check):
        check.add("quick", wall_seconds=0.01)

    def overrun(check):  # a process that would take a minute, stopped at the deadline
        device_check_rows._run(check, ["-c", "import time; time.sleep(60)"])

    chosen = [
        device_check_rows.Row("huge", "a day", {"cpu": 86400, "gpu": 86400}, quick),
        device_check_rows.Row("slow", "a minute", {"cpu": 0.2, "gpu": 0.2}, overrun),
        device_check_rows.Row("quick", "a moment", {"cpu": 0.1, "gpu": 0.1}, quick),
    ]
    start = time.perf_counter()
    rows = device_check_rows.check(2.0, tmp_path, chosen=chosen)
    assert time.perf_counter() - start < 10  # the sleeping process was stopped at ~2 s
    assert [r["row"] for r in rows] == ["quick", "slow", "huge"]
    assert rows[0] == {"row": "quick", "wall_seconds": 0.01}
    assert rows[1]["stopped"].startswith("at the budget, after ")
    assert rows[2]["skipped"].startswith("needs ~86400 s, ")
    assert "| quick | 0.01 |  |  |  |" in (tmp_path / "rows.md").read_text()


def test_the_synthetic_corpus_has_wikitext2s_size(tmp_path):
    folder = device_check_rows.synthetic_corpus(tmp_path / "wt")
    assert text.missing_splits_message(folder, ("valid", "test")) is None
    words = (folder / "valid.txt").read_text().split()
    assert len(words) == 217_000 and 5000 < len(set(words)) <= 12000


@pytest.mark.parametrize(
    "command",
    [["experiments.device_check"], ["experiments.benchmark", "--only=device"]],
    ids=["device_check", "benchmark"],
)
def test_the_commands_run_the_package_s_check(command, tmp_path):
    """`python -m experiments.device_check` and `... benchmark --only=device` are thin entries
    over experiments/bench/: their flags are defined once, and at a zero budget every row is
    skipped with a note."""
    done = subprocess.run(
        [sys.executable, "-m", *command, "--budget=0", f"--device_out={tmp_path}"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("device check on ")
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert rows and all(row["skipped"].startswith("needs ~") for row in rows)


def test_the_compile_settings_row_at_a_tiny_size(tmp_path):
    """The compile-settings row on the CPU: XLA:GPU settings skipped with a note, each other
    setting a fresh process per program, the warm compilation cache compiling nothing, and its
    table's columns (D = 967 here; 1e6 in the check)."""
    from experiments.bench import compile_settings

    def tiny(check):
        compile_settings.measure(check, 1000, ("hvp",))
        compile_settings.measure(check, 1000, ("top5",), compile_settings.SETTINGS[:1])

    chosen = [device_check_rows.Row("compile_settings", "tiny", {"cpu": 1, "gpu": 1}, tiny)]
    rows = {r["row"]: r for r in device_check_rows.check(300.0, tmp_path, chosen=chosen)}
    gpu_only = [s.name for s in compile_settings.SETTINGS if s.gpu_only]
    for name in gpu_only:
        assert rows[f"compile_settings:{name}"]["skipped"].startswith("an XLA:GPU setting")
    measured = [
        "default:hvp",
        "compilation_cache_cold:hvp",
        "compilation_cache_warm:hvp",
        "default:top5",
    ]
    assert sorted(rows) == sorted([f"compile_settings:{n}" for n in gpu_only + measured])
    for name in measured:
        row = rows[f"compile_settings:{name}"]
        assert row["D"] == 967 and row["first_seconds"] > row["run_seconds"] > 0, row
    assert rows["compile_settings:default:hvp"]["compiled"] >= 1
    cold, warm = (
        rows["compile_settings:compilation_cache_cold:hvp"],
        rows["compile_settings:compilation_cache_warm:hvp"],
    )
    assert warm["compiled"] == 0 and warm["loaded"] == cold["compiled"] > 0
    assert rows["compile_settings:default:top5"]["compiled"] >= 1
    table = (tmp_path / "compile_settings.md").read_text().splitlines()
    assert table[0] == "| " + " | ".join(compile_settings.COLUMNS) + " |"
    assert len(table) == 2 + len(rows)
    assert table[2].startswith("| autotune_level_0 |  |  |") and "XLA:GPU" in table[2]
    assert any(line.startswith("| compilation_cache_warm | hvp | 967 | ") for line in table)
    assert all(line.count("|") == len(compile_settings.COLUMNS) + 1 for line in table)


def test_rows_and_compile_settings_are_chosen_by_name():
    from absl import app

    from experiments.bench import compile_settings

    assert device_check_rows.chosen_rows(None) is None
    assert [r.name for r in device_check_rows.chosen_rows(["compile_settings"])] == [
        "compile_settings"
    ]
    with pytest.raises(app.UsageError, match=r"--device_rows=nope: must be among main_job, "):
        device_check_rows.chosen_rows(["nope", "main_job"])
    assert compile_settings.chosen(None) == compile_settings.SETTINGS
    picked = compile_settings.chosen(["compilation_cache", "default"])
    assert [s.name for s in picked] == ["default", "compilation_cache"]
    with pytest.raises(ValueError, match=r"compile settings \['fast'\]: must be among default, "):
        compile_settings.chosen(["fast"])
    assert compile_settings.xla_flags({"xla_gpu_autotune_level": 0, "xla_a": False}) == (
        "--xla_gpu_autotune_level=0 --xla_a=false"
    )


def test_the_compile_group_measures_the_programs_train_would_compile():
    """compile_timing times each program `training.train` hands to its hook, through the
    engine's public `watching_programs`, and the run ends there (the hook gone after)."""
    from configs import syn_small
    from experiments.bench import compile_timing
    from landscape.engine import training
    from landscape.scan_snap import experiment

    cfg = syn_small.get_config()
    rows = compile_timing.programs_of(lambda: experiment.train_group(cfg, {}, progress=None))
    assert sorted(rows) == ["chunk", "first_snapshot", "init"]
    for row in rows.values():
        assert row["compile_seconds"] > 0 and row["optimized_instructions"] > 0
    assert compile_timing.total(rows)["seconds"] > 0 and not training._programs_hooks


def test_the_device_group_runs_alone_and_names_are_checked_first():
    """`--only=device` with another group, or a group that does not exist, is a usage error
    before any backend starts (the device check takes the accelerator in fresh processes)."""
    for only, said in [
        ("device,compile", "--only=device runs alone"),
        ("devices", "--only=devices: must be one of scan_snap,"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "experiments.benchmark", f"--only={only}"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and said in done.stderr, done.stderr
