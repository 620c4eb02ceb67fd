"""n-gram experiments end to end at CI size (notes §7 "CI smoke test for Fig 3")."""

import json

import numpy as np
import pytest

from configs import ngrams
from landscape.engine import records
from landscape.ngrams import claims, experiment
from tests.arrays import load_npz
from tests.refusals import assert_refused


@pytest.mark.slow
def test_smoke_fig3_first_transition(tmp_path):
    """Notes §7: 1536 steps, one seed, 2048 test sequences -> loss < 1.63, some head with >= 0.4
    attention on -1, no head > 0.3 on -2 (the first transition only)."""
    cfg = ngrams.get_config("smoke")
    summary = experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    arrays = load_npz(tmp_path / "arrays.npz")
    loss = arrays["snapshot_test_loss"][0]
    offsets = arrays["snapshot_head_offsets"][0]  # (snaps, heads, lags)
    assert loss[-1] < 1.63, loss[-1]
    assert offsets[-1, :, 0].max() >= 0.4, offsets[-1]
    assert offsets[-1, :, 1].max() <= 0.3, offsets[-1]
    assert arrays["grad_norm"].shape == (1, 1536)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"test_loss", "head1_lag1", "head2_lag2", "norm_QK"} <= set(rows[-1])
    # the lines of notes §4.1 (Fig 3/5 row; 16384 sequences, about +-0.005)
    lines = summary["lines"]
    for name, expected in [
        ("uniform", 1.6094),
        ("1-gram +alpha", 1.6271),
        ("2-gram +alpha", 1.6160),
        ("bayes", 1.4392),
        ("1-gram opt", 1.5929),
        ("2-gram opt", 1.5488),
    ]:
        assert abs(lines[name] - expected) < 0.01, (name, lines[name], expected)
    assert (tmp_path / "figures" / "test_loss.png").exists()


@pytest.mark.slow  # the engine's vmapped-vs-alone equality: tests/engine/test_sweeps.py, every run
def test_five_seeds_vmapped_equal_single_seed(tmp_path):
    cfg = ngrams.get_config("fig5")
    cfg.train.update(num_steps=64, log_every=32, test_sequences=256)
    together = experiment.train_group(cfg, {}, progress=None)["result"]
    cfg.seed, cfg.num_seeds = 3, 1
    alone = experiment.train_group(cfg, {}, progress=None)["result"]
    np.testing.assert_allclose(together.losses[2], alone.losses[0], rtol=2e-5)
    np.testing.assert_allclose(
        together.snapshots["test_loss"][2], alone.snapshots["test_loss"][0], rtol=2e-5
    )


def test_plateau_detection_on_a_staircase():
    steps = np.arange(0, 4001, 50)
    loss = np.where(steps < 300, 1.7 - steps / 1000, np.where(steps < 2000, 1.6, 1.5))
    found = claims.plateaus(steps, loss, window=200, tol=0.01, min_length=500)
    assert [(p["level"], p["final"] if "final" in p else None) for p in found] == [
        (1.6, None),
        (1.5, None),
    ]
    assert found[0]["start"] >= 300 and found[0]["end"] < 2000 and found[1]["end"] == 4000


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("task.order_n", 1, "order_n"),
        ("task.seq_len", 3, "seq_len"),
        ("task.alpha", 0.0, "alpha"),
        ("task.num_states", 1, "num_states"),
        ("model.kind", "gpt", "config.model.kind"),
        ("train.log_every", 100, "config.train.log_every = 100"),
        ("optim.lr", -1.0, "config.optim.lr = -1.0"),
    ],
)
def test_bad_config_names_the_field(field, value, message):
    assert_refused(experiment.validate, ngrams.get_config("fig3"), {field: value}, message)


def test_stationarity_config_rejects_k_above_n():
    cfg = ngrams.get_config("stationarity")
    assert_refused(experiment.validate, cfg, {"stationarity.ks": [1, 4]}, "stationarity.ks")


@pytest.mark.slow
def test_both_measures_end_to_end_and_a_broken_claim_keeps_the_records(tmp_path, monkeypatch):
    """metrics_at = "both": arrays hold the EMA snapshots under the plain names and the current
    ones prefixed; the spike claim is checked at both measures and compared; a claim set that
    raises (a collapsed run's data, say) becomes a NOT-reproduced claim naming the error, and the
    arrays, figures and summary are still written."""
    cfg = ngrams.get_config("fig6")
    cfg.num_seeds = 1
    cfg.train.update(num_steps=128, log_every=32, test_sequences=64)
    cfg.lines.num_sequences = 256
    cfg.task.seq_len = 32
    cfg.analysis.update(flat_window=64, min_plateau=64)
    cfg.claims = "staircase,grad_norm"

    def collapsed(*args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setitem(claims.CLAIMS, "staircase", collapsed)
    summary = experiment.run(cfg, records.Workdir(tmp_path), progress=None)
    arrays = load_npz(tmp_path / "arrays.npz")
    assert (
        arrays["snapshot_test_loss"].shape == arrays["snapshot_current_test_loss"].shape == (1, 5)
    )
    assert arrays["snapshot_test_loss"][0, 0] == arrays["snapshot_current_test_loss"][0, 0]
    assert not np.array_equal(arrays["snapshot_test_loss"], arrays["snapshot_current_test_loss"])
    statements = [c["claim"] for c in summary["claims"]]
    broken = [c for c in summary["claims"] if "could not be evaluated" in c["claim"]]
    assert len(broken) == 1 and broken[0]["measured"].startswith("ZeroDivisionError")
    assert sum("spiking at the jump" in s for s in statements) == 2  # EMA and current
    assert any("larger at the parameter EMA" in s for s in statements)
    assert {r["measured_at"] for r in summary["runs"]} == {
        "at the parameter EMA (0.999)",
        "at the current parameters",
    }
    assert (tmp_path / "figures" / "grad_norm.png").stat().st_size > 0
