"""The product-against-step benchmark (experiments/bench/product_cost.py) at a tiny size: one
row's seconds and ratios, and the markdown table it prints."""

from experiments.bench import product_cost_rows


def test_a_row_times_a_step_a_product_and_a_product_in_a_block():
    row = product_cost_rows.row("1e3")
    assert row["D"] == 967
    assert all(row[k] > 0 for k in ("step_s", "product_s", "in_block_s"))
    assert row["product_over_step"] == row["product_s"] / row["step_s"]
    table = product_cost_rows.markdown([row]).splitlines()
    assert len(table) == 3 and table[2].startswith("| 967 |")
