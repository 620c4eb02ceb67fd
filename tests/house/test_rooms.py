"""Every paper package has the same rooms (docs/architecture.md, "Rooms"): the table matches the
tree, a module beyond the rooms names its room in the package docstring as the table does, and
every curvature study is entered at `curvature_study.run`."""

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("scan_snap", "markov", "ngrams", "recall")
ROOMS = (
    "task",
    "model",
    "points",
    "theory",
    "experiment",
    "claims",
    "figures",
    "trained",
    "curvature_study",
)


def _tables() -> list[list[list[str]]]:
    """The markdown tables of the "Rooms" section, each a list of rows of cells."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Rooms", 1)[1].split("\n#", 1)[0]
    tables, rows = [], []
    for line in section.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-"):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _modules(package: str) -> set[str]:
    folder = ROOT / "landscape" / package
    return {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}


def test_the_rooms_table_matches_the_tree():
    rooms, beyond = _tables()
    assert rooms[0] == ["room", *PACKAGES] and beyond[0] == ["beyond the rooms", *PACKAGES]
    assert [row[0] for row in rooms[1:]] == list(ROOMS)
    for row in rooms[1:]:
        for package, cell in zip(PACKAGES, row[1:], strict=True):
            present = (ROOT / "landscape" / package / f"{row[0]}.py").exists()
            assert cell == (f"{row[0]}.py" if present else "—"), (package, row[0], cell)
    listed: dict[str, dict[str, str]] = {p: {} for p in PACKAGES}
    for row in beyond[1:]:
        assert row[0] in ROOMS, row[0]
        for package, cell in zip(PACKAGES, row[1:], strict=True):
            listed[package].update({m.strip(): row[0] for m in cell.split(",") if m.strip()})
    for package in PACKAGES:
        extras = _modules(package) - {f"{room}.py" for room in ROOMS}
        assert set(listed[package]) == extras, package


@pytest.mark.parametrize("package", PACKAGES)
def test_each_module_beyond_the_rooms_names_its_room_in_the_docstring(package):
    _, beyond = _tables()
    column = 1 + PACKAGES.index(package)
    doc = importlib.import_module(f"landscape.{package}").__doc__
    for row in beyond[1:]:
        for module in filter(None, (m.strip() for m in row[column].split(","))):
            line = re.search(rf"^{re.escape(module)}\s+\[(\w+)\]", doc, flags=re.M)
            assert line is not None and line.group(1) == row[0], (package, module)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_curvature_study_is_entered_at_run(package):
    study = importlib.import_module(f"landscape.{package}.curvature_study")
    assert callable(study.run)
    assert not hasattr(study, "run_study") and not hasattr(study, "study")
