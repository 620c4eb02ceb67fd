"""What the study pages share (tools/study_pages.py): a records table read back, where the run
ran, the caption under a generated table, numbers in LaTeX, a page's generated tables between
their markers, and the data a page's tables are written from."""

from __future__ import annotations

import csv
import json
import pathlib
from typing import Any

Data = dict[str, Any]
STUDIES = pathlib.Path(__file__).resolve().parent.parent / "docs" / "studies"


def read_csv(path: pathlib.Path) -> list[dict[str, Any]]:
    """A records table's rows, numbers as numbers (exactly as written: Python's repr
    round-trips), True and False as booleans and empty cells as None."""
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _number(text: str) -> Any:
    if text in ("", "True", "False"):
        return {"": None, "True": True, "False": False}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def ran_on(workdir: pathlib.Path) -> Data:
    """The backend and device count of a run (config.json's provenance): a run split over
    another number of devices rounds differently (float16 most), so the tables name them."""
    provenance = json.loads((workdir / "config.json").read_text()).get("provenance", {})
    return {k: provenance.get(k) for k in ("backend", "device_count")}


def caption(data: Data, table: str) -> str:
    """The line under a generated table: the records it comes from, and where they ran (a run
    made in Python, without the CLI's provenance, does not say)."""
    count, backend = data["ran_on"]["device_count"], data["ran_on"]["backend"]
    devices = f" ({count} {backend} device{'s' * (count != 1)})" if count else ""
    return f"\n\n*From the run's `{table}`{devices}.*"


def tex(value: float, digits: int = 2) -> str:
    """`value` as a \\times 10^{e} in LaTeX, `digits` significant: -5.6\\times10^{-8}."""
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    return f"{mantissa}\\times10^{{{int(exponent)}}}"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- table {name}: start -->", f"<!-- table {name}: end -->"


def between(text: str, name: str) -> str | None:
    """The text between a table's markers (None without them)."""
    start, end = markers(name)
    at, until = text.find(start), text.find(end)
    if at < 0 or until < at:
        return None
    return text[at + len(start) : until].strip("\n")


def replace(text: str, name: str, table: str) -> str:
    """`text` with `table` between its markers; a page without them is one sentence."""
    if between(text, name) is None:
        start, end = markers(name)
        raise ValueError(f"the page has no {start} ... {end} markers around its table {name!r}.")
    start, end = markers(name)
    at, until = text.find(start), text.find(end)
    return text[: at + len(start)] + "\n" + table.strip("\n") + "\n" + text[until:]


def data_path(name: str) -> pathlib.Path:
    return STUDIES / "data" / f"{name}.json"


def stored(name: str) -> Data:
    data: Data = json.loads(data_path(name).read_text())
    return data
