"""The peers benchmark's models and rows (experiments/bench/peers.py, peers_timing.py) at
D ~ 1e3; the torch parts only where torch (and PyHessian) are installed."""

import math

import numpy as np
import pytest

from experiments.bench import peers, peers_timing


def test_widths_give_the_sizes():
    for dim in peers.SIZES.values():
        hidden = peers.hidden_for(dim)
        assert peers.count(hidden) == pytest.approx(dim, rel=0.04)
        assert abs(peers.count(hidden) - dim) <= min(
            abs(peers.count(h) - dim) for h in (hidden - 1, hidden + 1)
        )


def test_the_jax_loss_is_numpy_s():
    arrays = peers.mlp_arrays(peers.hidden_for(1_000))
    point = peers.mlp_point(arrays)
    assert point.num_params == peers.count(arrays["w2"].shape[0]) == 967
    reference = peers.numpy_loss(arrays)
    assert point.loss() == pytest.approx(reference, rel=1e-6)
    assert reference == pytest.approx(math.log(10), rel=0.05)  # the init predicts ~uniformly


def test_the_torch_layout_round_trips():
    arrays = peers.mlp_arrays(11)
    v = peers.direction(arrays, 1)
    assert sum(float(np.sum(a.astype(np.float64) ** 2)) for a in v.values()) == pytest.approx(1)
    back = peers.from_torch_layout(peers.torch_layout(v))
    assert all(np.array_equal(back[k], v[k]) for k in peers.LEAVES)


def test_a_row_of_ours_at_1e3():
    row = peers_timing.measure("ours", "1e3", "trace", "all", "cpu", warm_below=60.0)
    assert row["D"] == 967
    assert row["first_s"] > row["warm_s"] > 0
    assert row["compile_seconds"] > 0
    assert row["peak_mb"] >= row["rss_ready_mb"] > 0
    assert 3.0 < row["trace"] < 5.5 and row["stderr"] < 0.5  # the dense trace is 4.10


def test_the_comparison_and_the_table():
    rows = {
        "1e3:dense": {"values": [2.0, 1.0], "trace": 10.0},
        "1e3:top5:ours": {"first_s": 4.0, "warm_s": 1.0, "peak_mb": 300.0, "values": [2.0, 1.0]},
        "1e3:top5:pyhessian_1t": {
            "first_s": 1.0,
            "warm_s": 0.5,
            "peak_mb": 400.0,
            "values": [1.0, 2.2],
        },
        "1e3:trace:ours": {"first_s": 1.0, "trace": 11.0},
        "1e3:trace:pyhessian_1t": {"error": "pyhessian not installed"},
    }
    found = peers_timing.compare(rows, "1e3")
    assert found["1e3:top5:pyhessian_1t"] == pytest.approx({"vs_ours": 0.1, "vs_dense": 0.1})
    assert found["1e3:trace:ours"] == pytest.approx({"trace_vs_dense": 0.1})
    assert "1e3:trace:pyhessian_1t" not in found
    text = peers_timing.table({**rows, "1e3:agreement": found})
    line = next(x for x in text.splitlines() if x.startswith("1e3:top5:pyhessian_1t"))
    assert line.split()[1:7] == ["1", "0.5", "400", "4.00", "2.00", "0.75"]
    assert "pyhessian not installed" in text


def test_the_plan_leaves_the_peers_out_where_they_have_no_probe():
    specs = peers_timing.plan("1e3", ["top5_rtol", "slq"], ["ours", "curvlinops"], ["1"])
    assert specs == [
        "check:1e3:-:all",
        "dense:1e3:-:all",
        "ours:1e3:top5_rtol:all",
        "ours:1e3:slq:all",
    ]
    assert peers_timing.plan("wikitext", ["hvp", "top5"], ["ours", "pyhessian"], ["1"]) == [
        "ours:wikitext:top5:all"
    ]


def test_jax_and_torch_agree():
    pytest.importorskip("torch")
    found = peers.agreement(peers.mlp_arrays(peers.hidden_for(1_000)))
    assert found["loss_jax_rel"] < 1e-6 and found["loss_torch_rel"] < 1e-6
    assert found["grad_rel"] < 1e-5


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_a_row_of_pyhessian_at_1e3():
    pytest.importorskip("torch")
    pytest.importorskip("pyhessian")
    row = peers_timing.measure("pyhessian", "1e3", "hvp", "1", "cpu", warm_below=60.0)
    ours = peers_timing.measure("ours", "1e3", "hvp", "all", "cpu", warm_below=60.0)
    assert row["vHv"] == pytest.approx(ours["vHv"], rel=1e-5)


def test_a_missing_peer_is_a_row_saying_so(monkeypatch, capsys):
    monkeypatch.setattr(peers_timing, "_installed", lambda module: module != "pyhessian")
    peers_timing.child("pyhessian:1e3:top5:1:cpu")
    line = capsys.readouterr().out.strip()
    assert line == 'ROW {"error": "pyhessian not installed (pip install -e \'.[peers]\')"}'
