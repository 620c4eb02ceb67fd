"""The peers benchmark's models and rows (experiments/bench/peers.py, peers_timing_rows.py) at
D ~ 1e3; the torch parts only where torch (and PyHessian) are installed."""

import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from experiments.bench import peers, peers_data, peers_timing_rows

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_widths_give_the_sizes():
    for dim in peers_data.SIZES.values():
        hidden = peers_data.hidden_for(dim)
        assert peers_data.count(hidden) == pytest.approx(dim, rel=0.04)
        assert abs(peers_data.count(hidden) - dim) <= min(
            abs(peers_data.count(h) - dim) for h in (hidden - 1, hidden + 1)
        )


def test_the_jax_loss_is_numpy_s():
    arrays = peers_data.mlp_arrays(peers_data.hidden_for(1_000))
    point = peers.mlp_point(arrays)
    assert point.num_params == peers_data.count(arrays["w2"].shape[0]) == 967
    reference = peers_data.numpy_loss(arrays)
    assert point.loss() == pytest.approx(reference, rel=1e-6)
    assert reference == pytest.approx(math.log(10), rel=0.05)  # the init predicts ~uniformly


def test_the_torch_layout_round_trips():
    arrays = peers_data.mlp_arrays(11)
    v = peers_data.direction(arrays, 1)
    assert sum(float(np.sum(a.astype(np.float64) ** 2)) for a in v.values()) == pytest.approx(1)
    back = peers_data.from_torch_layout(peers_data.torch_layout(v))
    assert all(np.array_equal(back[k], v[k]) for k in peers_data.LEAVES)


def test_a_row_of_ours_at_1e3():
    row = peers_timing_rows.measure("ours", "1e3", "trace", "all", "cpu", warm_below=60.0)
    assert row["D"] == 967
    assert row["first_s"] > row["warm_s"] > 0
    assert row["compile_seconds"] > 0
    assert row["peak_mb"] >= row["rss_ready_mb"] >= row["rss_imports_mb"] > 0
    assert 3.0 < row["trace"] < 5.5 and row["stderr"] < 0.5  # the dense trace is 4.10


def test_the_comparison_and_the_table():
    rows = {
        "1e3:dense": {"values": [2.0, 1.0], "trace": 10.0},
        "1e3:top5:ours": {
            "first_s": 4.0,
            "warm_s": 1.0,
            "peak_mb": 300.0,
            "values": [2.0, 1.0],
            "num_hvps": 68,
            "num_hvps_check": 23,
        },
        "1e3:top5:pyhessian_1t": {
            "first_s": 1.0,
            "warm_s": 0.5,
            "peak_mb": 400.0,
            "values": [1.0, 2.2],
        },
        "1e3:trace:ours": {"first_s": 1.0, "trace": 11.0},
        "1e3:trace:pyhessian_1t": {"error": "pyhessian not installed"},
    }
    found = peers_timing_rows.compare(rows, "1e3")
    assert found["1e3:top5:pyhessian_1t"] == pytest.approx({"vs_ours": 0.1, "vs_dense": 0.1})
    assert found["1e3:trace:ours"] == pytest.approx({"trace_vs_dense": 0.1})
    assert "1e3:trace:pyhessian_1t" not in found
    text = peers_timing_rows.table({**rows, "1e3:agreement": found})
    line = next(x for x in text.splitlines() if x.startswith("1e3:top5:pyhessian_1t"))
    assert line.split()[1:7] == ["1", "0.5", "400", "4.00", "2.00", "0.75"]
    assert "pyhessian not installed" in text
    ours = next(x for x in text.splitlines() if x.startswith("1e3:top5:ours"))
    assert "68 HVPs (23 check)" in ours  # the multiplicity check's products apart


def test_the_plan_leaves_the_peers_out_where_they_have_no_probe():
    specs = peers_timing_rows.plan("1e3", ["top5_rtol", "slq"], ["ours", "curvlinops"], ["1"])
    assert specs == [
        "check:1e3:-:all",
        "dense:1e3:-:all",
        "ours:1e3:top5_rtol:all",
        "ours:1e3:slq:all",
    ]
    assert peers_timing_rows.plan("wikitext", ["hvp", "top5"], ["ours", "pyhessian"], ["1"]) == [
        "ours:wikitext:top5:all"
    ]


def test_jax_and_torch_agree():
    pytest.importorskip("torch")
    found = peers.agreement(peers_data.mlp_arrays(peers_data.hidden_for(1_000)))
    assert found["loss_jax_rel"] < 1e-6 and found["loss_torch_rel"] < 1e-6
    assert found["grad_rel"] < 1e-5


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_a_row_of_pyhessian_at_1e3():
    pytest.importorskip("torch")
    pytest.importorskip("pyhessian")
    row = peers_timing_rows.measure("pyhessian", "1e3", "hvp", "1", "cpu", warm_below=60.0)
    ours = peers_timing_rows.measure("ours", "1e3", "hvp", "all", "cpu", warm_below=60.0)
    assert row["vHv"] == pytest.approx(ours["vHv"], rel=1e-5)


def test_a_missing_peer_is_a_row_saying_so(monkeypatch, capsys):
    monkeypatch.setattr(peers_timing_rows, "_installed", lambda module: module != "pyhessian")
    peers_timing_rows.child("pyhessian:1e3:top5:1:cpu")
    line = capsys.readouterr().out.strip()
    assert line == 'ROW {"error": "pyhessian not installed (pip install -e \'.[peers]\')"}'


def test_a_peer_s_process_imports_no_jax():
    """A torch peer's child holds its own stack alone: the timing module, the torch peers and
    the data they read import nothing of JAX (their peak memory is theirs)."""
    code = (
        "import sys\n"
        "from experiments.bench import peers_data, peers_timing, peers_timing_rows, peers_torch\n"
        "assert peers_timing_rows.STACKS['pyhessian'] == ('torch', 'pyhessian')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'landscape')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_every_process_reads_the_same_saved_arrays(tmp_path):
    path = peers_data.save("1e3", tmp_path)
    assert path == tmp_path / "mlp_1e3.npz"
    read, drawn = peers_data.load("1e3", str(tmp_path)), peers_data.load("1e3", None)
    assert sorted(read) == sorted(drawn) and all(np.array_equal(read[k], drawn[k]) for k in read)
    assert read["w1"].dtype == np.float32 and read["y"].dtype == np.int32


def test_the_eigsh_row_is_arpack_over_our_products():
    """ARPACK's top-5 at D = 967 over hvp_flat: its products counted, its residuals measured by
    fresh products, the same values as our certified search's."""
    row = peers_timing_rows.measure("eigsh", "1e3", "top5", "all", "cpu", warm_below=0.0)
    ours = peers_timing_rows.measure("ours", "1e3", "top5", "all", "cpu", warm_below=0.0)
    assert row["D"] == ours["D"] == 967
    assert 20 <= row["num_hvps"] < 400
    assert row["max_rel_residual"] < 1e-4  # tol=1e-5 on each value's relative accuracy
    np.testing.assert_allclose(row["values"], ours["values"], rtol=1e-4)
    assert peers_timing_rows.plan("1e3", ["top5", "trace"], ["ours", "eigsh"], ["1"]) == [
        "dense:1e3:-:all",
        "ours:1e3:top5:all",
        "eigsh:1e3:top5:all",
        "ours:1e3:trace:all",
    ]
