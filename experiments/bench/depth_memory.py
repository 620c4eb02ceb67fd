"""The probes' memory against depth, XLA's count against the estimates, on one device,
compiled only: one product, a Hutchinson block, the search (ncv = 20) and the three-vector SLQ
on tanh MLPs of 2, 4, 8 and 16 hidden layers (16 examples; `--examples=512`, where the
activations weigh), at D of 2-4 x 10^6; `--mesh`, a product and the three-vector SLQ of the
16-layer MLP at D = 1.9e7 over 8 emulated devices:

    python -m experiments.bench.depth_memory [--examples=512]
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m ...depth_memory --mesh

docs/guide/foundation_scale.md, "The estimate against XLA", has its rows.
"""

from __future__ import annotations

import argparse

from experiments.bench.depth_memory_rows import mesh_rows, rows

DEPTHS = ((2, 1380), (4, 1000), (8, 700), (16, 500))  # (hidden layers, width): D 2.0-3.8e6


def main() -> None:
    """Print the table (`--small` for D of about 10^5, a quick look)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="widths a fifth: D about 1e5")
    parser.add_argument("--mesh", action="store_true", help="16 layers over 8 devices")
    parser.add_argument("--examples", type=int, default=16, help="the inputs' batch")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error(f"--examples={args.examples}: must be an integer >= 1")
    if args.mesh:
        print("| layout | D | program | estimate, MB a device | XLA | estimate / XLA | XLA, bytes "
              "a parameter |\n|---|---|---|---|---|---|---|")  # fmt: skip
        for line in mesh_rows(16, 1120):
            print(line, flush=True)
        return
    depths = tuple((layers, width // 5) for layers, width in DEPTHS) if args.small else DEPTHS
    print("| hidden layers | D | largest leaf / D | program | XLA, bytes a parameter | estimate "
          "| estimate / XLA | four vectors / XLA |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for line in rows(depths, args.examples):
        print(line, flush=True)


if __name__ == "__main__":
    main()
