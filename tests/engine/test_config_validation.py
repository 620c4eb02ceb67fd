"""Validation is total: every shipped config passes, and every bad config gets one ConfigError
sentence naming the field, before anything is built (no training, no compiling here)."""

from __future__ import annotations

import importlib
import time

import ml_collections
import pytest

from landscape.engine import config as config_lib
from landscape.engine import validation

PACKAGE = {
    "syn_small": "scan_snap",
    "syn_medium": "scan_snap",
    "scan_snap_theory": "scan_snap",
    "markov": "markov",
    "ngrams": "ngrams",
    "recall": "recall",
}
VARIANTS = {
    "syn_small": ("fig4", "fig4_left", "fig4_right", "fig5_adam"),
    "syn_medium": ("paper", "quick"),
    "scan_snap_theory": (None,),
}


def shipped():
    out = []
    for module in PACKAGE:
        configs = importlib.import_module(f"configs.{module}")
        for variant in VARIANTS.get(module) or configs.VARIANTS:
            out.append(f"{module}:{variant}" if variant else module)
    return out


def load(spec: str):
    module, _, variant = spec.partition(":")
    configs = importlib.import_module(f"configs.{module}")
    cfg = configs.get_config(variant) if variant else configs.get_config()
    experiment = importlib.import_module(f"landscape.{PACKAGE[module]}.experiment")
    return cfg, experiment


def override(cfg, fields: dict):
    """A copy of cfg with dotted fields set to anything (no ConfigDict type safety: the
    validation, not the container, has to catch a wrong kind)."""
    d = cfg.to_dict()
    for path, value in fields.items():
        *groups, name = path.split(".")
        target = d
        for g in groups:
            target = target.setdefault(g, {})
        target[name] = value
    return ml_collections.ConfigDict(d, type_safe=False)


@pytest.mark.parametrize("spec", shipped())
def test_every_shipped_config_validates_fast(spec):
    cfg, experiment = load(spec)
    experiment.validate(cfg)
    best = min(_seconds(experiment.validate, cfg) for _ in range(3))
    assert best < 0.05, f"{spec}: validate took {best * 1e3:.1f} ms"


def _seconds(f, cfg):
    start = time.perf_counter()
    f(cfg)
    return time.perf_counter() - start


NAN, INF = float("nan"), float("inf")

# (config, overrides, the field the sentence must name)
BAD = [
    # ---- scan_snap: kinds
    (
        "syn_small",
        {"train.num_steps": "abc"},
        "config.train.num_steps = 'abc': must be an integer.",
    ),
    ("syn_small", {"train.batch_size": 2.5}, "config.train.batch_size = 2.5"),
    ("syn_small", {"train.batch_size": True}, "config.train.batch_size = True"),
    ("syn_small", {"model.normalize": 1}, "config.model.normalize = 1: must be True or False."),
    ("syn_small", {"optim.lr_z": "1.0"}, "config.optim.lr_z = '1.0'"),
    ("syn_small", {"optim.lr_z": NAN}, "config.optim.lr_z = nan"),
    ("syn_small", {"eval.plot_steps": [0, "a"]}, "config.eval.plot_steps"),
    ("syn_small", {"model.init": 0}, "config.model.init = 0: must be a string."),
    ("syn_small", {"train": 3}, "config.train = 3: must be a group of fields"),
    ("syn_small", {"trian.batch_size": 1}, "Did you mean config.train.batch_size?"),
    # ---- scan_snap: ranges and relations
    ("syn_small", {"train.chunk_steps": 3}, "config.train.chunk_steps = 3"),
    ("syn_small", {"train.chunk_steps": 200}, "config.train.chunk_steps = 200"),
    ("syn_small", {"train.on_nonfinite": "ignore"}, "config.train.on_nonfinite = 'ignore'"),
    ("syn_small", {"eval.plot_steps": [0, 500]}, "config.eval.plot_steps = [0, 500]"),
    ("syn_small", {"eval.plot_classes": 0}, "config.eval.plot_classes = 0"),
    (
        "syn_small",
        {"data.distinct_unnormalized_max": 0.05},
        "config.data.distinct_unnormalized_max = 0.05",
    ),
    ("syn_small", {"optim.warmup_steps": 10}, "config.optim.warmup_steps = 10"),
    ("syn_small", {"name": ""}, "config.name = ''"),
    ("syn_small", {"seed": -1}, "config.seed = -1"),
    ("syn_small", {"claims": "fig7"}, "config.claims = 'fig7'"),
    ("syn_small", {"eval.snapshot_attention": False}, "config.eval.snapshot_attention = False"),
    ("syn_medium:quick", {"sweep": {"data": {"num_last": [1, 3]}}}, "config.claims = 'fig6'"),
    ("scan_snap_theory", {"theory.fig3_eta_y": []}, "config.theory.fig3_eta_y = []"),
    ("scan_snap_theory", {"theory.fig8_eta_y": [0.1, -1.0]}, "config.theory.fig8_eta_y"),
    ("scan_snap_theory", {"theory.K": 2000}, "config.theory.K = 2000"),
    ("scan_snap_theory", {"sweep": {"optim": {"lr_z": [1.0]}}}, "config.sweep"),
    # ---- scan_snap: sweeps
    (
        "syn_small",
        {"sweep": {"optim": {"lr_zz": [1.0]}}},
        "config.sweep.optim.lr_zz is not a known field. Did you mean config.sweep.optim.lr_z?",
    ),
    ("syn_small", {"sweep": {"optim": {"lr_z": 0.5}}}, "config.sweep.optim.lr_z = 0.5"),
    ("syn_small", {"sweep": {"seed": [0, 1]}}, "config.sweep.seed = [0, 1]"),
    (
        "syn_small",
        {"claims": "none", "sweep": {"data": {"num_last": [1, 0]}}},
        "config.sweep.data.num_last = 0",
    ),
    (
        "syn_small",
        {"claims": "none", "sweep": {"data": {"num_last": [1, 2.5]}}},
        "config.sweep.data.num_last = 2.5",
    ),
    ("syn_small", {"sweep": {"optim": "fast"}}, "config.sweep.optim = 'fast'"),
    ("syn_small", {"variants": [{"model": {"init": "zeros"}}]}, "config.variants"),
    # ---- markov
    ("markov:fig3", {"train.on_nonfinite": "ignore"}, "config.train.on_nonfinite = 'ignore'"),
    ("markov:landscape", {"landscape.points": [[0.5, 1.2]]}, "config.landscape.points"),
    ("markov:landscape", {"landscape.points": [[0.5]]}, "config.landscape.points"),
    ("markov:landscape", {"landscape.points": [[0.5, "q"]]}, "config.landscape.points"),
    ("markov:landscape", {"landscape.multistate_p": [0.0]}, "config.landscape.multistate_p"),
    ("markov:landscape", {"landscape.d": 0}, "config.landscape.d = 0"),
    ("markov:landscape", {"landscape.seq_len": 1.5}, "config.landscape.seq_len = 1.5"),
    (
        "markov:landscape",
        {"landscape.multistate_states": 2},
        "config.landscape.multistate_states = 2",
    ),
    ("markov:landscape", {"sweep": {"chain": {"p": [0.2]}}}, "config.sweep"),
    ("markov:landscape", {"claims": "fig3"}, "config.claims = 'fig3'"),
    ("markov:fig3", {"claims": "landscape"}, "config.claims = 'landscape'"),
    (
        "markov:fig3",
        {"sweep": {"chain": {"p": [0.5, 0.2], "q": [0.8, 0.3, 0.4]}}},
        "config.sweep_zip = True",
    ),
    ("markov:fig3", {"variants": {"model": {"tied": True}}}, "config.variants = "),
    (
        "markov:fig3",
        {"variants": [{"model": {"tie": False}}]},
        "config.variants[0].model.tie is not a known field. Did you mean "
        "config.variants[0].model.tied?",
    ),
    (
        "markov:fig3",
        {"variants": [{"model": {"num_layers": 0}}]},
        "config.variants[0].model.num_layers = 0",
    ),
    ("markov:fig3", {"variants": [{"seed": 3}]}, "config.variants[0].seed = 3"),
    ("markov:fig3", {"variants": [3]}, "config.variants[0] = 3"),
    ("markov:fig3", {"variants": [{"model": {"tied": "no"}}]}, "config.variants[0].model.tied"),
    ("markov:fig3", {"model.num_heads": 3}, "config.model.num_heads = 3"),
    (
        "markov:fig3",
        {"sweep": {"model": {"num_heads": [1, 3]}}},
        "config.sweep.model.num_heads = 3",
    ),
    ("markov:fig1", {"sweep": {"model": {"num_layers": [1, 2]}}}, "config.sweep.model.num_layers"),
    ("markov:fig3", {"train.warmup_fraction": 1.5}, "config.train.warmup_fraction = 1.5"),
    ("markov:fig3", {"optim.warmup_steps": 10}, "config.optim.warmup_steps = 10"),
    ("markov:fig3", {"model.tied": "yes"}, "config.model.tied = 'yes'"),
    ("markov:fig3", {"chain.initial": "random"}, "config.chain.initial = 'random'"),
    ("markov:fig3", {"sweep_zip": 1}, "config.sweep_zip = 1"),
    ("markov:fig5", {"chain.num_states": 2}, "config.chain.num_states = 2"),
    (
        "markov:fig4",
        {"sweep": {"chain": {"pp": [0.2]}}},
        "config.sweep.chain.pp is not a known field. Did you mean config.sweep.chain.p?",
    ),
    ("markov:fig4", {"sweep": {"chain": {"q": [0.2, 1.0]}}}, "config.sweep.chain.q = 1.0"),
    # ---- ngrams
    ("ngrams:fig3", {"train.on_nonfinite": "ignore"}, "config.train.on_nonfinite = 'ignore'"),
    ("ngrams:fig3", {"analysis.head_threshold": 1.5}, "config.analysis.head_threshold = 1.5"),
    ("ngrams:fig3", {"analysis.flat_window": 0}, "config.analysis.flat_window = 0"),
    ("ngrams:fig3", {"analysis.min_plateau": 10**6}, "config.analysis.min_plateau = 1000000"),
    ("ngrams:fig3", {"analysis.spike_ratio": 0.5}, "config.analysis.spike_ratio = 0.5"),
    ("ngrams:fig3", {"figure.highlight_steps": [-5]}, "config.figure.highlight_steps = [-5]"),
    ("ngrams:fig3", {"figure.highlight_steps": [1.5]}, "config.figure.highlight_steps = [1.5]"),
    ("ngrams:fig3", {"lines.num_sequences": 0}, "config.lines.num_sequences = 0"),
    ("ngrams:fig3", {"lines.seed": -1}, "config.lines.seed = -1"),
    ("ngrams:fig3", {"train.floor": 1.0}, "config.train.floor = 1.0"),
    ("ngrams:fig3", {"train.test_sequences": 1}, "config.train.test_sequences = 1"),
    ("ngrams:fig3", {"train.attention_maps": "yes"}, "config.train.attention_maps = 'yes'"),
    ("ngrams:fig3", {"model.embedding": "learned"}, "config.model.embedding = 'learned'"),
    ("ngrams:fig3", {"model.mlp": True}, "config.model.mlp = True"),
    ("ngrams:fig3", {"model.readout_init": "zeros"}, "config.model.readout_init = 'zeros'"),
    ("ngrams:fig3", {"claims": "staircase,foo"}, "config.claims = 'staircase,foo'"),
    ("ngrams:fig3", {"task.order_n": 1}, "config.task.order_n = 1"),
    ("ngrams:fig3", {"task.seq_len": 3}, "config.task.seq_len = 3"),
    ("ngrams:fig4", {"variants": [{"task": {"alpha": 2.0}}]}, "config.variants[0].task.alpha"),
    ("ngrams:fig3", {"sweep": {"model": {"num_heads": 3}}}, "config.sweep.model.num_heads = 3"),
    (
        "ngrams:fig3",
        {"sweep": {"model": {"num_heads": [2, 0]}}},
        "config.sweep.model.num_heads = 0",
    ),
    ("ngrams:fig3", {"sweep": {"optim": {"lr": []}}}, "config.sweep.optim.lr = []"),
    ("ngrams:stationarity", {"stationarity.cs": [0.0]}, "config.stationarity.cs = [0.0]"),
    ("ngrams:stationarity", {"stationarity.seq_lens": [3]}, "config.stationarity.seq_lens = [3]"),
    ("ngrams:stationarity", {"stationarity.ks": [1, 4]}, "config.stationarity.ks = [1, 4]"),
    ("ngrams:stationarity", {"stationarity.log_c0": INF}, "config.stationarity.log_c0 = inf"),
    ("ngrams:stationarity", {"variants": [{}, {"model": {"num_heads": 3}}]}, "config.variants"),
    # ---- recall
    ("recall:first_jump", {"flow.atol": -1.0}, "config.flow.atol = -1.0"),
    ("recall:first_jump", {"flow.rtol": 0.0}, "config.flow.rtol = 0.0"),
    ("recall:first_jump", {"flow.num_saves": 1}, "config.flow.num_saves = 1"),
    ("recall:first_jump", {"flow.zoom": -1.0}, "config.flow.zoom = -1.0"),
    ("recall:first_jump", {"flow.log_time": "no"}, "config.flow.log_time = 'no'"),
    ("recall:ei_tail", {"flow.t_max": 0.5}, "config.flow.t_max = 0.5"),
    (
        "recall:first_jump",
        {"sweep": {"init": {"eps": [0.1, -0.1]}}},
        "config.sweep.init.eps = -0.1",
    ),
    ("recall:first_jump", {"sweep": {"optim": {"lr": [0.1, 1.0]}}}, "config.experiment = 'flow'"),
    ("recall:later_jumps", {"sweep": {"init": {"stage": [2, 5]}}}, "config.sweep.init.stage = 5"),
    (
        "recall:stages",
        {"sweep": {"init": {"beta_shape": [[1.0, 0.5]]}}},
        "config.sweep.init.beta_shape = [1.0, 0.5]",
    ),
    ("recall:fig1", {"train.on_nonfinite": "ignore"}, "config.train.on_nonfinite = 'ignore'"),
    ("recall:fig1", {"train.chunk_steps": 3}, "config.train.chunk_steps = 3"),
    ("recall:fig1", {"init.beta_shape": [1.0, "a", 0.1, 0.2]}, "config.init.beta_shape"),
    ("recall:fig1", {"init.beta_shape": [1.0, 0.5]}, "config.init.beta_shape = [1.0, 0.5]"),
    ("recall:fig1", {"init.kind": "first_jump"}, "config.init.kind = 'first_jump'"),
    ("recall:fig1", {"claims": "first_jump"}, "config.claims = 'first_jump'"),
    (
        "recall:fig1",
        {"train.sampler": "population", "model.loss": "ce"},
        "config.train.sampler = 'population'",
    ),
    ("recall:fig1", {"model.gamma": "x"}, "config.model.gamma = 'x'"),
    ("recall:fig1", {"task.k": 7}, "config.task.k = 7"),
    (
        "recall:fig1",
        {"variants": [{"model": {"num_heads": 5}}]},
        "config.variants[0].model.num_heads = 5",
    ),
    ("recall:fig1", {"sweep": [1, 2]}, "config.sweep = [1, 2]"),
    (
        "recall:fig1",
        {"sweep": {"init": {"epsilon": [0.1]}}},
        "config.sweep.init.epsilon is not a known field. Did you mean config.sweep.init.eps?",
    ),
    (
        "recall:dp_vs_ce",
        {"variants": [{"model": {"loss": "mse"}}]},
        "config.variants[0].model.loss = 'mse'",
    ),
]


@pytest.mark.parametrize(
    "spec, fields, names", BAD, ids=[f"{i}-{b[0]}-{','.join(b[1])}" for i, b in enumerate(BAD)]
)
def test_bad_config_gets_one_sentence_naming_the_field(spec, fields, names):
    cfg, experiment = load(spec)
    with pytest.raises(config_lib.ConfigError) as error:
        experiment.validate(override(cfg, fields))
    message = str(error.value)
    assert names in message, message
    assert message.startswith("config.") and "\n" not in message and message[-1] in ".?", message
    assert type(error.value) is config_lib.ConfigError


def test_kinds_are_those_of_the_defaults():
    assert validation.has_kind(2, "float") and validation.has_kind(2.5, "float")
    assert not validation.has_kind(True, "float") and not validation.has_kind("2", "float")
    assert not validation.has_kind(2.0, "int") and not validation.has_kind(False, "int")
    assert not validation.has_kind(0, "bool") and validation.has_kind(False, "bool")
    assert validation.has_kind((1, 2), ("list", "int"))
    assert not validation.has_kind([1, 2.5], ("list", "int"))
    assert validation.has_kind([[0.5, 0.8]], ("list", ("list", "float")))
    assert validation.has_kind(["anything", 1], ("list", None))


def test_missing_field_is_one_sentence():
    cfg, experiment = load("markov:fig3")
    d = cfg.to_dict()
    del d["train"]["on_nonfinite"]
    with pytest.raises(config_lib.ConfigError, match=r"config.train.on_nonfinite is missing"):
        experiment.validate(ml_collections.ConfigDict(d))
