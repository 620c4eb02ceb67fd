"""The search-against-ARPACK benchmark (experiments/bench/search_products.py, its rows in
search_products_rows.py): its summary of hand-counted rows, and a run at D = 967 whose rows
split the search into Lanczos steps and exact residuals."""

import re

import numpy as np

from experiments.bench import search_products, search_products_rows


def test_the_summary_pairs_each_count_with_arpacks_by_seed():
    counts = np.array([[95, 90, 91], [94, 89, 92], [90, 85, 92]], np.float64)
    lines = search_products_rows.summary(counts).splitlines()
    assert lines[:3] == [
        "search: median 94, mean 93",
        "Lanczos steps: median 89, mean 88",
        "ARPACK: median 92, mean 91.67",
    ]  # differences 4, 2, -2: mean 4/3, standard error sqrt(28/3 / 3) = 1.76
    assert lines[3] == "search - ARPACK, paired: +1.33 ± 1.8, no more at 1 of 3 seeds"
    assert lines[4] == "Lanczos steps - ARPACK, paired: -3.67 ± 1.8, no more at 3 of 3 seeds"


def test_a_run_splits_the_search_into_lanczos_steps_and_the_five_certificates(capsys):
    search_products.main(["1e3", "2"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d) \| (\d+) = (\d+) \+ (\d+) \((\d+)\) \|", out, re.MULTILINE)
    assert [int(seed) for seed, *_ in rows] == [0, 1]
    for _, search, steps, residuals, _ in rows:
        assert int(search) == int(steps) + int(residuals) and int(residuals) >= 5
    assert "search - ARPACK, paired:" in out
