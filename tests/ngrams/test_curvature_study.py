"""The n-gram curvature study: overlaps against closed forms, the chance baseline against the
Beta law of a random projection, the next construction's head matching, and the study end to
end at a tiny size."""

import csv
import json
import math
import re

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from configs import ngrams
from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.ngrams import curvature_study as study
from landscape.ngrams import experiment, points
from landscape.ngrams import model as model_lib
from tools import ngrams_page


def test_overlap_closed_forms():
    """In the span: projection 1; orthogonal: 0; at 45 degrees between two rows: max |cos|
    1/sqrt(2), projection 1; a repeated row adds nothing to the span."""
    rng = np.random.default_rng(0)
    basis = rng.normal(size=(3, 20))
    inside = basis.T @ np.array([0.3, -1.2, 2.0])
    assert study.overlap(inside, basis)["span"] == pytest.approx(1.0, abs=1e-12)
    q = study.span_basis(basis)
    outside = rng.normal(size=20)
    outside -= q.T @ (q @ outside)
    found = study.overlap(outside, basis)
    assert found["span"] == pytest.approx(0.0, abs=1e-12)
    assert found["max_cos"] == pytest.approx(0.0, abs=1e-12)
    e = np.eye(4)
    diagonal = study.overlap(e[0] + e[1], np.stack([e[0], e[1], e[1]]))
    assert diagonal["max_cos"] == pytest.approx(1 / math.sqrt(2), rel=1e-12)
    assert diagonal["span"] == pytest.approx(1.0, rel=1e-12) and diagonal["k"] == 3
    assert study.span_basis(np.stack([e[0], e[1], e[1]])).shape == (2, 4)
    tilted = study.overlap(np.array([1.0, 0, 1, 0]), e[:1])  # 45 degrees off a 1-D span
    assert tilted["span"] == pytest.approx(tilted["max_cos"]) == pytest.approx(1 / math.sqrt(2))


@pytest.mark.parametrize(
    "vector, basis, message",
    [
        (np.zeros(3), np.eye(3), "vector: every row must be finite and non-zero"),
        (np.ones(3), np.ones((2, 4)), r"basis has shape \(2, 4\): must be \(k, 3\)"),
        (np.ones((2, 3)), np.eye(3), r"vector has shape \(2, 3\): must be one vector"),
    ],
)
def test_overlap_names_the_argument(vector, basis, message):
    with pytest.raises(ValueError, match=message):
        study.overlap(vector, basis)


def test_chance_overlap_closed_forms():
    """E|P v| for v uniform on the sphere: 2/pi on the circle (k = 1), 1/2 on the 2-sphere,
    1 when the span is the whole space; below sqrt(k/D), its root mean square."""
    assert study.chance_overlap_mean(1, 2) == pytest.approx(2 / math.pi, rel=1e-12)
    assert study.chance_overlap_mean(1, 3) == pytest.approx(0.5, rel=1e-12)
    assert study.chance_overlap_mean(7, 7) == pytest.approx(1.0, rel=1e-12)
    assert 0.95 * math.sqrt(6 / 400) < study.chance_overlap_mean(6, 400) < math.sqrt(6 / 400)
    with pytest.raises(ValueError, match="k = 5: a span in R\\^4"):
        study.chance_overlap_mean(5, 4)


def test_random_overlaps_match_the_chance_level():
    """4000 random directions against a 6-plane of R^400: the mean squared projection is k/D
    (the Beta(k/2, (D-k)/2) mean) and the mean projection the closed form, each within four
    standard errors; sqrt(k/D) lies within one standard deviation of the mean. With a mask of
    200 coordinates holding the plane, the chance level is that of R^200."""
    rng = np.random.default_rng(1)
    basis = rng.normal(size=(6, 400))
    num = 4000
    found = study.random_overlaps(basis, jax.random.key(0), num)
    stderr = found["span_std"] / math.sqrt(num)
    assert abs(found["span_mean"] - study.chance_overlap_mean(6, 400)) < 4 * stderr
    assert abs(found["span_mean"] - math.sqrt(6 / 400)) < found["span_std"]
    # the mean square: the projections' squares have variance 2k(D-k)/(D^2(D+2))
    square = found["span_std"] ** 2 + found["span_mean"] ** 2
    square_stderr = math.sqrt(2 * 6 * 394 / (400**2 * 402) / num)
    assert abs(square - 6 / 400) < 4 * square_stderr + 4 * stderr * found["span_mean"]
    mask = np.arange(400) < 200
    basis[:, ~mask] = 0.0
    masked = study.random_overlaps(basis, jax.random.key(1), num, mask)
    masked_stderr = masked["span_std"] / math.sqrt(num)
    assert abs(masked["span_mean"] - study.chance_overlap_mean(6, 200)) < 4 * masked_stderr


def test_next_construction_puts_the_offset_one_head_where_training_did():
    """Training's -1 head is head 2: the construction's offset-1 pattern goes to head 2, its
    Q2/K2 columns move with it, and the model's output is that of the construction itself."""
    model = model_lib.NgramModel(kind="simplified", num_states=3, seq_len=8, num_heads=2)
    x, y = points.population_set(3, 3, 8, 1.0, 64)
    params = points.construction_params(3, 4.0, model, np.float64)
    point = points.theta_star(3, 4.0, num_states=3, order_n=3, seq_len=8, alpha=1.0)
    offsets = np.array([[0.1, 0.7], [0.9, 0.05]])  # heads x offsets -1, -2
    star = study.next_construction(point, 3, 4.0, offsets)
    np.testing.assert_array_equal(star["A1"][1], params["A1"][0])
    np.testing.assert_array_equal(star["A1"][0], params["A1"][1])
    loss = points.population_objective(model, 1e-8)
    np.testing.assert_allclose(loss(star, (x, y)), loss(params, (x, y)), rtol=1e-13)
    same = study.next_construction(point, 3, 4.0, offsets[::-1])
    np.testing.assert_array_equal(same["Q2"], params["Q2"])


def test_probe_steps_and_the_step_after_the_drop():
    plateau = dict(start=384, end=5440, level=1.604, k=2)
    kept = list(range(0, 8193, 256))
    assert study.probe_steps(kept, plateau, [0.5, 0.9]) == [2816, 4864]
    assert study.probe_steps(kept, plateau, [0.0, 1.0]) == [512, 5376]
    assert study.probe_steps(kept, dict(start=300, end=500), [0.5]) == []
    row = dict(plateaus=[plateau, dict(start=5952, end=8192, level=1.548, k=2)], final_loss=1.545)
    assert study.after_step(row, plateau, kept, 0.02) == 6144
    alone = dict(plateaus=[plateau], final_loss=1.55)
    assert study.after_step(alone, plateau, kept, 0.02) == 8192
    assert study.after_step(dict(alone, final_loss=1.6), plateau, kept, 0.02) is None


def test_block_shares_split_the_squared_norm():
    model = model_lib.NgramModel(kind="simplified", num_states=3, seq_len=8, num_heads=2)
    params = points.construction_params(3, 4.0, model, np.float64)
    flat, unravel = ravel_pytree(params)
    q = study.span_basis(np.random.default_rng(2).normal(size=(3, flat.size)))
    shares = study.block_shares(q, unravel, 2)
    assert sum(shares.values()) == pytest.approx(1.0, rel=1e-12)
    only_q2 = study.block_shares(np.asarray(ravel_only(params, "Q2")), unravel, 2)
    assert only_q2["Q2"] == pytest.approx(1.0) and only_q2["A1 h1"] == 0.0


def ravel_only(params, name):
    kept = {k: (v if k == name else np.zeros_like(v)) for k, v in params.items()}
    return ravel_pytree(kept)[0][None, :]


def test_the_curvature_config_is_checked():
    cfg = ngrams.get_config("curvature")
    experiment.validate(cfg)
    assert experiment.needs_x64(cfg)
    for field, value, message in [
        ("train.params_every", 0, "train.params_every = 0"),
        ("curvature.fractions", [0.5, 1.5], "curvature.fractions"),
        ("curvature.c", 0.0, "curvature.c = 0.0"),
        ("claims", "heads", "claims = 'heads'"),
    ]:
        with pytest.raises(config_lib.ConfigError, match=message):
            experiment.validate(config_lib.with_fields(cfg, {field: value}))


def tiny_config():
    cfg = ngrams.get_config("curvature")
    cfg.task.update(num_states=3, seq_len=8)  # D = 308
    cfg.train.update(
        num_steps=256, log_every=16, test_sequences=128, params_every=32, track_every=32
    )
    cfg.train.track_sequences = 32
    cfg.lines.num_sequences = 256
    cfg.analysis.update(flat_window=32, min_plateau=32, flat_tol=0.05)
    cfg.curvature.update(
        fractions=[0.5], num_sequences=128, lanczos_sizes=[128], random_directions=100
    )
    cfg.curvature.lanczos_iters = 30
    return cfg


@pytest.mark.slow
def test_the_study_end_to_end_at_a_tiny_size(tmp_path):
    """Its tables, text, figure and claims exist and hold finite numbers."""
    summary = experiment.run(tiny_config(), records.Workdir(tmp_path), progress=None)
    (point,) = summary["points"]
    assert point["dim"] == 308 and 0 < point["dim_live"] < 308
    for name in ("lambda_min", "lambda_max", "grad_norm", "loss", "ggn_min", "remainder_min"):
        assert math.isfinite(point[name]), name
    assert point["lambda_min"] < 0 < point["lambda_max"]
    statements = [c["claim"] for c in summary["claims"] + summary["sanity_checks"]]
    assert any("near-stationary" in s for s in statements)
    assert any("positive semi-definite" in s for s in statements)
    with open(tmp_path / "overlaps.csv") as f:
        overlaps = list(csv.DictReader(f))
    assert {r["basis"] for r in overlaps} == set(study.BASES)
    for r in overlaps:
        for name in ("span", "max_cos", "random_span_mean", "random_span_std"):
            assert 0 <= float(r[name]) <= 1, (name, r)
    with open(tmp_path / "lambda_vs_population.csv") as f:
        assert [int(r["num_sequences"]) for r in csv.DictReader(f)] == [128]
    assert (tmp_path / "figures" / "curvature_study.png").stat().st_size > 20_000
    assert "Escape directions at run 0" in (tmp_path / "curvature.txt").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "complete"
    _page_tables_are_the_records(tmp_path, summary)


def _page_tables_are_the_records(path, summary):
    """tools.pages from the tiny run: the overlaps table's projections and the claims
    table's λ_min and verdicts, read back from the Markdown, are the records' to the digits
    printed."""
    tables = ngrams_page.ngrams_tables(ngrams_page.ngrams_extract(path))
    with open(path / "overlaps.csv") as f:
        found = {(r["target"], r["basis"]): float(r["span"]) for r in csv.DictReader(f)}
    lines = _rows(tables["ngrams overlaps"])
    assert len(lines) == len(found)  # one probed step: a row per (target, subspace)
    names = {"next stage": "next stage", "to $\\theta_*": "to theta_star^(k+1)"}
    subspaces = {
        "escape": "escape directions",
        "negative": "negative eigenspace",
        "$-g$": "gradient",
    }
    for line in lines:
        target, subspace, span, _ = [c.strip() for c in line.strip("| ").split(" | ")]
        key = (
            next(v for k, v in names.items() if target.startswith(k)),
            next(v for k, v in subspaces.items() if subspace.startswith(k)),
        )
        assert abs(float(span) - found[key]) <= 0.5e-3, key
    claims = {c.split(" | ")[0].strip("| "): c for c in _rows(tables["ngrams claims"])}
    near = claims[
        "The plateau point is near-stationary (Thm 4.2; rule: notes/landscape_geometry.md §9)"
    ]
    passed = [c["passed"] for c in summary["claims"] if "near-stationary point" in c["claim"]]
    assert near.endswith("| reproduced |" if all(passed) else "| not reproduced |")
    (point,) = summary["points"]
    saddle = next(c for name, c in claims.items() if name.startswith("It is a saddle"))
    shown = float(re.search(r"lambda_\\text\{min\} = (-?[\d.]+)", saddle)[1])
    assert abs(shown - point["lambda_min"]) <= 0.5e-4


def _rows(table):
    """A generated table's rows: past its header, before the caption under it."""
    return [line for line in table.splitlines()[2:] if line.startswith("|")]
