"""Workdir files: JSON that stays valid, arrays that merge, claims with verdicts."""

import json
import math

import numpy as np

from landscape import records


def test_workdir_files(tmp_path):
    w = records.Workdir(tmp_path / "run")
    w.append_metrics([{"step": 0, "loss": float("nan"), "x": np.float32(1.5)}])
    w.append_metrics([{"step": 1, "loss": 0.25, "x": np.int64(2)}])
    rows = [json.loads(line) for line in open(w.path / "metrics.jsonl")]
    assert rows == [{"step": 0, "loss": None, "x": 1.5}, {"step": 1, "loss": 0.25, "x": 2}]
    w.save_arrays(a=np.arange(3))
    w.save_arrays(b=np.ones((2, 2)))
    saved = np.load(w.path / "arrays.npz")
    assert set(saved.files) == {"a", "b"} and saved["a"].tolist() == [0, 1, 2]
    claims = [
        records.Claim("x > 1", 1.5, "> 1", True, "eq. 1"),
        records.Claim("y < 0", math.inf, "< 0", False),
    ]
    summary = w.write_summary(claims, timing={"run_seconds": 0.1})
    on_disk = json.load(open(w.path / "summary.json"))
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
