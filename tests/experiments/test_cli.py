"""The four CLIs on bad input: exit status 2, no traceback, one sentence, nothing created.

Run in-process through `cli.main` (fast: no interpreter start, no compiling); one case runs as
a real subprocess to check what a user sees.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import configs.markov
import configs.ngrams
import configs.recall
from experiments import cli
from landscape.engine import config as config_lib
from landscape.engine import overrides, records
from landscape.markov import experiment as markov
from landscape.ngrams import experiment as ngrams
from landscape.recall import experiment as recall
from landscape.scan_snap import experiment as scan_snap
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPERS = {"scan_snap": scan_snap, "markov": markov, "ngrams": ngrams, "recall": recall}
DEFAULT = {
    "scan_snap": "configs/syn_small.py",
    "markov": "configs/markov.py",
    "ngrams": "configs/ngrams.py",
    "recall": "configs/recall.py",
}

# (paper, arguments (a default --config is added unless one is given), words the sentence has)
BAD = [
    (
        "scan_snap",
        ["--config.optim.lr_y=0.5"],
        "config.optim.lr_y is not a known field. Did you mean config.optim.lr_z?",
    ),
    ("scan_snap", ["--config.optim.lr_z=-0.5"], "config.optim.lr_z = -0.5: must be a number > 0"),
    ("scan_snap", ["--config=configs/nope.py"], "no config file configs/nope.py"),
    ("scan_snap", ["--config=configs/syn_small.py:nope"], "unknown variant 'nope'"),
    ("scan_snap", ["--config=configs/scan_snap_theory.py:x"], "has no variants"),
    ("scan_snap", ["--config=README.md"], "a config is a .py file"),
    ("scan_snap", ["--config.train.num_steps=abc"], "config.train.num_steps"),
    ("scan_snap", ["--config.train.num_steps=2.5"], "config.train.num_steps"),
    ("scan_snap", ["--config.train.log_every=3"], "config.train.log_every"),
    ("scan_snap", ["--config.train.chunk_steps=3"], "config.train.chunk_steps"),
    ("scan_snap", ["--config.model.normalize=maybe"], "config.model.normalize"),
    (
        "scan_snap",
        ["--config.sweep.optim.lr_q=[1.0]"],
        "config.sweep.optim.lr_q is not a known field",
    ),
    ("scan_snap", ["--config.sweep.optim.lr_z=0.5"], "config.sweep.optim.lr_z"),
    ("scan_snap", ["--config.sweep.optim.lr_z=[]"], "non-empty"),
    ("scan_snap", ["--config.optim=1"], "config.optim is a group of fields"),
    ("scan_snap", ["--config.data.num_last=0"], "config.data.num_last"),
    ("scan_snap", ["--config.optim.name=sgdd"], "config.optim.name"),
    ("scan_snap", ["--config.train.batch_size=1000000000"], "needs about"),
    ("scan_snap", ["extra"], "unexpected argument 'extra'"),
    ("scan_snap", ["--config.optim.lr_z"], "needs a value"),
    ("scan_snap", ["--workdri=x"], "workdri"),
    ("scan_snap", ["--host_devices=0"], "host_devices"),
    ("scan_snap", ["--formulations=gpu"], "formulations"),
    ("markov", ["--config.chain.p=0"], "config.chain.p = 0"),
    ("markov", ["--config.chain.p=1.5"], "config.chain.p = 1.5"),
    ("markov", ["--config.chain.num_states=1"], "config.chain.num_states"),
    ("markov", ["--config.train.on_nonfinite=ignore"], "config.train.on_nonfinite"),
    (
        "markov",
        ["--config=configs/markov.py:landscape", "--config.landscape.d=-1"],
        "config.landscape.d",
    ),
    (
        "markov",
        ["--config=configs/markov.py:fig1", "--config.model.num_layers=4"],
        "set by this config's variants",
    ),
    ("markov", ["--config.model.family=transformer"], "config.model.family"),
    ("markov", ["--config.model.layer_norm=True"], "config.model.layer_norm"),
    (
        "markov",
        ["--config=configs/markov.py:fig3", "--config.sweep.chain.p=[0.1,0.2,0.3]"],
        "config.sweep",
    ),
    ("markov", ["--config.model.seq_len=1000000"], "needs about"),
    ("markov", ["--config.optim.lr=0"], "config.optim.lr = 0"),
    ("markov", ["--config=configs/markov.py:fig9"], "unknown variant 'fig9'"),
    (
        "ngrams",
        ["--config=configs/ngrams.py:smoke", "--config.task.seq_len=10000000"],
        "needs about",
    ),
    ("ngrams", ["--config.task.order_n=0"], "config.task"),
    ("ngrams", ["--config.claims=foo"], "config.claims"),
    ("ngrams", ["--config.model.kind=mlp"], "config.model.kind"),
    ("ngrams", ["--config.train.on_nonfinite=ignore"], "config.train.on_nonfinite"),
    ("ngrams", ["--config.task.alpha=-1"], "config.task"),
    ("ngrams", ["--config.train.test_sequences=0"], "config.train.test_sequences"),
    (
        "recall",
        ["--config=configs/recall.py:first_jump", "--config.flow.atol=-1.0"],
        "config.flow.atol",
    ),
    ("recall", ["--config.init.eps=-1"], "config.init.eps = -1.0: must be a number > 0"),
    ("recall", ["--config.model.num_heads=7"], "config.model.num_heads"),
    ("recall", ["--config.train.sampler=foo"], "config.train.sampler"),
    ("recall", ["--config.init.beta_shape=[1.0]"], "config.init.beta_shape"),
    ("recall", ["--config.train.chunk_steps=3"], "config.train.chunk_steps"),
    ("recall", ["--config.train.on_nonfinite=ignore"], "config.train.on_nonfinite"),
    (
        "recall",
        ["--config=configs/recall.py:fig1", "--config.optim.momentum=1.5"],
        "config.optim.momentum",
    ),
]


def _main(paper, args, capsys):
    if not any(a.startswith("--config=") for a in args):
        args = [f"--config={DEFAULT[paper]}"] + args
    status = cli.main(PAPERS[paper], [f"experiments/{paper}.py"] + args)
    out = capsys.readouterr()
    return status, out


def _assert_one_sentence(status, out, words):
    assert status == 2, (status, out.err)
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert lines, out
    assert words in lines[-1], lines[-1]


@pytest.mark.parametrize("paper, args, words", BAD, ids=[f"{p}:{' '.join(a)}" for p, a, _ in BAD])
def test_bad_input_gets_one_sentence(paper, args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    workdir = tmp_path / "w"
    status, out = _main(paper, args + [f"--workdir={workdir}"], capsys)
    _assert_one_sentence(status, out, words)
    assert not workdir.exists()


def test_bad_config_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    files = {
        "syntax.py": ("def get_config(:\n", "syntax.py:1: SyntaxError"),
        "raises.py": (
            "import math\n\ndef get_config():\n    return undefined_name\n",
            "raises.py:4: NameError",
        ),
        "empty.py": ("x = 1\n", "has no get_config() function"),
    }
    for name, (text, words) in files.items():
        (tmp_path / name).write_text(text)
        status, out = _main(
            "scan_snap", [f"--config={tmp_path / name}", f"--workdir={tmp_path / 'w'}"], capsys
        )
        _assert_one_sentence(status, out, words)
    assert not (tmp_path / "w").exists()


def test_workdir_policy(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    a_file = tmp_path / "file"
    a_file.write_text("")
    used = tmp_path / "used"
    records.Workdir(used).write_config({"name": "earlier"})  # a run's, its manifest says
    config = (used / "config.json").read_text()
    (used / "notes.txt").write_text("the user's")
    empty = tmp_path / "empty"
    cases = [
        ([f"--workdir={a_file}"], "is a file"),
        ([f"--workdir={a_file}/sub"], "lies under the file"),
        ([f"--workdir={used}"], "already holds the records of an earlier run"),
        ([f"--workdir={used}", "--overwrite", "--resume"], "exclude each other"),
        ([f"--workdir={used}", "--overwrite"], "holds files no run wrote (notes.txt)"),
        (["--resume"], "--resume needs --workdir"),
        ([f"--workdir={empty}", "--resume"], "holds no records"),
    ]
    for args, words in cases:
        status, out = _main("scan_snap", args, capsys)
        _assert_one_sentence(status, out, words)
    assert not empty.exists() and (used / "config.json").read_text() == config
    assert (used / "notes.txt").read_text() == "the user's"


def test_missing_config_flag(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    status = cli.main(scan_snap, ["experiments/scan_snap.py"])
    _assert_one_sentence(status, capsys.readouterr(), "--config is required")


@pytest.mark.parametrize("paper", [scan_snap, markov])
def test_help_lists_the_flags(paper, capsys):
    assert cli.main(paper, ["experiments/x.py", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--config:", "--workdir:", "--resume:", "--host_devices:"):
        assert flag in out


def test_a_subprocess_sees_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.scan_snap",
            "--config=configs/syn_small.py",
            "--config.optim.lr_y=0.5",
            f"--workdir={tmp_path / 'w'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "config.optim.lr_y is not a known field. Did you mean config.optim.lr_z?"
    )
    assert not (tmp_path / "w").exists()


def test_the_main_job_fills_its_compilation_cache_and_reads_it_back(tmp_path):
    """--compilation_cache=DIR: the first run writes its programs there, a second run of the same
    command loads them (the same records, fewer seconds compiling)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    cache = tmp_path / "cache"

    def main_job(name):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "experiments.scan_snap",
                "--config=configs/syn_small.py",
                f"--compilation_cache={cache}",
                f"--workdir={tmp_path / name}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        assert f"compilation cache: {cache}" in out.stdout
        return json.loads((tmp_path / name / "summary.json").read_text())

    first = main_job("first")
    entries = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert entries, "nothing was cached"
    second = main_job("second")
    # every program the first run cached was a hit (read, not written again); a program that
    # compiled under the cache's 0.1 s threshold the first time and over it under load the
    # second time may be added
    after = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert {name: after.get(name) for name in entries} == entries
    assert second["claims"] == first["claims"]
    assert second["timing"]["compile_seconds"] < first["timing"]["compile_seconds"]


def test_overrides_parse_as_the_fields_type():
    data = {"a": {"flag": False, "n": 3, "x": 0.5, "name": "sgd", "xs": [1, 2]}, "sweep": {}}
    schema = config_lib.flatten(data)
    overrides.apply_overrides(
        data,
        [
            ("a.flag", "true"),
            ("a.n", "4"),
            ("a.x", "1"),
            ("a.name", "adam"),
            ("a.xs", "[3, 4, 5]"),
            ("sweep.a.x", "[0.1, 0.2]"),
        ],
        schema,
    )
    assert data["a"] == {"flag": True, "n": 4, "x": 1.0, "name": "adam", "xs": [3, 4, 5]}
    assert isinstance(data["a"]["x"], float) and data["sweep"] == {"a": {"x": [0.1, 0.2]}}
    notes = overrides.apply_overrides(data, [("a.x", "0.3")], schema)  # fixes the swept field
    assert data["sweep"] == {} and data["a"]["x"] == 0.3 and "replaces the sweep" in notes[0]


SHIPPED = [
    (paper, f"configs/{file}.py", variant)
    for paper, file, variants in [
        ("scan_snap", "syn_small", ["fig4", "fig4_left", "fig4_right", "fig5_adam"]),
        ("scan_snap", "syn_medium", ["paper", "quick"]),
        ("markov", "markov", configs.markov.VARIANTS),
        ("ngrams", "ngrams", configs.ngrams.VARIANTS),
        ("recall", "recall", configs.recall.VARIANTS),
    ]
    for variant in variants
]


def test_start_up_checks_are_fast(monkeypatch):
    """Loading, overriding and validating (memory estimate included): <= 50 ms per config."""
    import ml_collections

    monkeypatch.chdir(ROOT)
    slowest = 0.0
    for paper, file, variant in SHIPPED:
        experiment = PAPERS[paper]
        schema = config_lib.flatten(experiment.default_config())
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            data = overrides.load_config(f"{file}:{variant}")
            overrides.apply_overrides(data, [("seed", "1")], schema)
            experiment.validate(ml_collections.ConfigDict(data))
            best = min(best, time.perf_counter() - start)
        slowest = max(slowest, best)
    assert slowest < 0.05, slowest


def test_a_record_reruns_exactly(tmp_path, capsys, monkeypatch):
    """--config=<workdir>/config.json reruns a run: the same rows and arrays; swept values are
    recorded as the config's numbers, structural tags with their types."""
    monkeypatch.chdir(ROOT)
    first, again = tmp_path / "first", tmp_path / "again"
    args = [
        "--config=configs/syn_medium.py:quick",
        "--config.train.num_steps=20",
        "--config.sweep.optim.lr_z=[0.35, 1.0]",
        "--config.num_seeds=1",
    ]
    assert cli.main(scan_snap, ["scan_snap", *args, f"--workdir={first}"]) == 0
    assert (
        cli.main(scan_snap, ["scan_snap", f"--config={first}/config.json", f"--workdir={again}"])
        == 0
    )
    capsys.readouterr()
    rows = (first / "metrics.jsonl").read_text()
    assert rows == (again / "metrics.jsonl").read_text()
    rows = [json.loads(line) for line in rows.splitlines()]
    assert {row["optim.lr_z"] for row in rows} == {0.35, 1.0}  # not 0.3499999940395355
    assert {row["data.num_last"] for row in rows} == {1, 3}  # ints, not "1" and "3"
    arrays_a, arrays_b = load_npz(first / "arrays.npz"), load_npz(again / "arrays.npz")
    for name in list(arrays_a):
        np.testing.assert_array_equal(arrays_a[name], arrays_b[name])
    config = json.loads((again / "config.json").read_text())
    assert config["sweep"]["optim"]["lr_z"] == [0.35, 1.0]
    assert config["provenance"]["command"].endswith(f"--workdir={again}")
    assert set(config["provenance"]) >= {"packages", "git", "backend", "device_count"}


@pytest.mark.slow
def test_formulations_flag_traces_the_plain_attention(tmp_path, capsys, monkeypatch):
    """--formulations=plain: the GPT-2 Markov model traces the dense masked softmax instead of the
    CPU's tiled attention (N = 128 in tiles of 64); the same losses up to float rounding; the
    choice is recorded in the provenance and the process's own choice is back afterwards."""
    from landscape.engine import backend
    from landscape.markov import attention

    tiled = []
    original = attention._tiled_attention
    monkeypatch.setattr(
        attention, "_tiled_attention", lambda *qkv: tiled.append(1) or original(*qkv)
    )
    monkeypatch.chdir(ROOT)
    args = [
        "--config=configs/markov.py:fig3_gpt",
        "--config.train.num_steps=20",
        "--config.train.log_every=10",
        "--config.num_seeds=1",
        "--config.variants=[]",
        "--config.sweep={}",
    ]
    losses, traced = {}, {}
    for formulations in ("cpu", "plain"):
        workdir = tmp_path / formulations
        tiled.clear()
        assert (
            cli.main(
                markov, ["markov", *args, f"--workdir={workdir}", f"--formulations={formulations}"]
            )
            == 0
        )
        traced[formulations] = len(tiled)
        config = json.loads((workdir / "config.json").read_text())
        assert config["provenance"]["formulations"] == formulations
        losses[formulations] = load_npz(workdir / "arrays.npz")["losses"]
    capsys.readouterr()
    assert traced["cpu"] > 0 and traced["plain"] == 0, traced
    assert backend.current() == "cpu"
    np.testing.assert_allclose(losses["plain"], losses["cpu"], rtol=1e-5)


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1"])
def test_checkpoint_seconds_must_be_a_finite_time(seconds, tmp_path, capsys, monkeypatch):
    """NaN passed absl's lower bound, and a run given it never kept a checkpoint."""
    monkeypatch.chdir(ROOT)
    workdir = tmp_path / "w"
    status, out = _main(
        "scan_snap", [f"--checkpoint_seconds={seconds}", f"--workdir={workdir}"], capsys
    )
    _assert_one_sentence(status, out, f"--checkpoint_seconds={seconds}")
    assert not workdir.exists()
    with pytest.raises(records.WorkdirError, match=r"checkpoint_seconds=nan: give a finite"):
        records.Workdir(tmp_path / "api", checkpoint_seconds=float("nan"))
    assert not (tmp_path / "api").exists()
