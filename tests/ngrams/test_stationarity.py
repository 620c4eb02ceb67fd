"""The Theorem 4.2 study: checks C7, C8, C10 of notes/ngrams.md §4.7, the table and the figures.

"notes" values are the [ours] reference numbers of notes §4.7; "measured" ones were measured with
this code (seed 0 sets). The paper-size grids are marked slow.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.ngrams import estimators as est
from landscape.ngrams import stationarity as st
from landscape.ngrams import task


def _find(rows, T, k=None, c=None, rule="fixed", point="theta_star"):
    found = [
        row
        for row in rows
        if row["T"] == T
        and row["point"] == point
        and (
            point == "random"
            or (row["k"] == k and row["rule"] == rule and (c is None or row["c"] == c))
        )
    ]
    assert len(found) == 1, (T, k, c, rule, point)
    return found[0]


# --------------------------------------------------------------------------------------------------
# C7: ||grad L(theta_*^k(c))|| vs T (S = 3, n = 3, alpha = 1, 2 x 8192 sequences)
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _c7_rows():
    return st.study(ks=(2, 3), cs=(8.0, 16.0), seq_lens=(32, 128), num_sequences=16384, seed=0)


# notes C7 table (2 x 8192 sequences): (k, c, T) -> value; None = "≈0" (a negative estimate)
C7_NOTES = {
    (2, 8.0, 32): 0.205,
    (2, 16.0, 32): 0.347,
    (3, 8.0, 32): 1.10,
    (3, 16.0, 32): 1.93,
    (2, 8.0, 128): None,
    (2, 16.0, 128): None,
    (3, 8.0, 128): 0.181,
    (3, 16.0, 128): 0.340,
}


@pytest.mark.slow
def test_C7_gradient_norm_pattern():
    """The notes' C7 pattern at T = 32, 128.

    measured (seed 0)     k=2 c=8   c=16    k=3 c=8   c=16    random   noise floors
      T = 32               0.218    0.368    1.12     1.96     0.097    0.013-0.036
      T = 128              0.0165   0.0234   0.170    0.320    0.094    0.0067-0.012
    Every notes value with a number reproduces within 3 noise floors. Discrepancy: the notes'
    k = 2 entries at T = 128 are "≈0" (a negative unbiased estimate, below a 0.005-0.01 noise
    floor); here they are 0.0165 and 0.0234, i.e. 2.5 noise floors (0.0067, 0.0095), and
    positive in 6 of 6 seeds (slow test test_C7_k2_bias_is_order_one_over_T: pooled over seeds
    the norm is about 0.012 at T = 128 and halves at T = 256). So at T = 128 the k = 2 norm is at
    the noise level of a 2 x 8192 set but not 0: the O(1/T) estimator bias of notes §4.6 caveat 3.
    """
    rows = _c7_rows()
    for (k, c, T), note in C7_NOTES.items():
        row = _find(rows, T, k, c)
        value, noise = row["grad_unbiased"], row["grad_noise"]
        if note is None:
            assert 1.5 * noise < value < 4 * noise, (k, c, T, value, noise)
        else:
            assert abs(value - note) < 3 * noise, (k, c, T, value, noise, note)
    # decreases with T for c >= 8; k = 2, c = 8 falls by more than 10x from T = 32 to 128
    for k in (2, 3):
        for c in (8.0, 16.0):
            assert (
                _find(rows, 128, k, c)["grad_unbiased"]
                < 0.5 * _find(rows, 32, k, c)["grad_unbiased"]
            )
    assert (
        _find(rows, 128, 2, 8.0)["grad_unbiased"] < 0.1 * _find(rows, 32, 2, 8.0)["grad_unbiased"]
    )
    assert _find(rows, 128, 2, 8.0)["grad_unbiased"] < 0.02
    # dominated by V1 for k = 3 (notes: 0.33 of 0.34 at T = 128, c = 16; measured 0.311 of 0.320)
    row = _find(rows, 128, 3, 16.0)
    assert row["grad_unbiased/V1"] > 0.95 * row["grad_unbiased"]
    # inactive blocks are exactly zero at k = 2 (C6): head 2 of A1 and V1
    row = _find(rows, 32, 2, 8.0)
    assert row["grad_plain/A1/head2"] == 0.0 and row["grad_plain/V1/head2"] == 0.0
    # random initialisation: the notes give 0.06-0.18, which is one draw's value. Over seeds 0-5
    # of the Flax init (A1 = 0, V1 ~ N(0, 1/S), Q2, K2 ~ N(0, 1/((m+1) S)); each parameter its own
    # key) the norm is 0.194, 0.097, 0.601, 0.342, 0.142, 0.123 at T = 32 and 0.193, 0.095,
    # 0.588, 0.368, 0.139, 0.103 at T = 128 (seed 1 is the pre-Flax code's seed-0 draw: 0.097,
    # 0.094). Asserted: seed 0's value within that spread and far above its noise floor.
    for T in (32, 128):
        random_row = _find(rows, T, point="random")
        assert 0.09 < random_row["grad_unbiased"] < 0.61
        assert random_row["grad_noise"] < 0.1 * random_row["grad_unbiased"]


@pytest.mark.slow
def test_C7_rows_carry_estimator_losses_on_the_same_set():
    """Row losses: the construction at c = 16 is near its c -> inf limit (the padded k-gram MLE),
    and add-alpha smoothing beats both (measured at T = 128, k = 3: 1.188, padded 1.274,
    Def. 2.1 1.298, add-alpha 0.871)."""
    rows = _c7_rows()
    for T in (32, 128):
        for k in (2, 3):
            row = _find(rows, T, k, 16.0)
            assert row["loss_smoothed"] < row["loss"] < row["loss_padded"] + 1e-9
            assert row["loss_padded"] < row["loss_mle"]  # fewer zero-count events
    assert _find(rows, 128, 3, 16.0)["loss"] == pytest.approx(1.188, abs=2e-3)


@pytest.mark.slow  # 26 s; the table's rows are checked above
def test_table_and_plot(tmp_path):
    rows = _c7_rows()
    text = st.table(rows)
    assert "k=2 c=8" in text and "k=3 c=16" in text and "random" in text
    lines = text.splitlines()
    grid = [line for line in lines if line.strip().startswith(("32 |", "128 |"))]
    listing = [
        line for line in lines if line.strip().startswith(("32 ", "128 ")) and "|" not in line
    ]
    assert len(grid) == 2 and len(listing) == 10  # 2 T x (2 k x 2 c + random)
    path = st.plot(rows, tmp_path / "grad_vs_T.png")
    assert path.exists() and path.stat().st_size > 20_000
    with pytest.raises(ValueError, match="^rows: no theta_star rows"):
        st.plot([row for row in rows if row["point"] == "random"], tmp_path / "x.png")


@pytest.mark.slow
def test_C7_full_table_against_notes(tmp_path):
    """The notes' whole C7 grid (T = 32..512, c = 2, 4, 8, 16, 2 x 8192 sequences), plus the
    c = 2 + log T curve, the table and the figure (about 70 s on 2 cores). Each notes value
    is matched within 3 noise floors, except the "≈0" cells (see test_C7_gradient_norm_pattern)."""
    notes = {
        2: {
            2.0: [0.041, 0.026, 0.020, 0.012, 0.007],
            4.0: [0.101, 0.044, 0.021, 0.021, 0.027],
            8.0: [0.205, 0.045, None, None, None],
            16.0: [0.347, 0.074, None, None, None],
        },
        3: {
            2.0: [0.049, 0.030, 0.021, 0.013, 0.008],
            4.0: [0.167, 0.046, 0.053, 0.046, 0.040],
            8.0: [1.10, 0.498, 0.181, 0.055, 0.019],
            16.0: [1.93, 0.915, 0.340, 0.101, 0.026],
        },
    }
    seq_lens = (32, 64, 128, 256, 512)
    rows = st.study(
        (2, 3), (2.0, 4.0, 8.0, 16.0), seq_lens, num_sequences=16384, log_c0=2.0, verbose=True
    )
    print(st.table(rows))
    misses = []
    for k, by_c in notes.items():
        for c, values in by_c.items():
            for T, note in zip(seq_lens, values, strict=True):
                row = _find(rows, T, k, c)
                value, noise = row["grad_unbiased"], row["grad_noise"]
                if note is not None and abs(value - note) > 3 * noise:
                    misses.append((k, c, T, note, round(value, 4), round(noise, 4)))
                if note is None:
                    assert value < 4 * noise, (k, c, T, value, noise)
    assert not misses, misses
    assert st.plot(rows, tmp_path / "grad_vs_T.png").exists()
    for T in seq_lens:
        assert 0.06 < _find(rows, T, point="random")["grad_unbiased"] < 0.18


@pytest.mark.slow
def test_C7_k2_bias_is_order_one_over_T():
    """k = 2, c = 8, 16 independent sets of 16384 sequences (seeds 0-15): the pooled
    E<g_A, g_B> = ||grad L||^2 is clearly > 0 at T = 128 and falls about as 1/T by T = 256.

    measured: ||grad L|| = 0.0121 (mean square 1.46e-4 +- 0.23e-4, 14 of 16 estimates > 0) at
    T = 128 and 0.0052 (2.7e-5 +- 1.0e-5) at T = 256, against single-set noise floors of 0.0075
    and 0.0068. So the k = 2 norm is at the noise level of one 2 x 8192 set (the notes' "≈0")
    but not 0: the O(1/T) estimator bias of notes §4.6 caveat 3, not an e^-Theta(T) decay.
    """
    pooled = {}
    for T in (128, 256):
        rows = [
            st.study((2,), (8.0,), (T,), num_sequences=16384, seed=seed)[0] for seed in range(16)
        ]
        squares = np.array([np.sign(r["grad_unbiased"]) * r["grad_unbiased"] ** 2 for r in rows])
        mean, se = squares.mean(), squares.std(ddof=1) / np.sqrt(len(squares))
        print(T, np.sqrt(max(mean, 0)), mean, se)
        if T == 128:
            assert mean > 4 * se
        pooled[T] = np.sqrt(max(mean, 0.0))
    assert 0.010 < pooled[128] < 0.014, pooled
    assert 1.5 < pooled[128] / pooled[256] < 3.5, pooled


# --------------------------------------------------------------------------------------------------
# C8: loss at theta_*^k(c) vs c
# --------------------------------------------------------------------------------------------------

C8_CS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0)


def _best(rows, k):
    line = sorted(
        (row for row in rows if row["k"] == k and row["point"] == "theta_star"),
        key=lambda r: r["c"],
    )
    losses = np.array([row["loss"] for row in line])
    return line, losses, int(np.argmin(losses))


@pytest.mark.slow
def test_C8_loss_is_u_shaped_in_c(tmp_path):
    """S = 5, n = 3, T = 32, alpha = 0.5, 8192 sequences (MC error about 0.005).

    notes: best single-c losses k = 1: 1.686, k = 2: 1.671 (c ≈ 2), k = 3: 1.655 (c ≈ 3).
    measured (seed 0): 1.6913, 1.6766 (c = 2), 1.6602 (c = 3); another set (16384 sequences,
    an earlier sampler layout) gave 1.685 / 1.670 (c = 2.25) / 1.652 (c = 2.75).
    """
    rows = st.study(
        (1, 2, 3), C8_CS, (32,), num_states=5, alpha=0.5, num_sequences=8192, gradients=False
    )
    assert "grad_unbiased" not in rows[0]
    notes = {1: 1.686, 2: 1.671, 3: 1.655}
    best = {}
    for k in (1, 2, 3):
        line, losses, i = _best(rows, k)
        best[k] = losses[i]
        assert abs(losses[i] - notes[k]) < 0.01, (k, losses[i])
        if k == 1:
            np.testing.assert_allclose(losses, losses[0], rtol=1e-12)  # no c dependence
            continue
        # U-shape: down from small c (leakage), up for large c (zero-count penalty)
        assert 0 < i < len(losses) - 1
        assert np.all(np.diff(losses[: i + 1]) < 0) and np.all(np.diff(losses[i:]) > 0)
        assert losses[-1] > losses[i] + 0.3
        assert line[i]["c"] == {2: 2.0, 3: 3.0}[k]
    assert best[3] < best[2] < best[1]
    path = st.plot_loss_vs_c(rows, tmp_path / "loss_vs_c.png")
    assert path.exists() and path.stat().st_size > 20_000
    text = st.table(rows)  # loss-only rows print too
    assert "1.677" in text or "1.676" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "num_states, alpha, seq_len, notes, measured",
    [
        # notes 1.585 / 1.530 (c ≈ 4) / 1.372 (c ≈ 5); measured 1.587 / 1.533 (c = 4) / 1.378
        # (c = 5.25)
        (5, 0.5, 128, (1.585, 1.530, 1.372), None),
        # notes 1.095 / 1.074 / 1.046; measured (seed 0, c grid step 0.25) 1.091 / 1.070 (c = 2.75)
        # / 1.037 (c = 3.5), 0.004-0.009 below the notes (MC s.e. about 0.003); on an integer c grid
        # the k = 3 best would be 1.043 (c = 3), so the notes probably used a coarser grid
        (3, 1.0, 32, (1.095, 1.074, 1.046), (1.091, 1.070, 1.037)),
    ],
)
def test_C8_other_configs(num_states, alpha, seq_len, notes, measured):
    cs = np.round(np.arange(0.5, 8.01, 0.25), 2)
    rows = st.study(
        (1, 2, 3),
        cs,
        (seq_len,),
        num_states=num_states,
        alpha=alpha,
        num_sequences=16384,
        gradients=False,
    )
    reference = measured or notes
    for k in (1, 2, 3):
        _, losses, i = _best(rows, k)
        print(k, losses[i], cs[i])
        assert abs(losses[i] - reference[k - 1]) < 0.01, (k, losses[i], notes[k - 1])


# --------------------------------------------------------------------------------------------------
# C10: the k-gram estimator's loss approaches L_k^inf
# --------------------------------------------------------------------------------------------------


def test_C10_kgram_estimator_approaches_plateau_levels():
    """S = 3, n = 3, alpha = 1, 4096 tasks, stationary start, prefixes of one set of length 256.

    The add-alpha k-gram loss minus the loss of the oracle order-(k-1) conditional q_k (Lemma
    H.5; its expected loss is L_k^inf exactly under the stationary start) is a paired, low-noise
    excess. measured at T = 16, 32, 64, 128, 256: k = 1: 0.043, 0.025, 0.015, 0.008, 0.005;
    k = 2: 0.081, 0.057, 0.034, 0.021, 0.012; k = 3: 0.178, 0.136, 0.089, 0.055, 0.030 (about
    1/T; the test checks T = 16, 64, 256, one estimator compile per T and k).
    L_k^inf for these tasks: 1.0496, 0.9783, 0.8183 (notes §2.3: 1.0502, 0.9800, 0.8202).
    """
    S, n, alpha, B = 3, 3, 1.0, 4096
    key_task, key_seq = jax.random.split(jax.random.PRNGKey(0))
    P = task.sample_tasks(key_task, S, n, alpha, B)
    x, _ = task.sample_sequences(key_seq, P, S, n, 256, init="stationary")
    pi = jax.vmap(task.lifted_stationary, (0, None, None))(P, S, n)
    levels = np.asarray(jax.vmap(task.kgram_losses, (0, None, None))(P, S, n)).mean(0)
    np.testing.assert_allclose(levels, [1.0502, 0.9800, 0.8202], atol=0.01)
    batch = jnp.arange(B)
    conditionals = {
        k: jax.vmap(task.lower_order_conditional, (0, 0, None, None, None))(P, pi, S, n, k)
        for k in (1, 2, 3)
    }  # (B, S^(k-1), S)
    excess, gap = {k: [] for k in (1, 2, 3)}, {k: [] for k in (1, 2, 3)}
    for T in (16, 64, 256):
        x_T = x[:, :T]
        context = x_T[:, -2] * S + x_T[:, -1]  # newest two tokens
        y = P[batch, context]
        for k in (1, 2, 3):
            q_BS = conditionals[k][batch, context % S ** (k - 1)]  # the last k-1 tokens
            oracle = np.asarray(est.cross_entropy(q_BS, y))
            loss = np.asarray(est.cross_entropy(est.smoothed_estimate(x_T, S, k, alpha), y))
            assert abs(oracle.mean() - levels[k - 1]) < 4 * oracle.std() / np.sqrt(B)
            excess[k].append((loss - oracle).mean())
            gap[k].append(loss.mean() - levels[k - 1])
    for k in (1, 2, 3):
        assert np.all(np.diff(excess[k]) < 0) and excess[k][-1] > 0, excess[k]
        assert excess[k][-1] < excess[k][0] / 5
        assert 0 < gap[k][-1] < gap[k][0] / 4, gap[k]


# --------------------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(ks=(4,)), "k = 4: a construction needs 1 <= k <= order_n = 3"),
        (dict(cs=(0.0,)), "c = 0.0"),
        (dict(seq_lens=(3,)), "seq_len = 3"),
        (dict(seq_lens=()), r"seq_lens = \[\]"),
        (dict(alpha=-1.0), "alpha = -1"),
        (dict(log_c0=-5.0), "log_c0 = -5.0"),
    ],
)
def test_study_bad_inputs_name_the_field(kwargs, field):
    args = dict(ks=(2,), cs=(1.0,), seq_lens=(16,), num_sequences=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match="^" + field):
        st.study(args.pop("ks"), args.pop("cs"), args.pop("seq_lens"), **args)
