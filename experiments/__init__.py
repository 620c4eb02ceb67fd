"""Thin command-line programs over the library: one CLI per paper, the report and the benchmark.

A Ctrl-C before a CLI opens its workdir (while it imports jax, or validates) ends in one line, not
a traceback: nothing was written yet (`cli` marks `opened` once it has opened the workdir)."""

import sys
import types

opened = False  # a CLI opened its workdir: from then on it reports interruptions itself
_previous_hook = sys.excepthook


def _interrupted(
    kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
) -> None:
    if issubclass(kind, KeyboardInterrupt) and not opened:
        print("Interrupted before the run started: nothing was written.", file=sys.stderr)
        return
    _previous_hook(kind, value, tb)


sys.excepthook = _interrupted
