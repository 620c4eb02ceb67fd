"""The WikiText experiments (Figs. 7, 10) end to end on corpora written by the tests.

Never on ../shared/data: the CI check of notes §7.3 trains a small 1-layer model on a synthetic
Zipf corpus in which a token often repeats a fixed map of the token two places back, so attention
has something to find (a pure unigram or bigram corpus needs no attention: the residual stream
carries the current token).
"""

import csv
import json
import pathlib

import numpy as np
import pytest

from configs import wikitext as wikitext_configs
from experiments import cli
from landscape.engine import config as config_lib
from landscape.scan_snap import experiment, text, wikitext
from tests.arrays import load_npz

ROOT = pathlib.Path(__file__).resolve().parents[2]


def zipf_corpus(folder: pathlib.Path, vocab=500, tokens=50_000, copy=0.7, seed=0):
    """train.txt / valid.txt: Zipf(1) tokens w0..w{vocab-1}; with probability `copy`, x_t =
    pi(x_{t-2}) for a fixed permutation pi."""
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, vocab + 1)
    x = rng.choice(vocab, size=tokens, p=p / p.sum())
    pi, copies = rng.permutation(vocab), rng.random(tokens) < copy
    for t in range(2, tokens):
        if copies[t]:
            x[t] = pi[x[t - 2]]
    lines = [" ".join(f"w{i}" for i in x[s : s + 20]) for s in range(0, tokens, 20)]
    folder.mkdir(parents=True, exist_ok=True)
    cut = len(lines) * 4 // 5
    (folder / "train.txt").write_text("\n".join(lines[:cut]), encoding="utf-8")
    (folder / "valid.txt").write_text("\n".join(lines[cut:]), encoding="utf-8")
    return folder


def small(folder, **overrides):
    """Fig. 10's config at toy size over `folder` (train on train, evaluate on valid)."""
    c = wikitext_configs.get_config("fig10")
    c.text.update(
        path=str(folder), train_split="train", eval_split="valid", eval_chunks=8, map_chunk=0
    )
    c.transformer.update(width=32, hidden=32, dropout=0.0)
    for path, value in overrides.items():
        group, _, name = path.rpartition(".")
        (config_lib.get(c, group) if group else c)[name] = value
    return c


def _main(cfg_args, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    status = cli.main(experiment, ["experiments/scan_snap.py", *cfg_args])
    return status, capsys.readouterr()


@pytest.mark.slow
def test_attention_entropy_falls_and_falls_further_at_a_larger_lr(tmp_path, capsys, monkeypatch):
    """notes §7.3's CI version of Figs. 7 and 10: after 200 SGD steps the layer-0 entropy is below
    its step-0 value, and lower at lr 5 than at lr 1 (measured: 2.621 -> 2.49 at lr 1, 1.30 at
    lr 5); both runs are one vmapped program."""
    folder = zipf_corpus(tmp_path / "zipf")
    args = [
        "--config=configs/wikitext.py:fig10",
        f"--config.text.path={folder}",
        "--config.text.train_split=train",
        "--config.text.eval_split=valid",
        "--config.text.eval_chunks=8",
        "--config.text.map_chunk=0",
        "--config.transformer.width=32",
        "--config.transformer.hidden=32",
        "--config.transformer.dropout=0.0",
        "--config.num_seeds=1",
        "--config.train.num_steps=200",
        "--config.train.log_every=50",
        "--config.text.map_steps=[0,200]",
        "--config.sweep.optim.lr_z=[1.0,5.0]",
        f"--workdir={tmp_path / 'run'}",
    ]
    status, out = _main(args, tmp_path, capsys, monkeypatch)
    assert status == 0, out.err
    assert "trained on train" in out.out and "evaluated on valid" in out.out
    arrays = load_npz(tmp_path / "run" / "arrays.npz")
    entropy = arrays["snapshot_entropy_layer0"]  # (runs, snapshots)
    np.testing.assert_array_equal(arrays["optim_lr_z"], [1.0, 5.0])
    uniform = np.log(np.arange(1, 36)).mean()  # 2.6325: uniform rows
    assert entropy[:, 0] == pytest.approx(uniform, abs=0.03)  # near-uniform at init
    assert np.all(entropy[:, -1] < entropy[:, 0] - 0.05)  # the fall
    assert entropy[1, -1] < entropy[0, -1] - 0.3  # lr 5 sparser than lr 1
    rows = list(csv.DictReader((tmp_path / "run" / "final_by_run.csv").read_text().splitlines()))
    assert [float(r["lr"]) for r in rows] == [1.0, 5.0]
    assert float(rows[1]["entropy_layer0"]) == pytest.approx(entropy[1, -1], rel=1e-6)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["data"]["train_split"] == "train" and summary["data"]["eval_split"] == "valid"
    statements = [c["claim"] for c in summary["claims"]]
    assert any("falls as the lr rises" in s for s in statements)  # 2 lrs: not enough, NO
    assert summary["reproduced"] == 0
    for name in ("attention_maps", "entropy_curves", "entropy_vs_lr"):
        assert (tmp_path / "run" / "figures" / f"{name}.png").stat().st_size > 10_000
    metrics = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    logged = [m for m in metrics if "val_perplexity" in m]
    assert logged and all(
        m["val_perplexity"] == pytest.approx(np.exp(m["val_loss"]), rel=1e-5) for m in logged
    )


@pytest.mark.slow  # 50 s under the suite's load: two compiled programs
def test_fig7_runs_each_depth_and_checks_its_claims(tmp_path):
    """Fig. 7's shape at toy size: one program per depth, layer-0 maps at the map steps, the
    claims evaluated per depth (not expected to hold in 20 steps)."""
    folder = zipf_corpus(tmp_path / "zipf", tokens=8000)
    cfg = wikitext_configs.get_config("fig7")
    cfg.text.update(
        path=str(folder),
        train_split="train",
        eval_split="valid",
        eval_chunks=2,
        map_chunk=1,
        map_column=3,
        map_steps=[0, 10, 20],
    )
    cfg.transformer.update(width=16, hidden=16)
    cfg.train.update(num_steps=20, log_every=10)
    from landscape.engine import records

    summary = experiment.run(cfg, records.Workdir.open(tmp_path / "run"), progress=None)
    arrays = load_npz(tmp_path / "run" / "arrays.npz")
    assert arrays["cell0_snapshot_attention_maps"].shape == (1, 3, 1, 35, 35)
    assert arrays["cell1_snapshot_attention_maps"].shape == (1, 3, 3, 35, 35)
    np.testing.assert_array_equal(arrays["cell1_snapshot_steps"], [0, 10, 20])
    statements = [c["claim"] for c in summary["claims"]]
    assert sum("1 layer:" in s for s in statements) == 2
    assert sum("3 layers:" in s for s in statements) == 2
    assert (tmp_path / "run" / "figures" / "attention_maps.png").stat().st_size > 10_000


@pytest.mark.slow  # 20 s; the default suite checks the step (test_training) and the chunks
def test_each_step_reads_the_next_chunk_in_order(tmp_path):
    """The loss at step s is the loss on training chunk s mod (chunks an epoch): a run with
    lr ~ 0 sees the same losses in its second epoch as in its first."""
    folder = zipf_corpus(tmp_path / "zipf", tokens=4000)
    cfg = small(
        folder,
        **{
            "train.num_steps": 10,
            "train.log_every": 10,
            "text.map_steps": [0, 10],
            "train.batch_size": 20,
        },
    )
    cfg.sweep, cfg.claims, cfg.num_seeds = {}, "none", 1
    cfg.optim.lr_z = 1e-12
    corpus = wikitext.load(cfg)
    per_epoch = text.num_chunks(corpus.train.shape[0], 35)
    assert per_epoch == 4  # 3200 tokens / 20 columns / 35
    from landscape.engine import records

    experiment.run(cfg, records.Workdir.open(tmp_path / "run"), progress=None)
    losses = load_npz(tmp_path / "run" / "arrays.npz")["losses"][0]
    np.testing.assert_allclose(losses[4:8], losses[:4], rtol=1e-5)
    assert np.ptp(losses[:4]) > 1e-3  # the chunks differ


@pytest.mark.parametrize(
    "field, value, message",
    [
        (
            "text.path",
            "/nowhere/wt2",
            r"config.text.path = '/nowhere/wt2': must be a WikiText "
            r"folder: there is no folder '/nowhere/wt2'",
        ),
        (
            "text.train_split",
            "test",
            r"config.text.path = .*: must be a WikiText folder: .* has no "
            r"test split \(test.txt or wiki.test.tokens\); it holds train",
        ),
        (
            "text.map_steps",
            [0, 151],
            r"config.text.map_steps = \[0, 151\]: must be a list of "
            r"multiples of train.log_every = \d+ in \[0, train.num_steps",
        ),
        ("transformer.width", 33, r"config.transformer.width = 33: must be even"),
        ("text.map_column", 10, r"config.text.map_column = 10: must be an integer in \[0, 9\]"),
        (
            "claims",
            "fig6",
            r"config.claims = 'fig6': must be one of \('fig7', 'fig10', 'none'\) for "
            r"experiment = 'wikitext'",
        ),
        ("optim.clip_norm", -1.0, r"config.optim.clip_norm = -1.0: must be a number >= 0"),
    ],
)
def test_bad_wikitext_configs_get_one_clear_sentence(tmp_path, field, value, message):
    cfg = small(zipf_corpus(tmp_path / "zipf", tokens=8000), **{field: value})
    with pytest.raises(config_lib.ConfigError, match=message):
        experiment.validate(cfg)


def test_every_variant_validates_and_yz_claims_stay_with_the_yz_model(tmp_path):
    folder = zipf_corpus(tmp_path / "zipf", tokens=30_000)
    for variant in wikitext_configs.VARIANTS:
        cfg = wikitext_configs.get_config(variant)
        cfg.text.update(path=str(folder), train_split="train", eval_split="valid", map_chunk=0)
        experiment.validate(cfg)
    cfg = experiment.default_config()
    cfg.claims = "fig7"
    with pytest.raises(
        config_lib.ConfigError,
        match=r"config.claims = 'fig7': must be one of "
        r"fig4, fig5, fig6, none",
    ):
        experiment.validate(cfg)


def test_memory_estimate_counts_the_vocabulary(tmp_path):
    cfg = small(zipf_corpus(tmp_path / "zipf", tokens=8000), num_seeds=1)
    vocab = wikitext.load(cfg).vocab_size
    one = experiment.memory_estimate(cfg)
    cfg.num_seeds = 10
    ten = experiment.memory_estimate(cfg)
    assert f"5 run(s) at once x a vocabulary of {vocab} types" in one.what
    assert ten.bytes - 6e8 == pytest.approx(10 * (one.bytes - 6e8))
