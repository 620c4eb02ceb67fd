"""Every paper's experiment module provides what the CLI runs (landscape/engine/protocols.py)."""

import importlib
import types

import pytest

from landscape.engine import protocols


@pytest.mark.parametrize("paper", ["markov", "ngrams", "recall", "scan_snap"])
def test_paper_experiments_satisfy_the_protocol(paper):
    module = importlib.import_module(f"landscape.{paper}.experiment")
    assert isinstance(module, protocols.Experiment)
    assert protocols.check_experiment(module) is module


def _module(**functions):
    module = types.ModuleType("mystudy.experiment")
    module.__dict__.update(functions)
    return module


COMPLETE = dict(
    default_config=lambda: None,
    validate=lambda cfg: None,
    needs_x64=lambda cfg: False,
    run=lambda cfg, workdir, progress=print: {},
)


def test_a_complete_user_module_passes():
    module = _module(**COMPLETE)
    assert protocols.check_experiment(module) is module


@pytest.mark.parametrize(
    "change, message",
    [
        ({"run": None}, "mystudy.experiment is not an experiment module: it has no function run()"),
        ({"validate": lambda: None}, "mystudy.experiment.validate must accept 1 positional"),
        ({"run": lambda cfg, workdir: {}}, "mystudy.experiment.run must accept progress="),
    ],
)
def test_an_incomplete_module_is_named_in_one_sentence(change, message):
    functions = {k: v for k, v in {**COMPLETE, **change}.items() if v is not None}
    with pytest.raises(TypeError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        protocols.check_experiment(_module(**functions))
