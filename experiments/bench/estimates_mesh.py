"""The probes' memory estimates against XLA's own count (`compiled.memory_analysis()`) per
device over 8 emulated CPU devices, compiled only: `blocks.product_bytes`, with the search's
(`eigen_search.lanczos_search_bytes`, ncv = 20; `--storage=bfloat16` for its vectors in bfloat16)
or the three-vector SLQ's vectors (`--slq`), on the peers MLP (64 -> h -> h -> 10, 512
examples) over data 2 x model 4 (hidden weights split over model) and data 8, the blocks
replicated over the data axis held whole or split.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m experiments.bench.estimates_mesh

docs/guide/foundation_scale.md, "The estimate against XLA", has its table at D = 2e7.
"""

from __future__ import annotations

import argparse

from experiments.bench.estimates_mesh_rows import LAYOUTS, meshes, row, slq_row


def main() -> None:
    """Print the table for the width asked (`--width`; `--no-search` for the product alone,
    `--slq` for the three-vector SLQ's rows)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=4472, help="h (4472: D = 2.03e7)")
    parser.add_argument("--no-search", action="store_true", help="the product alone")
    parser.add_argument("--slq", action="store_true", help="the three-vector SLQ's rows alone")
    parser.add_argument("--storage", choices=["bfloat16"], help="the search's vectors' storage")
    args = parser.parse_args()
    if args.slq:
        print(
            "| mesh | layout | D | vectors | SLQ three: estimate | XLA | ratio |\n"
            "|---|---|---|---|---|---|---|"
        )
        for name in meshes():
            for mode in LAYOUTS:
                for storage in (None, "bfloat16"):
                    print(slq_row(args.width, name, mode, storage), flush=True)
        return
    print(
        "| mesh | layout | D | product: estimate | XLA | ratio | search: estimate | XLA | ratio |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    for name in meshes():
        for mode in LAYOUTS:
            print(row(args.width, name, mode, not args.no_search, args.storage), flush=True)


if __name__ == "__main__":
    main()
