"""engine/study.py: the pieces the papers' studies share (docs/architecture.md): the checks'
sentences, the programs trained in turn with their arrays saved under their prefixes, the points
probed in order with a line each, the tables and text written."""

from __future__ import annotations

import csv

import ml_collections
import numpy as np
import pytest

from landscape.engine import config as config_lib
from landscape.engine import records, study


def _cfg(
    params_every: int = 10, track_every: int = 5, claims: str = "curvature"
) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        dict(claims=claims, train=dict(params_every=params_every, track_every=track_every))
    )


def test_the_checks_name_the_field_and_both_fields():
    study.require_every(_cfg(), "curvature", "why")
    with pytest.raises(config_lib.ConfigError) as found:
        study.require_every(_cfg(track_every=0), "curvature", "λ is tracked")
    assert str(found.value) == (
        "config.train.track_every = 0: must be > 0 for experiment = 'curvature' "
        "(train.params_every and train.track_every > 0: λ is tracked)."
    )
    study.require_every(_cfg(params_every=0), "eos", "why", ("track_every",))
    study.require_own_claims(_cfg(claims="none"), "curvature")
    with pytest.raises(config_lib.ConfigError, match="'curvature' or 'none'"):
        study.require_own_claims(_cfg(claims="fig3"), "curvature")


class _Result:
    def __init__(self, value: float) -> None:
        self.value = value

    def arrays(self, prefix: str = "", complete: bool = False) -> dict[str, np.ndarray]:
        assert complete
        return {f"{prefix}losses": np.full(2, self.value)}


class _Workdir:
    def __init__(self) -> None:
        self.saved: dict[str, np.ndarray] = {}

    def save_arrays(self, **arrays: np.ndarray) -> None:
        self.saved.update(arrays)


def test_programs_announce_train_and_save_each_in_turn():
    lines: list[str] = []
    workdir = _Workdir()
    cells = [{"optim.lr": 0.1}, {"optim.lr": 0.3}]
    trained = []
    for i, group in study.programs(
        cells,
        lambda fields: {"result": _Result(fields["optim.lr"])},
        workdir,
        lines.append,
    ):
        assert set(workdir.saved) == {f"cell{j}_losses" for j in range(i + 1)}  # saved first
        trained.append(group["result"].value)
    assert trained == [0.1, 0.3]
    assert lines == ["program optim.lr=0.1", "program optim.lr=0.3"]
    one = _Workdir()
    [(_, result)] = study.programs([{}], lambda _: _Result(2.0), one, lines.append, lambda r: r)
    assert list(one.saved) == ["losses"] and result.value == 2.0 and len(lines) == 2


def test_probe_each_in_order_with_a_line_each(tmp_path):
    lines: list[str] = []
    assert study.probe_each([3, 1, 2], lambda x: x * x, lines.append, lambda x: f"at {x}") == [
        9,
        1,
        4,
    ]
    assert lines == ["at 3", "at 1", "at 2"]
    assert study.probe_each([1], lambda x: -x, None) == [-1]
    workdir = records.Workdir(tmp_path)
    study.write(workdir, {"points": [{"step": 1, "loss": 0.5}]}, ["one", "two"])
    with open(tmp_path / "points.csv") as f:
        assert list(csv.DictReader(f)) == [{"step": "1", "loss": "0.5"}]
    assert (tmp_path / "curvature.txt").read_text() == "one\n\ntwo\n"  # write_text ends a line
