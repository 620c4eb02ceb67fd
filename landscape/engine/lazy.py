"""Attributes a package loads on first use (PEP 562's module `__getattr__`), so that importing
the package stays light: a paper's `trained_point` reads records through its experiment modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def module_getattr(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A `__getattr__` for module `package`: `name` is the attribute of that name in the module
    `where[name]`, imported on first use; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__
