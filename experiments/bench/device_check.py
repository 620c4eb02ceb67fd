"""The device check: every accelerator row in one call within a time budget.

python -m experiments.device_check [--budget=480] [--trap] [--device_rows=a,b] [--device_out=DIR],
or python -m experiments.benchmark --only=device --budget=480. The first line names the device; rows
run fastest first, each in fresh processes, printed as soon as measured; a row whose estimate
does not fit in the time left is skipped with a note, and one that overruns it is stopped. Writes
rows.json and rows.md, the table docs/performance.md takes (docs/performance.md#the-device-check).
"""

from __future__ import annotations

import pathlib
import time

from absl import app, flags

from experiments.bench import compile_settings
from experiments.bench.device_check_rows import check, chosen_rows

_BUDGET = flags.DEFINE_float("budget", 480.0, "Seconds for every row together.", lower_bound=0)
_TRAP = flags.DEFINE_bool("trap", False, "Add the Markov trap study (trap_gpu) as the last row.")
_DEVICE_OUT = flags.DEFINE_string(
    "device_out", None, "Folder for rows.json and rows.md (default runs/device_check/<time>)."
)
_DEVICE_ROWS = flags.DEFINE_list(
    "device_rows", None, "Only these rows (default: every row), e.g. compile_settings."
)
_COMPILE_SETTINGS = flags.DEFINE_list(
    "compile_settings", None, "The compile_settings row's settings (default: all), e.g. default."
)


def run_from_flags() -> None:
    """`check` with the flags (also `python -m experiments.benchmark --only=device`)."""
    out = _DEVICE_OUT.value or f"runs/device_check/{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        compile_settings.chosen(_COMPILE_SETTINGS.value)
    except ValueError as unknown:
        raise app.UsageError(f"--compile_settings: {unknown}") from None
    check(_BUDGET.value, pathlib.Path(out), _TRAP.value, chosen_rows(_DEVICE_ROWS.value))


def main(argv: list[str]) -> None:
    del argv
    run_from_flags()


if __name__ == "__main__":
    app.run(main)
