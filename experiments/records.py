"""Check a workdir's records: `python -m experiments.records check WORKDIR`.

One line per file: `ok` or `BAD` with what is wrong (every file the manifest seals against its
size, sha256 and rows; the config, summary and arrays readable; each checkpoint folder's latest
sealed step, its run id and config; metrics.jsonl up to the newest checkpoint against what that
checkpoint recorded), and `ok   <name> (no run wrote it)` for files of yours. Exit status 0
when every file is intact, 1 when one is not, 2 for a mistake in the command.
"""

from __future__ import annotations

import pathlib
import sys

from landscape.engine import records

USAGE = "usage: python -m experiments.records check WORKDIR"


def main(argv: list[str]) -> int:
    """argv = [program, "check", WORKDIR], as sys.argv: print one line per file; the exit
    status (0 intact, 1 not, 2 usage)."""
    argv = argv[1:]
    if len(argv) != 2 or argv[0] != "check":
        print(USAGE, file=sys.stderr)
        return 2
    path = pathlib.Path(argv[1])
    if not records.has_records(path):
        print(f"{path} holds no records of a run: give a run's workdir.", file=sys.stderr)
        return 2
    try:
        found = records.verify(path)
    except records.WorkdirError as error:
        print(f"BAD  {records.MANIFEST}: {error}")
        return 1
    for name, problem in found:
        print(f"BAD  {name}: {problem}" if problem else f"ok   {name}")
    bad = sum(problem is not None for _, problem in found)
    print(f"{path}: {len(found) - bad}/{len(found)} files intact" + ("" if bad else "."))
    return 1 if bad else 0


if __name__ == "__main__":  # the Ctrl-C hook first, then this module's imports (jax) again
    from experiments import launch

    launch.main("experiments.records")
