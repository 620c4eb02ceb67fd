"""The engine tests' shared helper: a training run stopped after its first chunk, as a SIGTERM
would stop it."""

from collections.abc import Callable

import pytest

from landscape.engine import training


@pytest.fixture
def stop_at_first_chunk() -> Callable[[Callable[[Callable[[str], None]], object]], None]:
    """`stop_at_first_chunk(go)` calls `go(progress)` with a progress that asks training to stop
    at its first "step" line, expects `training.Interrupted` and clears the request."""

    def stop(go: Callable[[Callable[[str], None]], object]) -> None:
        def at_first_chunk(line: str) -> None:
            if line.startswith("step"):
                training.request_stop()

        try:
            with pytest.raises(training.Interrupted):
                go(at_first_chunk)
        finally:
            training.clear_stop()

    return stop
