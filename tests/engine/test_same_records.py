"""The same command gives the same records bit for bit: a study page's numbers are what its
command gives, whenever it is run. Two fresh processes run the recall curvature study (at the size
its page's code block is tested at) into two workdirs; every record is compared."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMAND = [
    "-m",
    "experiments.recall",
    "--config=configs/recall.py:curvature",
    "--config.num_seeds=1",
    "--config.flow.num_saves=601",
]
# What legitimately differs between two runs of one command: when and where it ran, how long
# it took (seconds, the command naming its own workdir), and the figure's path in that workdir.
PER_RUN_SUMMARY = ("seconds", "figures")
PER_RUN_PROVENANCE = ("command", "time", "cwd", "validation_seconds")
PER_RUN_ARRAYS = ("compile_seconds", "run_seconds", "run_id")  # run_id: the run a checkpoint
# belongs to, new for every fresh run


def _run_twice(tmp_path: pathlib.Path) -> list[pathlib.Path]:
    """Both runs at once, each in its own process (a fresh JAX, as a user's rerun)."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    workdirs = [tmp_path / "first", tmp_path / "second"]
    processes = [
        subprocess.Popen(
            [sys.executable, *COMMAND, f"--workdir={w}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for w in workdirs
    ]
    for p in processes:
        output, _ = p.communicate(timeout=600)
        assert p.returncode == 0, output[-3000:]
    return workdirs


def _arrays(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files if k not in PER_RUN_ARRAYS}


def _json(path: pathlib.Path, drop: tuple[str, ...], inner: str = "") -> dict:
    data = json.loads(path.read_text())
    target = data[inner] if inner else data
    for key in drop:
        assert key in target, (path.name, key)  # a field dropped is a field there
        del target[key]
    return data


@pytest.mark.slow
def test_the_same_command_gives_the_same_records_bit_for_bit(tmp_path):
    first, second = _run_twice(tmp_path)
    names = sorted(
        p.relative_to(first).as_posix()
        for p in first.rglob("*")
        if p.is_file() and p.suffix in (".csv", ".jsonl", ".png")
    )
    assert {"metrics.jsonl", "recall_plateaus.csv", "recall_index.csv"} <= set(names)
    assert "figures/curvature_study.png" in names
    for name in names:  # the tables, the metrics, the figure: byte for byte
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    # every array, exactly, with its dtype: the records' and the checkpoint's host state
    for name in ["arrays.npz"] + [
        p.relative_to(first).as_posix() for p in first.glob("checkpoints/*/host-*.npz")
    ]:
        one, two = _arrays(first / name), _arrays(second / name)
        assert one.keys() == two.keys() and len(one) > 5, name
        for key in one:
            assert one[key].dtype == two[key].dtype and one[key].shape == two[key].shape, key
            np.testing.assert_array_equal(one[key], two[key], err_msg=f"{name}: {key}")
    summaries = [_json(w / "summary.json", PER_RUN_SUMMARY) for w in (first, second)]
    assert summaries[0] == summaries[1] and summaries[0]["claims"]
    configs = [
        _json(w / "config.json", PER_RUN_PROVENANCE, inner="provenance") for w in (first, second)
    ]
    assert configs[0] == configs[1]
