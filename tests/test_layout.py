"""The house's shape: modules of a readable size, no import cycles, and layers that point one way
(the engine imports no probe and no paper; no paper imports another; docs/architecture.md)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAPERS = ("markov", "ngrams", "recall", "scan_snap")
MAX_MODULE_LINES = 600
# Modules still above MAX_MODULE_LINES, with the most lines each may have: entries may only
# shrink or go (the test fails on a stale entry), never grow.
ALLOWED_LONGER = {
    "landscape/ngrams/model.py": 650,
}


def _modules(*folders: str) -> list[pathlib.Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: pathlib.Path, known: set[str]) -> set[str]:
    """The landscape modules `path` imports, at module level or inside functions (imports
    under `if TYPE_CHECKING:` never run and are left out)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if _type_checking_only(node)
        for child in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("landscape")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("landscape"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    paths = _modules("landscape")
    known = {_name(p) for p in paths}
    return {_name(p): _imports(p, known) - {_name(p)} for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_is_long():
    lines = {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
        for p in _modules("landscape", "experiments")
    }
    too_long = [
        f"{name}: {n} lines (at most {ALLOWED_LONGER.get(name, MAX_MODULE_LINES)})"
        for name, n in lines.items()
        if n > ALLOWED_LONGER.get(name, MAX_MODULE_LINES)
    ]
    assert not too_long, "modules over their line budget:\n" + "\n".join(too_long)
    stale = [name for name in ALLOWED_LONGER if lines.get(name, 0) <= MAX_MODULE_LINES]
    assert not stale, f"now within {MAX_MODULE_LINES} lines: remove from ALLOWED_LONGER {stale}"


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "landscape"


@pytest.mark.parametrize("layer", ["engine", "probes", *PAPERS])
def test_layers_point_one_way(layer):
    """The engine imports no probe and no paper; the probes import no paper; a paper imports no
    other paper; the point and the argument checks import neither engine, probes nor papers."""
    forbidden = {
        "engine": {"probes", *PAPERS},
        "probes": set(PAPERS),
        **{paper: set(PAPERS) - {paper} for paper in PAPERS},
    }[layer]
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if _layer(module) == layer
        for target in sorted(targets)
        if _layer(target) in forbidden
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", ["landscape._checks", "landscape.point", "landscape.typing"])
def test_the_foundations_import_no_layer_above_them(module):
    allowed = {"landscape._checks", "landscape.typing"}
    assert _graph()[module] <= allowed - {module}
