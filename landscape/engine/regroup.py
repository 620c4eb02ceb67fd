"""A resume on another number of devices: the runs are padded to a multiple of the devices, so
a checkpoint saved with 6 runs on 2 devices (6 rows) resumes on 4 devices (8 rows) by taking its
real runs and padding them again, each run's numbers unchanged (every device trains its own
runs). A single run whose batch is split over the devices would sum its shares differently on
another count: that resume is refused in one sentence naming the count it needs."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from landscape.engine.keeping import KEPT, TRACKS
from landscape.engine.writes import WorkdirError

_RUN_AXIS = ("losses", "first_bad")  # host entries with the run axis first, with the prefixes
_RUN_PREFIXES = ("metrics/", "snapshots/", KEPT, TRACKS)


def saved_rows(host: dict[str, np.ndarray]) -> int:
    """The number of runs (padding included) a checkpoint's state was saved with."""
    return int(np.shape(host["first_bad"])[0])


def check_devices(host: dict[str, np.ndarray], devices: int, shares: int) -> None:
    """Refuse (one sentence) a resume whose batch split differs from the saved one's."""
    saved_devices, saved_shares = int(host.get("devices", devices)), int(host.get("shares", 1))
    if (saved_shares > 1 or shares > 1) and (saved_shares, saved_devices) != (shares, devices):
        raise WorkdirError(
            f"--resume: this program split its run's batch over {saved_devices} devices, and "
            f"{devices} would sum the shares in another order: resume it on {saved_devices} "
            f"devices (--host_devices={saved_devices})."
        )


def template(state: Any, rows: int) -> Any:
    """`state` (numpy arrays, runs first) with `rows` runs: what the checkpoint restores into."""
    return jax.tree.map(lambda x: np.zeros((rows, *np.shape(x)[1:]), np.asarray(x).dtype), state)


def repad(x: np.ndarray, num_runs: int, rows: int) -> np.ndarray:
    """The first `num_runs` (real) runs of `x`, padded with copies of the last to `rows`."""
    x = np.asarray(x)[:num_runs]
    return np.concatenate([x, np.repeat(x[-1:], rows - num_runs, axis=0)])


def repad_state(state: Any, num_runs: int, rows: int) -> Any:
    return jax.tree.map(lambda x: repad(x, num_runs, rows), state)


def repad_host(host: dict[str, np.ndarray], num_runs: int, rows: int) -> dict[str, np.ndarray]:
    """The host records' run-axis entries padded again; the others as they are."""
    return {
        k: repad(v, num_runs, rows) if k in _RUN_AXIS or k.startswith(_RUN_PREFIXES) else v
        for k, v in host.items()
    }
