"""Type aliases for the library's annotations (what a pytree or an array argument may be)."""

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

PyTree = Any  # nested dicts/lists/tuples of arrays, as jax.tree_util sees them
Array = jax.Array
ArrayLike = jax.typing.ArrayLike  # a jax or numpy array, or a Python scalar
NDArray = np.ndarray
Progress = Callable[[str], None] | None  # where a run reports its lines (print; None: quiet)
Row = dict[str, Any]  # one row of a table (a CSV file, a pandas frame)
