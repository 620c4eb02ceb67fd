"""The saddles of the recall plateaus (notes/assoc_recall.md §4.10): the index and negative
eigenvalues of constructed plateau points against the closed form, and the study
(configs/recall.py:curvature) end to end."""

import csv
import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import landscape
from configs import recall
from landscape.engine import records
from landscape.recall import curvature_study, experiment, theory
from landscape.recall import model as model_lib
from tests.refusals import assert_refused
from tools import recall_page

K = 4
MODEL = model_lib.RecallModel(k=K, num_responses=4, param_dtype=jnp.float64)
SHAPE = np.array([1.0, 0.5, 0.25, 0.1])


def _plateau_point(active: int, eps: float, focus: float = 0.0, big: float = 8.0):
    """`active` heads on (beta = big, w^h = big e_h: their offsets matched), the others at
    beta = eps x SHAPE and w^h = focus (e_h - 1/k) (0: w = 0)."""
    beta = np.concatenate([[big] * active, eps * SHAPE[: K - active]])
    w = np.zeros((K, K))
    for h in range(K):
        w[h] = big * np.eye(K)[h] if h < active else focus * (np.eye(K)[h] - 1 / K)
    return model_lib.init_params(MODEL, jnp.asarray(beta), jnp.asarray(w))


def _eigenvalues(params):
    flat, unravel = ravel_pytree(params)
    hessian = jax.hessian(lambda x: model_lib.population_loss(unravel(x), MODEL))(flat)
    return np.linalg.eigvalsh(np.asarray(hessian))


@pytest.mark.parametrize("active", [0, 1, 2])
@pytest.mark.parametrize("eps", [1e-2, 1e-3])
def test_a_plateau_saddle_has_one_negative_direction_per_inactive_head(active, eps):
    """With w = 0 on the inactive heads, -2 beta_h kappa sqrt((k'-1)/k') each, k' = k - active;
    the correction is O(beta) relative (measured: 0.14 eps at the first plateau)."""
    params = _plateau_point(active, eps)
    values = _eigenvalues(params)
    on = list(range(active))
    predicted = theory.plateau_eigenvalues(params["beta"], params["w"], on, K, 4)
    negative = values[values < -1e-12]
    assert negative.size == theory.plateau_index(params["beta"], on, K) == K - active
    np.testing.assert_allclose(negative, predicted, rtol=eps)
    g = theory.plateau_gradient(K, 4, active)
    np.testing.assert_allclose(predicted, np.sort(-2 * eps * SHAPE[: K - active] * g), rtol=1e-12)


@pytest.mark.parametrize("focus", [0.5, -0.5])
def test_the_inactive_heads_focus_moves_the_negative_eigenvalue(focus):
    """w^h = focus (e_h - 1/k): t_h = <w^h, g_h> = -kappa focus (1 - 1/k') at the first plateau
    (k' = k), and each negative eigenvalue is t_h - sqrt(t_h^2 + 4 beta_h^2 |g|^2)."""
    eps = 1e-3
    params = _plateau_point(0, eps, focus=focus * eps)
    kappa, _ = theory.stage_constants(K, 4, 1)
    t = -kappa * focus * eps * (1 - 1 / K)
    g = theory.plateau_gradient(K, 4, 0)
    expected = np.sort([t - math.sqrt(t * t + 4 * (eps * b * g) ** 2) for b in SHAPE])
    predicted = theory.plateau_eigenvalues(params["beta"], params["w"], [], K, 4)
    np.testing.assert_allclose(predicted, expected, rtol=1e-12)
    values = _eigenvalues(params)
    np.testing.assert_allclose(values[values < -1e-12], predicted, rtol=eps)


def test_after_the_last_jump_nothing_is_negative():
    """k - 1 heads on (k' = 1): |g| = 0, no negative eigenvalue (the loss is 0 at infinity)."""
    params = _plateau_point(K - 1, 1e-2)
    assert theory.plateau_index(params["beta"], [0, 1, 2], K) == 0
    assert theory.plateau_eigenvalues(params["beta"], params["w"], [0, 1, 2], K, 4).size == 0
    assert np.all(_eigenvalues(params) > -1e-12)


def test_plateau_midpoints_take_the_middle_of_the_longest_run():
    levels = np.array([0.7, 0.6, 0.0])
    losses = np.array([0.7, 0.7, 0.65, 0.7, 0.7, 0.7, 0.6, 0.6, 0.3, 0.0])
    assert curvature_study.plateau_midpoints(losses, levels, 0.02) == [(0, 4), (1, 7), (2, 9)]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Fig. 1's init and SGD (2 seeds), the gradient flow on 601 saves (~30 s on 2 cores)."""
    cfg = recall.get_config("curvature")
    cfg.num_seeds = 2
    cfg.flow.num_saves = 601
    path = tmp_path_factory.mktemp("recall_curvature")
    return experiment.run(cfg, records.Workdir(path), progress=None), path


@pytest.mark.slow
def test_the_study_reproduces_the_index_sequence(study):
    """Gradient flow: index 4, 3, 2 on the plateaus, none resolved after the last jump; the
    negative eigenvalues and the first plateau's length as §4.10 says; the probes agree with
    the vmapped Hessians, the SGD runs' tracked λ_min with eigh."""
    summary, path = study
    failed = [c for c in summary["claims"] + summary["sanity_checks"] if not c["passed"]]
    assert not failed and summary["total"] == 4 and summary["sanity_passed"] == 2, failed
    first = summary["claims"][0]["measured"]
    assert first == {"L_0": [4, 4], "L_1": [3, 3], "L_2": [2, 2]}
    sgd = summary["findings"][
        "SGD: index at the plateau midpoints (probes' tolerance, resolved, predicted)"
    ]
    assert all(v[1] == v[2] for k, v in sgd.items() if not k.endswith("L_3")), sgd
    for name in ("recall_plateaus.csv", "recall_index.csv", "figures/curvature_study.png"):
        assert (path / name).stat().st_size > 0


@pytest.mark.slow
def test_the_page_table_is_the_records_numbers(study):
    """tools.pages from the study's records: each row of the page's table, read back from
    the Markdown, is the gradient flow's row of recall_plateaus.csv to the digits it prints."""
    _, path = study
    with open(path / "recall_plateaus.csv") as f:
        flow = [r for r in csv.DictReader(f) if r["trajectory"] == "gradient flow"]
    lines = _rows(recall_page.recall_tables(recall_page.recall_extract(path))["recall plateaus"])
    assert len(lines) == len(flow) == 4
    for line, row in zip(lines, flow, strict=True):
        cells = [c.strip() for c in re.split(r"(?<!\\max)(?<!\\lambda)\|", line.strip()[1:-1])]
        level, tau, index, theory_index, negatives, error = cells
        assert level == f"$L_{row['plateau']}={float(row['level']):.3g}$"
        assert abs(float(tau) - float(row["time"])) <= 0.05
        assert int(index.split()[0]) == int(row["index"])
        assert int(theory_index) == int(row["predicted_index"])
        measured = json.loads(row["negative"])
        if int(row["resolved_index"]):
            shown = [
                float(v) * 1e-4 for v in re.findall(r"-?[\d.]+", negatives.split("\\times")[0])
            ]
            np.testing.assert_allclose(shown, measured, rtol=5e-3)
            assert abs(float(error.rstrip(" %")) - 100 * float(row["eigen_error"])) <= 0.005
        else:
            assert f"(resolved {row['resolved_index']})" in index and not error
            mantissa, exponent = re.match(r"\$(-[\d.]+)\\times10\^\{(-\d+)\}", negatives).groups()
            assert abs(float(mantissa) * 10 ** int(exponent) - measured[0]) <= 0.05 * abs(
                measured[0]
            )


def test_the_study_is_one_program_with_kept_and_tracked_parameters():
    cfg = recall.get_config("curvature")
    assert_refused(experiment.validate, cfg, {"train.track_every": 0}, "train.params_every")
    assert_refused(experiment.validate, cfg, {"sweep": {"init": {"eps": [0.01, 0.02]}}}, "sweep")
    fig1 = recall.get_config("fig1")
    assert_refused(experiment.validate, fig1, {"claims": "curvature"}, "claims")


def test_spectra_along_equals_hessian_at():
    params = _plateau_point(1, 1e-2)
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), params)
    losses, values = curvature_study.spectra_along(MODEL, stacked)
    point = landscape.Point(params, lambda p: model_lib.population_loss(p, MODEL))
    np.testing.assert_allclose(values[1], landscape.hessian_at(point).eigenvalues, atol=1e-14)
    assert losses[0] == pytest.approx(theory.plateau_levels(K, 4)[1], abs=1e-9)


def _rows(table):
    """A generated table's rows: past its header, before the caption under it."""
    return [line for line in table.splitlines()[2:] if line.startswith("|")]
