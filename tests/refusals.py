"""The paper packages' config tests: a changed config is refused in one sentence."""

from typing import Any

import pytest

from landscape.engine import config as config_lib


def assert_refused(validate: Any, cfg: Any, changes: dict[str, Any], message: str) -> None:
    """`validate` (a paper's `experiment.validate`) refuses `cfg` with `changes` ({dotted field:
    value}, applied by `config.with_fields`) in a ConfigError that matches `message`."""
    with pytest.raises(config_lib.ConfigError, match=message):
        validate(config_lib.with_fields(cfg, changes))
