"""The codebase's shape: annotated public functions, short functions, package maps that match."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPERS = ("markov", "ngrams", "recall", "scan_snap")
MAX_FUNCTION_LINES = 80


def _functions(folder):
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path.relative_to(ROOT), node


def _is_public(node):
    return not node.name.startswith("_") or node.name == "__call__"


def _unannotated(node):
    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    missing = [a.arg for a in args if a.annotation is None and a.arg not in ("self", "cls")]
    return missing + (["return"] if node.returns is None else [])


@pytest.mark.parametrize("folder", ["landscape", "experiments", "tools"])
def test_public_functions_carry_annotations(folder):
    bare = [
        f"{path}:{node.lineno} {node.name} ({', '.join(_unannotated(node))})"
        for path, node in _functions(folder)
        if _is_public(node) and _unannotated(node)
    ]
    assert not bare, "public functions without annotations:\n" + "\n".join(bare)


def test_no_function_in_the_library_is_long():
    long = [
        f"{path}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for path, node in _functions("landscape")
        if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


@pytest.mark.parametrize("paper", PAPERS)
def test_package_map_names_every_module(paper):
    """Each paper package's docstring lists its modules, one per line: no more, no fewer."""
    folder = ROOT / "landscape" / paper
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    listed = {
        line.split()[0]
        for line in doc.splitlines()
        if line.split()[:1] and line.split()[0].endswith(".py")
    }
    files = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    assert listed == files, (
        f"{paper}: missing from the map {sorted(files - listed)}, stale {sorted(listed - files)}"
    )


def test_every_lazy_probe_is_exported():
    import landscape

    assert set(landscape.PROBES) <= set(landscape.__all__)
    for name in landscape.PROBES:
        assert callable(getattr(landscape, name))


def test_the_version_is_the_installed_packages():
    import importlib.metadata

    import landscape

    assert landscape.__version__ == importlib.metadata.version("landscape")
    text = (ROOT / "CITATION.cff").read_text()
    assert f"version: {landscape.__version__}" in text  # the citation names this version
    assert f"## {landscape.__version__}" in (ROOT / "CHANGELOG.md").read_text()
