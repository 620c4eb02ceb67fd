"""The WikiText curvature study (configs/wikitext.py:curvature) at toy size on a corpus written by
the test (never ../shared/data): the blocks of the parameters, the phase steps, and the study end
to end, its tracked λ_max against a direct eigenpairs call at a kept step."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import landscape
from configs import wikitext as wikitext_configs
from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.scan_snap import curvature_study, experiment, wikitext
from landscape.scan_snap import model as model_lib
from tests.scan_snap.test_wikitext import zipf_corpus
from tools import wikitext_page

WIDTH = 16


def _config(folder):
    """The curvature variant at toy size: width 16, 120 steps of lr 5 (FFN 10), no dropout,
    λ tracked every 40 steps by 30 Lanczos steps, parameters kept every 20, in float64."""
    c = wikitext_configs.get_config("curvature")
    c.text.update(
        path=str(folder), train_split="train", eval_split="valid", map_chunk=0, map_steps=[0, 120]
    )
    c.transformer.update(width=WIDTH, hidden=WIDTH, dropout=0.0)
    c.train.update(num_steps=120, log_every=20, params_every=20, track_every=40, track_lanczos=30)
    c.curvature.update(top_k=2, negative_k=2, max_restarts=3, spectrum_every=40)
    c.curvature.spectrum_lanczos = 10
    # float64: the suite runs with x64 on, where eigenpairs' Lanczos start of a float32 point is
    # float64 (a FutureWarning, an error here); the CLI's float32 runs have x64 off
    c.train.dtype = "float64"
    return c


def test_every_parameter_is_in_one_block_of_the_size_it_should_have():
    V, d, h = 50, 8, 6
    net = model_lib.TextTransformer(V, width=d, hidden=h, num_layers=1)
    params = net.init({"params": jax.random.key(0)}, jnp.zeros((1, 5), jnp.int32))["params"]
    labels = curvature_study.block_labels(params)
    counts = dict(zip(curvature_study.BLOCKS, np.bincount(labels, minlength=6), strict=True))
    assert counts == {
        "embedding": V * d,
        "attention Q/K": 2 * d * d + 2 * d,  # the q and k columns of qkv, kernel and bias
        "attention V/O": (d * d + d) * 2,  # v's columns and the out projection
        "FFN": d * h + h + h * d + d,
        "LayerNorm": 4 * d,
        "decoder": d * V + V,
    }
    sizes = curvature_study.block_sizes(labels)
    assert sum(sizes.values()) == pytest.approx(1.0)
    # a vector on the query/key columns alone: all its share there
    tree = jax.tree.map(np.zeros_like, params)
    tree["layers_0"]["qkv"]["kernel"][:, :d] = 1.0  # q's columns
    tree["layers_0"]["qkv"]["bias"][d : 2 * d] = 2.0  # k's bias
    vector = np.asarray(jax.flatten_util.ravel_pytree(tree)[0])
    shares = curvature_study.block_shares(vector, labels)
    assert shares["attention Q/K"] == pytest.approx(1.0) and shares["decoder"] == 0.0
    rows = np.random.default_rng(0).normal(size=(3, labels.size))
    shares = curvature_study.block_shares(rows, labels)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-12)
    assert shares["decoder"] == pytest.approx(sizes["decoder"], abs=0.05)  # random: its size


def test_the_phases_are_the_first_kept_steps_past_a_share_of_the_fall():
    steps = list(range(0, 101, 10))
    entropy = [2.6, 2.6, 2.4, 1.8, 1.0, 0.5, 0.3, 0.25, 0.22, 0.21, 0.2]
    kept = list(range(0, 101, 20))
    # fall 2.4: half is at 1.4 (first kept step at or below: 40), 90% at 0.44 (60)
    assert curvature_study.phase_steps(steps, entropy, kept, 0.5, 0.9) == {
        "scan": 40,
        "snap": 60,
        "frozen": 100,
    }
    flat = curvature_study.phase_steps(steps, [2.6] * 11, kept, 0.5, 0.9)
    assert flat == {"scan": None, "snap": None, "frozen": 100}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = zipf_corpus(tmp_path_factory.mktemp("zipf"), vocab=60, tokens=8000)
    cfg = _config(folder)
    path = tmp_path_factory.mktemp("wikitext_curvature")
    summary = experiment.run(cfg, records.Workdir.open(path), progress=None)
    return cfg, summary, path


@pytest.mark.slow
def test_the_study_tracks_probes_and_writes_its_tables(study):
    """The entropy falls (2.62 -> 1.37 in 120 steps), so scan, snap and frozen are found; the
    CSVs load with pandas, every row's shares sum to 1, the top eigenpairs are certified, and
    the tracked λ_max equals the certified λ_1 at the probed steps it was tracked at."""
    cfg, summary, path = study
    assert summary["status"] == "complete"
    phases = summary["phases"]
    assert 0 < phases["scan"] <= phases["snap"] <= phases["frozen"] == 120
    along = pd.read_csv(path / "curvature_along.csv")
    assert along["step"].tolist() == list(range(0, 121, 20))
    assert along["ritz_1"].notna().tolist() == [s % 40 == 0 for s in range(0, 121, 20)]
    grads = along[[f"grad {b}" for b in curvature_study.BLOCKS]].to_numpy()
    np.testing.assert_allclose(np.sqrt((grads**2).sum(1)), along["grad_norm"], rtol=1e-5)
    probed = pd.read_csv(path / "curvature_phases.csv")
    assert set(probed["step"]) == {phases["scan"], phases["snap"], phases["frozen"]}
    for which in ("top", "first"):
        shares = probed[[f"{which} {b}" for b in curvature_study.BLOCKS]].sum(axis=1)
        np.testing.assert_allclose(shares, 1.0, atol=1e-9)
    frozen = probed[probed["step"] == 120].iloc[0]
    assert frozen["tracked_lambda_max"] == pytest.approx(frozen["lambda_max"], rel=1e-3)
    # Both are Ritz values, so both lie above the smallest eigenvalue, which the certificate puts
    # within its residual below the certified one: the tracked value is above that bound.
    bound = frozen["lambda_min"] - json.loads(frozen["bottom_residuals"])[0]
    assert frozen["tracked_lambda_min"] >= bound
    checks = {c["claim"]: c["passed"] for c in summary["sanity_checks"]}
    assert all(v for k, v in checks.items() if k.startswith(("tracked", "the top"))), checks
    assert (path / "figures" / "curvature_study.png").stat().st_size > 10_000
    assert "Eigenpairs at run 0" in (path / "curvature.txt").read_text()


@pytest.mark.slow
def test_the_tracked_lambda_max_is_the_direct_eigenvalue_of_the_kept_point(study):
    """At the last kept step, the run's point on the study's loss (records.load, result.point)
    gives eigenpairs' λ_1 and lanczos_spectrum's top Ritz value equal to the tracked one."""
    cfg, summary, path = study
    result = records.load(path)
    loss = curvature_study.curvature_loss(cfg, wikitext.load(cfg))
    point = curvature_study.point_at(result, loss, 120)
    assert point.batches is not None and point.inputs is None
    direct = landscape.eigenpairs(
        point, 1, which="largest", dense_below=0, rtol=1e-5, progress=None
    )
    tracked = result.metrics["lambda_max"][0, list(result.tracked_steps).index(120)]
    assert tracked == pytest.approx(direct.values[0], rel=1e-3)
    assert tracked <= direct.values[0] + direct.residuals[0] + 1e-6
    ritz = landscape.lanczos_spectrum(point, 40).lambda_max
    assert ritz == pytest.approx(direct.values[0], rel=1e-4)


@pytest.mark.slow
def test_the_chunks_in_batches_are_the_mean_cross_entropy_over_every_position(tmp_path):
    """The curvature loss as a dataset in batches (one chunk a batch) equals, to float32
    rounding, the one objective over all chunks at once the study used before (a lax.map over
    the chunks) and one evaluation of every position; so do their gradients."""
    cfg = _config(zipf_corpus(tmp_path / "zipf", vocab=60, tokens=8000))
    cfg.curvature.eval_chunks = 3
    corpus = wikitext.load(cfg)
    objective, batches = curvature_study.curvature_loss(cfg, corpus)
    assert batches[0].shape == (3, cfg.text.eval_batch_size, cfg.text.bptt)
    net = wikitext.model_of(cfg, corpus.vocab_size)
    params = net.init({"params": jax.random.key(1)}, batches[0][0])["params"]
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    point = landscape.Point(params, objective=objective, batches=batches)

    def old(params, chunks):  # the chunks (C, bptt, B) stacked, one objective
        def one(pair):
            value, _ = net.apply(
                {"params": params}, pair[0].T, pair[1].T, method=model_lib.TextTransformer.loss
            )
            return value

        return jax.lax.map(one, chunks).mean()

    stacked = (jnp.swapaxes(batches[0], 1, 2), jnp.swapaxes(batches[1], 1, 2))
    every, _ = net.apply(  # every position of every chunk in one batch
        {"params": params},
        batches[0].reshape(-1, cfg.text.bptt),
        batches[1].reshape(-1, cfg.text.bptt),
        method=model_lib.TextTransformer.loss,
    )
    before = old(params, stacked)
    assert point.loss() == pytest.approx(float(before), rel=1e-6)
    assert point.loss() == pytest.approx(float(every), rel=1e-6)
    grad = landscape.gradient_at(point).vector
    expected = jax.flatten_util.ravel_pytree(jax.grad(old)(params, stacked))[0]
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("train.params_every", 0, "train.params_every"),
        ("train.track_every", 0, "train.track_every"),
        ("num_seeds", 2, "num_seeds"),
        ("claims", "fig7", "'curvature' or 'none'"),
        ("curvature.spectrum_every", 30, "curvature.spectrum_every"),
        ("curvature.snap_share", 0.3, "curvature.snap_share"),
    ],
)
def test_bad_curvature_configs_get_one_clear_sentence(tmp_path, field, value, message):
    cfg = _config(zipf_corpus(tmp_path / "zipf", vocab=60, tokens=8000))
    group, _, name = field.rpartition(".")
    (config_lib.get(cfg, group) if group else cfg)[name] = value
    with pytest.raises(config_lib.ConfigError, match=message):
        experiment.validate(cfg)


def test_the_curvature_claims_stay_with_the_curvature_experiment(tmp_path):
    cfg = wikitext_configs.get_config("fig7")
    cfg.claims = "curvature"
    cfg.text.update(path=str(zipf_corpus(tmp_path / "zipf", tokens=8000)), train_split="train")
    cfg.text.update(eval_split="valid", map_chunk=0)
    with pytest.raises(config_lib.ConfigError, match="claims"):
        experiment.validate(cfg)
    cfg = experiment.default_config()
    cfg.claims = "curvature"
    with pytest.raises(config_lib.ConfigError, match="experiment = 'curvature'"):
        experiment.validate(cfg)


def test_the_memory_estimate_counts_the_kept_parameters_and_the_probes(tmp_path):
    """Beside the training run's bytes: the kept steps, eigenpairs' search (40 + 5k + 6 = 56
    vectors of D at k = 2, as eigenpairs plans it) and one chunk's linearisation."""
    cfg = _config(zipf_corpus(tmp_path / "zipf", vocab=60, tokens=8000))
    study = experiment.memory_estimate(cfg)
    cfg.experiment, cfg.claims = "wikitext", "none"
    train = experiment.memory_estimate(cfg)
    V = wikitext.load(cfg).vocab_size
    D = 2 * V * WIDTH + V + 4 * WIDTH**2 + 2 * WIDTH**2 + 10 * WIDTH
    logits = 4 * 10 * 35 * V  # one chunk of 10 x 35 tokens at a time
    assert study.bytes - train.bytes == 8 * ((7 + 56) * D + logits)  # float64
    assert f"56 vectors of D = {D}, 7 kept steps" in study.what


def _rows(table):
    """A generated table's body rows, their cells (the header, rule and caption left out)."""
    lines = [line for line in table.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def _number(cell):
    return float(cell.replace("\N{MINUS SIGN}", "-"))


@pytest.mark.slow
def test_the_page_tables_are_the_records_numbers(study):
    """tools.pages from the study's records: the phase table's eigenvalues are
    curvature_phases.csv's, every tracked step's λ is arrays.npz's, each phase's shares are the
    CSV's, and the claims are summary.json's with their verdicts, to the digits printed."""
    _, summary, path = study
    tables = wikitext_page.wikitext_tables(wikitext_page.wikitext_extract(path))
    phases = pd.read_csv(path / "curvature_phases.csv")
    rows = _rows(tables["wikitext phases"])
    assert [int(r[0]) for r in rows] == [0, *phases["step"]]
    assert rows[0][4].endswith("(Ritz)") and rows[0][6] == ""
    for cells, (_, row) in zip(rows[1:], phases.iterrows(), strict=True):
        assert cells[1] == row["phase"]
        shown = [_number(v) for v in cells[4].split(", ")]
        np.testing.assert_allclose(shown, json.loads(row["top"]), atol=5e-4)
        assert abs(_number(cells[5]) - row["lambda_min"]) <= 5e-4
    result = records.load(path)
    along = {int(r[0]): r for r in _rows(tables["wikitext along"])}
    for i, step in enumerate(result.tracked_steps.tolist()):
        for column, name in ((4, "lambda_max"), (5, "lambda_min")):
            assert abs(_number(along[step][column]) - result.metrics[name][0, i]) <= 5e-4
    shares = _rows(tables["wikitext shares"])
    for _, row in phases.iterrows():
        top = next(r for r in shares if r[0] == str(row["step"]) and r[2].startswith("the top"))
        for cell, block in zip(top[3:], curvature_study.BLOCKS, strict=True):
            assert abs(float(cell.rstrip("%")) - 100 * row[f"top {block}"]) <= 0.5
    claims = _rows(tables["wikitext claims"])
    expected = summary["claims"] + summary["sanity_checks"]
    assert len(claims) == len(expected)
    for cells, claim in zip(claims, expected, strict=True):
        assert cells[1].replace("\\|", "|") == claim["claim"]
        assert cells[-1] in (
            ("reproduced", "holds") if claim["passed"] else ("not reproduced", "fails")
        )
