"""A run's workdir: the only file I/O of the library.

        <workdir>/config.json     the resolved config
        <workdir>/metrics.jsonl   one JSON object per run per logged step (pandas.read_json(lines=True))
        <workdir>/arrays.npz      loss curves, snapshots (attention maps, Z rows), final values
        <workdir>/summary.json    the paper's claims: statement, measured value, expected, verdict
        <workdir>/figures/*.png   paper-style plots
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import math
import pathlib
from typing import Any

import numpy as np


CLAIM_KINDS = ("paper", "sanity")


@dataclasses.dataclass
class Claim:
    """One claim checked against a measurement.

    kind "paper": a claim of the paper (or of its notes) that the figure reproduces or not;
    kind "sanity": a check of the run itself (e.g. every seed's final loss >= the Bayes loss),
    reported apart and never counted among the paper's claims.
    """
    claim: str
    measured: Any
    expected: Any
    passed: bool
    source: str = ""
    kind: str = "paper"

    @property
    def verdict(self) -> str:
        return "reproduced" if self.passed else "NOT reproduced"


def claim(statement: str, measured: Any, expected: Any, passed, source: str = "",
          kind: str = "paper") -> Claim:
    """A Claim with `passed` coerced to a Python bool (numpy bools are common here)."""
    if kind not in CLAIM_KINDS:
        raise ValueError(f"claim kind {kind!r}: must be one of {', '.join(CLAIM_KINDS)}")
    return Claim(statement, measured, expected, bool(passed), source, kind)


def sanity(statement: str, measured: Any, expected: Any, passed, source: str = "") -> Claim:
    """A check of the run itself, reported apart from the paper's claims."""
    return claim(statement, measured, expected, passed, source, kind="sanity")


class Workdir:
    """Creates and writes the files of one experiment run."""

    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path)
        (self.path / "figures").mkdir(parents=True, exist_ok=True)

    @classmethod
    def new(cls, name: str, root: str | pathlib.Path = "runs") -> "Workdir":
        """runs/<name>/<UTC time>/ (a suffix keeps two runs in the same second apart)."""
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        path = pathlib.Path(root) / name / stamp
        suffix = 1
        while path.exists():
            path, suffix = pathlib.Path(root) / name / f"{stamp}-{suffix}", suffix + 1
        return cls(path)

    def write_config(self, config: Any) -> None:
        data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        self._write_json("config.json", data)

    def append_metrics(self, rows: list[dict[str, Any]]) -> None:
        with open(self.path / "metrics.jsonl", "a") as f:
            for row in rows:
                f.write(json.dumps(_jsonable(row)) + "\n")

    def save_arrays(self, **arrays: Any) -> None:
        """Write arrays.npz, keeping arrays saved earlier under other names."""
        file = self.path / "arrays.npz"
        merged = dict(np.load(file)) if file.exists() else {}
        merged.update({k: np.asarray(v) for k, v in arrays.items()})
        np.savez_compressed(file, **merged)

    def write_summary(self, claims: list[Claim], **extra: Any) -> dict[str, Any]:
        paper = [c for c in claims if c.kind == "paper"]
        checks = [c for c in claims if c.kind == "sanity"]
        summary = {
                "claims": [dict(dataclasses.asdict(c), verdict=c.verdict) for c in paper],
                "reproduced": sum(c.passed for c in paper),
                "total": len(paper),
                "sanity_checks": [dict(dataclasses.asdict(c), verdict=c.verdict) for c in checks],
                "sanity_passed": sum(c.passed for c in checks),
                **extra,
        }
        summary = _jsonable(summary)
        self._write_json("summary.json", summary)
        return summary

    def save_table(self, name: str, rows: list[dict[str, Any]]) -> pathlib.Path:
        """<name>.csv, one row per dict (columns: the union of keys, in first-seen order), for
        `pandas.read_csv`; nested values are written as JSON."""
        columns = list(dict.fromkeys(key for row in rows for key in row))
        path = self.path / f"{name}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: (json.dumps(_jsonable(v)) if isinstance(v, (dict, list, tuple))
                                     else _jsonable(v)) for k, v in row.items()})
        return path

    def write_text(self, name: str, text: str) -> pathlib.Path:
        """A plain-text report next to the records (e.g. Hessian descriptions)."""
        path = self.path / name
        path.write_text(text + "\n")
        return path

    def figure_path(self, name: str) -> pathlib.Path:
        return self.path / "figures" / f"{name}.png"

    def _write_json(self, name: str, data: Any) -> None:
        with open(self.path / name, "w") as f:
            json.dump(_jsonable(data), f, indent=2)
            f.write("\n")


def format_claims(claims: list[Claim]) -> str:
    """A terminal table: verdict, claim, measured vs expected; the paper's claims first, the
    run's sanity checks after them, each with its own count."""
    lines = []
    for kind, title, tally in (("paper", None, "claims reproduced"),
                               ("sanity", "  sanity checks of the runs:", "sanity checks passed")):
        chosen = [c for c in claims if c.kind == kind]
        if not chosen and kind == "sanity":
            continue
        if title:
            lines.append(title)
        for c in chosen:
            mark = "ok " if c.passed else "NO "
            lines.append(f"  [{mark}] {c.claim}\n         measured {_short(c.measured)}; "
                         f"expected {_short(c.expected)}")
        lines.append(f"  {sum(c.passed for c in chosen)}/{len(chosen)} {tally}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    return str(value)


def _jsonable(value: Any) -> Any:
    """numpy scalars/arrays to Python; NaN/inf to None so the files stay valid JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value
