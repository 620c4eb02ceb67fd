"""The house's shape: modules of a readable size, no import cycles, and layers that hold by whole
import chains (docs/architecture.md, "Layers"): the core imports neither the engine nor the
probes; the engine imports the core, never the probes; the probes no paper; no paper another."""

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


@functools.cache  # read once a session: every rule walks the same graph
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
        for p in _modules("landscape", "experiments", "tools")
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


# The core: landscape/core/ and the modules it stands on.
FOUNDATIONS = (
    "landscape._checks",
    "landscape.typing",
    "landscape.trees",
    "landscape.point",
)
# The engine modules a probe may import, each for what is the engine's own (no other):
ENGINE_FOR_PROBES = {
    "landscape.engine.training": "bezier_path fits its curve with the engine's training loop",
    "landscape.engine.plotting": "the probes' figures draw in the house's matplotlib style",
}
# What a layer's modules may never reach, by any chain of imports.
NEVER_REACHES = {
    "core": {"tracker", "engine", "probes", "face", *PAPERS},
    "tracker": {"engine", "probes", "face", *PAPERS},
    "engine": {"probes", "face", *PAPERS},
    "probes": {"face", *PAPERS},
    **{paper: set(PAPERS) - {paper} for paper in PAPERS},
}


def _layer(module: str) -> str:
    """core, tracker, engine, probes, a paper, or face (the public namespace `landscape` and
    `landscape.records`, its alias of the engine's records)."""
    parts = module.split(".")
    if module in FOUNDATIONS or parts[1:2] == ["core"]:
        return "core"
    if module == "landscape.tracking":
        return "tracker"
    if module in ("landscape", "landscape.records"):
        return "face"
    return parts[1]


def _reach(graph: dict[str, set[str]], module: str) -> dict[str, list[str]]:
    """Every module `module` imports by some chain, with one shortest chain to it."""
    chains = {module: [module]}
    frontier = [module]
    while frontier:
        following = []
        for current in frontier:
            for target in sorted(graph[current]):
                if target not in chains:
                    chains[target] = [*chains[current], target]
                    following.append(target)
        frontier = following
    del chains[module]
    return chains


def test_reach_follows_chains_through_functions_and_packages():
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert _reach(graph, "d") == {"a": ["d", "a"], "b": ["d", "a", "b"], "c": ["d", "a", "b", "c"]}
    assert _layer("landscape.core.layout") == _layer("landscape.point") == "core"
    assert _layer("landscape") == _layer("landscape.records") == "face"
    assert _layer("landscape.engine.track") == "engine"


@pytest.mark.parametrize("layer", list(NEVER_REACHES))
def test_layers_hold_by_whole_import_chains(layer):
    """The core (landscape/core/ and FOUNDATIONS) reaches nothing above it; the tracker only the
    core; the engine the core and the tracker, never a probe; the probes no paper; a paper no other
    paper; no library module reaches the public namespace. Imports inside functions count."""
    graph = _graph()
    wrong = [
        " -> ".join(chain)
        for module in sorted(graph)
        if _layer(module) == layer
        for target, chain in _reach(graph, module).items()
        if _layer(target) in NEVER_REACHES[layer]
    ]
    assert not wrong, f"{layer} reaches what it may not:\n" + "\n".join(wrong[:40])


def test_the_probes_import_the_engine_only_for_what_is_the_engines():
    graph = _graph()
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if _layer(module) == "probes"
        for target in sorted(targets)
        if _layer(target) == "engine" and target not in ENGINE_FOR_PROBES
    ]
    assert not wrong, "\n".join(wrong)
    used = {t for m, ts in graph.items() if _layer(m) == "probes" for t in ts}
    assert not set(ENGINE_FOR_PROBES) - used, "stale ENGINE_FOR_PROBES entries"


def test_no_library_module_imports_the_public_namespace():
    """`import landscape` or `from landscape import Point` inside the library would load every
    probe and paper (and cycle through the face); submodules are imported by their own names."""
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        if module not in ("landscape", "landscape.records")
        for target in targets
        if target == "landscape"
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", ["landscape._checks", "landscape.point", "landscape.typing"])
def test_the_foundations_import_no_layer_above_them(module):
    # a point's dataset in batches (core/batches.py) lies beneath it, importing only these too
    allowed = {"landscape._checks", "landscape.typing", "landscape.core.batches"}
    assert _graph()[module] <= allowed - {module}
