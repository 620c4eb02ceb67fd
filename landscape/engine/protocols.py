"""What an experiment module provides, so that `experiments/cli.py` and the report can run it.

Each paper's `experiment.py` satisfies `Experiment`; mypy checks it where a CLI passes the module to
`cli.run`, and `check_experiment` checks a module at run time (e.g. a user's own).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import ml_collections

from landscape.engine import records
from landscape.typing import Progress


@runtime_checkable
class Experiment(Protocol):
    """An experiment module, run by `python -m experiments.<name> --config=...`.

    default_config: every field with its default; overrides and config files are checked
        against it (unknown fields and kinds).
    validate: raise `config.ConfigError` with one sentence for a config that cannot run
        (ranges, relations between fields, memory), before anything compiles.
    needs_x64: whether the run computes in float64 (the CLI turns x64 on before tracing).
    run: train and evaluate; write the config, records, figures and summary into the workdir;
        return the summary.
    """

    __name__: str

    def default_config(self) -> ml_collections.ConfigDict: ...

    def validate(self, cfg: ml_collections.ConfigDict) -> None: ...

    def needs_x64(self, cfg: ml_collections.ConfigDict) -> bool: ...

    def run(
        self, cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress = ...
    ) -> dict[str, Any]: ...


REQUIRED = {"default_config": 0, "validate": 1, "needs_x64": 1, "run": 2}  # name: positional args


def check_experiment(module: types.ModuleType) -> Experiment:
    """The module as an `Experiment`, or a TypeError naming the first thing it lacks."""
    name = getattr(module, "__name__", repr(module))
    for attr, arity in REQUIRED.items():
        function = getattr(module, attr, None)
        if not callable(function):
            raise TypeError(
                f"{name} is not an experiment module: it has no function {attr}() "
                f"(an experiment module defines {', '.join(REQUIRED)}; "
                "see landscape/engine/protocols.py)."
            )
        if not _accepts(function, arity):
            raise TypeError(f"{name}.{attr} must accept {arity} positional argument(s).")
    if not _accepts_keyword(module.run, "progress"):
        raise TypeError(f"{name}.run must accept progress= (a print-like callable, or None).")
    return module  # checked above, attribute by attribute


def _accepts(function: Callable, arity: int) -> bool:
    try:
        inspect.signature(function).bind(*range(arity))
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): trust it
        return True
    return True


def _accepts_keyword(function: Callable, keyword: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except ValueError:
        return True
    return keyword in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
