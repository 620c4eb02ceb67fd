"""What an API page's summary table says of an object (tools/api_tables.py): the object a `:::`
line names, and the first sentence of its docstring."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any


def resolve(dotted: str) -> Any:
    """The object a `:::` line names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(f"{dotted}: no module of it can be imported.")


def first_sentence(obj: Any) -> str:
    """The first sentence of the docstring's first paragraph, on one line."""
    paragraph = (inspect.getdoc(obj) or "").split("\n\n")[0]
    text = " ".join(paragraph.split())
    ends = [m.start() for m in re.finditer(r"\.(\s|$)", text)]
    ends = [i for i in ends if not text[:i].endswith(ABBREVIATIONS)] or [len(text) - 1]
    return text[: ends[0] + 1].replace("|", "\\|")


ABBREVIATIONS = ("e.g", "i.e", "et al", "cf", "vs")  # a period that ends no sentence
