"""`import landscape.records` (and `from landscape.records import load`): the same module
object as `landscape.engine.records`, the library's records and workdirs."""

import sys

from landscape.engine import records as _records
from landscape.engine.records import *  # noqa: F403 -- its names, for readers and type checkers

sys.modules[__name__] = _records
