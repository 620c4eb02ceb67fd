"""Exact products against central differences on an FSDP-sharded flax transformer over 8
emulated CPU devices: `python -m experiments.bench.fsdp_transformer [directions]` (it sets
XLA_FLAGS=--xla_force_host_platform_device_count=8 itself) prints the table of
`finite_differences.markdown` for a 2-block causal transformer (width 64, 4 heads, vocabulary
64, 32 tokens, D = 1.1e5) whose every parameter is split over the 8 devices along its largest
axis (fully sharded data parallelism), float32 and bfloat16: the median over 3 random unit
directions of |H v_fd - H v| / |H v| at each ε, each against the exact product in float64 at the
same (rounded) point, every product taken on the sharded params in their layout
(`operator.finite_difference_product`, `compiled.hvp`). Minutes on 2 CPU cores.
"""

from __future__ import annotations

import os
import sys

from experiments.bench.fsdp_transformer_rows import DEVICES, table


def main(argv: list[str]) -> None:
    """The table for `argv[1]` random directions (default 3)."""
    import jax

    from experiments.bench.finite_differences_rows import markdown

    jax.config.update("jax_enable_x64", True)
    directions = int(argv[1]) if len(argv) > 1 else 3
    print(markdown([table(dtype, directions) for dtype in ("float32", "bfloat16")]))


if __name__ == "__main__":
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main(sys.argv)
