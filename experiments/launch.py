"""What a command-line program runs first: the Ctrl-C hook, then its imports.

A Ctrl-C before a CLI opens its workdir (while it imports jax, or validates) ends in one line, not
a traceback: nothing was written yet. Each program (`python -m experiments.<name>`) calls `main`
or `install` under `if __name__ == "__main__":`, so importing a CLI module in a test or a
notebook leaves `sys.excepthook` as it was."""

from __future__ import annotations

import importlib
import sys
import types

import experiments

INTERRUPTED = "Interrupted before the run started: nothing was written."


def _interrupted(
    kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
) -> None:
    if issubclass(kind, KeyboardInterrupt) and not experiments.opened:
        print(INTERRUPTED, file=sys.stderr)
        return
    _previous(kind, value, tb)


_previous = sys.__excepthook__  # the hook `install` replaced


def install() -> None:
    """Report a Ctrl-C before the workdir is opened in one line (this process, from now on)."""
    global _previous
    if sys.excepthook is not _interrupted:
        _previous = sys.excepthook
        sys.excepthook = _interrupted


def paper(module: str) -> None:
    """`python -m experiments.<paper>`: the hook, then the CLI and the paper's experiment
    module (importing jax), run on sys.argv."""
    install()
    from experiments import cli

    cli.run(importlib.import_module(module))


def absl_main(module: str) -> None:
    """A program whose `main(argv)` runs under absl (the benchmark): the hook, then the module."""
    install()
    from absl import app

    app.run(importlib.import_module(module).main)


def main(module: str) -> None:
    """A program whose `main(sys.argv)` returns its exit status: the hook, then the module."""
    install()
    sys.exit(importlib.import_module(module).main(sys.argv))
