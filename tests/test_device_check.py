"""experiments/bench/device_check.py: the device check runs its rows fastest first within a budget,
skips with a note what does not fit, stops what overruns, and writes its rows as JSON and as a
markdown table (run in-process, at a budget of seconds)."""

import json
import time

from experiments.bench import device_check
from landscape.scan_snap import text


def test_a_tiny_budget_skips_every_row_with_a_note(tmp_path, capsys):
    rows = device_check.check(0.5, tmp_path, trap=True)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("device check on cpu (cpu,") and "budget 0 s" in printed[0]
    names = [r.name for r in device_check.rows(trap=True)]
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
        device_check._run(check, ["-c", "import time; time.sleep(60)"])

    chosen = [
        device_check.Row("huge", "a day", {"cpu": 86400, "gpu": 86400}, quick),
        device_check.Row("slow", "a minute", {"cpu": 0.2, "gpu": 0.2}, overrun),
        device_check.Row("quick", "a moment", {"cpu": 0.1, "gpu": 0.1}, quick),
    ]
    start = time.perf_counter()
    rows = device_check.check(2.0, tmp_path, chosen=chosen)
    assert time.perf_counter() - start < 10  # the sleeping process was stopped at ~2 s
    assert [r["row"] for r in rows] == ["quick", "slow", "huge"]
    assert rows[0] == {"row": "quick", "wall_seconds": 0.01}
    assert rows[1]["stopped"].startswith("at the budget, after ")
    assert rows[2]["skipped"].startswith("needs ~86400 s, ")
    assert "| quick | 0.01 |  |  |  |" in (tmp_path / "rows.md").read_text()


def test_the_synthetic_corpus_has_wikitext2s_size(tmp_path):
    folder = device_check.synthetic_corpus(tmp_path / "wt")
    assert text.missing_splits_message(folder, ("valid", "test")) is None
    words = (folder / "valid.txt").read_text().split()
    assert len(words) == 217_000 and 5000 < len(set(words)) <= 12000
