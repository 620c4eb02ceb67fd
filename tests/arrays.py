"""Reading a record's arrays.npz in tests: every array in memory and the file closed (an open
NpzFile left to the garbage collector is a ResourceWarning, an error in this suite)."""

import pathlib

import numpy as np


def load_npz(path: str | pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path) as arrays:
        return dict(arrays)
