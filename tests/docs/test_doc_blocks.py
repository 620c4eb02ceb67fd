"""Every code block of README.md and docs/ runs as a reader would run it: the ```python blocks of
a page in order, in one namespace, and the `python -m experiments.<cli> ...` lines of its ```bash
blocks in process, in a fresh folder that holds configs/ (other lines of a bash block, such as
pip or pytest, are left alone; a line whose module is a placeholder, `experiments.<paper>`, is a
synopsis).

A page steers its blocks with HTML comments, invisible on GitHub and on the site, on the lines
right above a block's fence:

    <!-- docs-test: skip REASON -->              not run, for the reason given
    <!-- docs-test: replace OLD => NEW -->       run with OLD replaced by NEW (a tiny size)
    <!-- docs-test: file PATH -->                written to PATH (e.g. a module the CLI imports)

and anywhere on the page, `<!-- docs-test: after PAGE -->` runs PAGE's blocks first, in the
same folder (a page that reads the records another page's command writes).
"""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path

import pytest

import landscape

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(
    r"(?P<marks>(?:^<!-- docs-test: .*? -->\n)*)^```(?P<lang>python|bash)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
MARK = re.compile(r"<!-- docs-test: (?P<verb>skip|replace|file) ?(?P<rest>.*?) -->")
AFTER = re.compile(r"<!-- docs-test: after (?P<page>\S+) -->")


def pages() -> list[Path]:
    """The pages with a python block or a bash block that calls an experiments CLI."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [
        p for p in found if any(lang == "python" or commands(code) for lang, code, _ in blocks(p))
    ]


def blocks(page: Path) -> list[tuple[str, str, dict]]:
    """(language, code, marks) of each python or bash block, the replacements applied."""
    out = []
    for match in FENCE.finditer(page.read_text()):
        marks: dict = {"replace": []}
        code = match["code"]
        for mark in MARK.finditer(match["marks"]):
            if mark["verb"] == "replace":
                old, new = mark["rest"].split(" => ")
                assert old in code, f"{page.name}: {old!r} is not in the block it should shrink"
                code = code.replace(old, new)
            else:
                marks[mark["verb"]] = mark["rest"]
        out.append((match["lang"], code, marks))
    return out


def run_command(words: list[str]) -> int:
    """`python -m experiments.<cli> args...` in this process; its exit status."""
    name, argv = words[2], [words[2].replace(".", "/") + ".py", *words[3:]]
    paper = name.removeprefix("experiments.")
    if paper in landscape.PAPERS:  # a paper's CLI: launch.paper runs its experiment module
        from experiments import cli

        return cli.main(importlib.import_module(f"landscape.{paper}.experiment"), argv)
    module = importlib.import_module(name)
    if not hasattr(module, "main"):
        module = importlib.import_module(f"{name}.__main__")
    return module.main(argv)


def commands(script: str) -> list[list[str]]:
    """The `python -m experiments.<cli>` commands of a bash block (continuations joined)."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] == ["python", "-m"] and len(words) > 2 and words[2].startswith("experiments."):
            if re.fullmatch(r"[\w.]+", words[2]):  # experiments.<paper> is a synopsis
                found.append(words)
    return found


def run_page(page: Path, namespace: dict) -> int:
    """Run the page's blocks in the current folder; returns how many ran."""
    text = page.read_text()
    ran = 0
    for after in AFTER.finditer(text):
        ran += run_page((page.parent / after["page"]).resolve(), {})
    for lang, code, marks in blocks(page):
        if "skip" in marks:
            assert marks["skip"], f"{page.name}: a skipped block says why"
            continue
        if "file" in marks:
            Path(marks["file"]).parent.mkdir(parents=True, exist_ok=True)
            Path(marks["file"]).write_text(code)
            continue
        if lang == "python":
            exec(compile(code, f"{page.name} block", "exec"), namespace)
            ran += 1
        for words in commands(code) if lang == "bash" else []:
            assert run_command(words) == 0, f"{page.name}: {' '.join(words)} failed"
            ran += 1
    return ran


def _namespace_in(module, folder: Path) -> bool:
    """A namespace package (a folder without __init__.py) under `folder`."""
    paths = getattr(module, "__path__", None)
    return getattr(module, "__file__", None) is None and any(
        str(p).startswith(str(folder)) for p in (paths or [])
    )


# pages whose claims the papers' own tests check, at 18-30 s each: `-m slow` (the CI budget)
SLOW_PAGES = ("docs/papers/markov.md", "docs/papers/ngrams.md", "docs/studies/recall_curvature.md")


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, marks=[pytest.mark.slow] if str(p.relative_to(ROOT)) in SLOW_PAGES else [])
        for p in pages()
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.syspath_prepend(str(tmp_path))  # a module a page writes (mystudy/...) imports
    try:
        ran = run_page(page, {"__name__": "__main__"})
    finally:  # forget the page's own modules (mystudy/...): the next page may write others
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
                sys.modules.pop(name)
        for name in [n for n, m in sys.modules.items() if n and _namespace_in(m, tmp_path)]:
            sys.modules.pop(name)
    skipped = sum("skip" in marks or "file" in marks for _, _, marks in blocks(page))
    assert ran or skipped, f"{page.name}: nothing ran"
