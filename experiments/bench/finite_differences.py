"""Exact Hessian-vector products against central differences of the gradient, the product
PyTorch's FSDP tools use: `python -m experiments.bench.finite_differences` prints, for the peers
MLP (D = 1e4, `peers.py`) in float32 and in bfloat16, the median over 3 random unit directions
of |H v_fd - H v| / |H v| for ε in 1, 3e-1, 1e-1, ..., 1e-7 (`hvp(..., finite_difference=ε)`),
and the exact product's own error in that dtype, each against the exact product in float64 at
the same (rounded) point. The probes refuse a bfloat16 point (`check_point`), so its rows call
the same programs (`operator.finite_difference_product`, `operator.products`) directly. Seconds
on a CPU.
"""

from __future__ import annotations

import sys

from experiments.bench.finite_differences_rows import markdown, table


def main(argv: list[str]) -> None:
    dtypes = argv[1:] or ["float32", "bfloat16"]
    print(markdown([table(dtype) for dtype in dtypes]))


if __name__ == "__main__":
    main(sys.argv)
