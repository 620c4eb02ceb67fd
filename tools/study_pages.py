"""The study pages (docs/studies/), each with the command of its run, what it keeps of the
records and how its tables are written; a page's tables written again from its stored data, and
the pages whose tables differ from it. The command line is tools/pages.py."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable

from tools import page_parts
from tools.eos_page import eos_extract, eos_finished, eos_tables
from tools.markov_page import markov_extract, markov_tables
from tools.ngrams_page import ngrams_extract, ngrams_tables
from tools.page_parts import Data, data_path, replace, stored
from tools.recall_page import recall_extract, recall_tables
from tools.trap_page import trap_extract, trap_tables
from tools.wikitext_page import wikitext_extract, wikitext_tables


@dataclasses.dataclass(frozen=True)
class Page:
    """A study page: the command of its run, what it keeps of the records, its tables."""

    command: str
    extract: Callable[[pathlib.Path], Data]  # workdir -> the numbers the tables show
    tables: Callable[[Data], dict[str, str]]  # data -> {marker name: Markdown table}
    # workdir -> whether it holds what `extract` reads (default: a finished run, summary.json)
    finished: Callable[[pathlib.Path], bool] = lambda workdir: (workdir / "summary.json").is_file()

    document: str = ""  # the page under docs/ (default: studies/<name>.md)

    def path(self, name: str) -> pathlib.Path:
        return page_parts.STUDIES.parent / (self.document or f"studies/{name}.md")


def page_text(name: str, data: Data, text: str) -> str:
    """A page's text with every table written from `data`."""
    for table, markdown in PAGES[name].tables(data).items():
        text = replace(text, table, markdown)
    return text


PAGES: dict[str, Page] = {
    "markov_curvature": Page(
        "python -m experiments.markov --config=configs/markov.py:curvature",
        markov_extract,
        markov_tables,
    ),
    "ngrams_curvature": Page(
        "python -m experiments.ngrams --config=configs/ngrams.py:curvature",
        ngrams_extract,
        ngrams_tables,
    ),
    "recall_curvature": Page(
        "python -m experiments.recall --config=configs/recall.py:curvature",
        recall_extract,
        recall_tables,
    ),
    "markov_trap": Page(
        "python -m experiments.markov --config=configs/markov.py:trap_gpu",
        trap_extract,
        trap_tables,
        document="papers/markov.md",
    ),
    "wikitext_curvature": Page(
        "python -m experiments.scan_snap --config=configs/wikitext.py:curvature",
        wikitext_extract,
        wikitext_tables,
    ),
    "edge_of_stability": Page(
        "python -m experiments.markov --config=configs/markov.py:eos --workdir=runs/eos/markov",
        eos_extract,
        eos_tables,
        eos_finished,
    ),
}


def write(name: str, workdir: pathlib.Path | None = None) -> pathlib.Path:
    """Keep `workdir`'s data for page `name` (None: the stored data), then write its tables."""
    page = PAGES[name]
    if workdir is not None:
        data_path(name).parent.mkdir(parents=True, exist_ok=True)
        data = page.extract(workdir)
        data_path(name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    path = page.path(name)
    path.write_text(page_text(name, stored(name), path.read_text()))
    return path


def stale() -> list[str]:
    """The pages whose tables are not what their stored data gives."""
    return [
        name
        for name, page in PAGES.items()
        if page_text(name, stored(name), page.path(name).read_text()) != page.path(name).read_text()
    ]
