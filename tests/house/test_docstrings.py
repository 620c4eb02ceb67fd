"""Module docstrings stay short: what the module is for and where to read more (docs/design/)."""

import ast
import pathlib
import re

import pytest

import landscape

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPERS = ("markov", "ngrams", "recall", "scan_snap")
MAX_LINES = 10
MAP_SLACK = 4  # a paper package's map, plus its title and a few lines of prose


def _docstring_lines(path: pathlib.Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    return len(doc.splitlines()) if doc else 0


def _limit(path: pathlib.Path) -> int:
    """10 lines; a paper package's __init__ may be as long as its module map plus MAP_SLACK."""
    is_paper_init = path.name == "__init__.py" and path.parent.name in PAPERS
    if not is_paper_init:
        return MAX_LINES
    modules = [p for p in path.parent.glob("*.py") if p.name != "__init__.py"]
    return max(MAX_LINES, len(modules) + MAP_SLACK)


@pytest.mark.parametrize("folder", ["landscape", "experiments", "tools"])
def test_every_module_has_a_short_docstring(folder):
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        lines, limit = _docstring_lines(path), _limit(path)
        if not 1 <= lines <= limit:
            bad.append(f"{path.relative_to(ROOT)}: {lines} lines (allowed 1-{limit})")
    assert not bad, "module docstrings missing or too long:\n" + "\n".join(bad)


def test_the_limit_counts_lines_of_the_docstring(tmp_path):
    short = tmp_path / "short.py"
    short.write_text('"""One line.\n\nAnd three\nmore lines.\n"""\n')
    missing = tmp_path / "missing.py"
    missing.write_text("x = 1\n")
    assert _docstring_lines(short) == 4
    assert _docstring_lines(missing) == 0
    assert _limit(short) == MAX_LINES


def test_design_pages_are_listed_in_their_index():
    folder = ROOT / "docs" / "design"
    index = (folder / "index.md").read_text()
    pages = {p.name for p in folder.glob("*.md") if p.name != "index.md"}
    assert pages and all(f"({name})" in index for name in pages), sorted(pages)


def test_docstrings_cite_design_pages_that_exist():
    missing = []
    for folder in ("landscape", "experiments", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            for word in doc.replace("(", " ").replace(")", " ").split():
                cited = word.rstrip(".,;:")
                if cited.startswith("docs/design/") and not (ROOT / cited).is_file():
                    missing.append(f"{path.relative_to(ROOT)}: {cited}")
    assert not missing, "docstrings cite design pages that do not exist:\n" + "\n".join(missing)


def _legend(path: pathlib.Path) -> set[str]:
    """The letters of a module's shape legend: the comment block after '# Shape suffixes'."""
    letters, inside = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("# Shape suffixes"):
            inside = True
        elif inside and line.startswith("#   "):
            letters.add(line.split()[1])
        elif inside:
            break
    return letters


@pytest.mark.parametrize("paper", PAPERS)
def test_every_models_shape_letters_have_a_legend(paper):
    """x_BT, q_BNHM, ...: each capital letter of a shape suffix in model.py is in its legend
    (the letters mean different things in different papers, e.g. N or T for the length)."""
    path = ROOT / "landscape" / paper / "model.py"
    legend = _legend(path)
    assert legend, f"{path.relative_to(ROOT)} has no '# Shape suffixes' legend"
    names = {
        node.id if isinstance(node, ast.Name) else node.arg
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name | ast.arg)
    }
    suffixes = {n.rsplit("_", 1)[1] for n in names if re.fullmatch(r"[a-z][a-z0-9_]*_[A-Z]+", n)}
    missing = sorted({letter for suffix in suffixes for letter in suffix} - legend)
    assert not missing, f"{paper}/model.py: shape letters without a legend entry: {missing}"


# the probes' part of the package face's __all__, from gradient_at to direction_to
PUBLIC_PROBES = landscape.__all__[
    landscape.__all__.index("gradient_at") : landscape.__all__.index("direction_to") + 1
]


@pytest.mark.parametrize("name", PUBLIC_PROBES)
def test_public_probes_document_every_argument(name):
    """Google style (rendered by mkdocstrings): an Args section naming every parameter, and a
    Returns section."""
    import inspect

    function = getattr(landscape, name)
    doc = inspect.getdoc(function) or ""
    assert "\nArgs:\n" in doc and "\nReturns:\n" in doc, f"{name}: no Args/Returns section"
    args = doc.split("\nArgs:\n")[1].split("\nReturns:\n")[0]
    documented = {line.split(":")[0].strip() for line in args.splitlines() if ":" in line}
    missing = set(inspect.signature(function).parameters) - documented
    assert not missing, f"{name}: arguments without a line in Args: {sorted(missing)}"
