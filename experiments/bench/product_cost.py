"""What a Hessian-vector product costs against a training step of the same model:
`python -m experiments.bench.product_cost [1e4 1e5 ...]` prints, for the peers MLP (`peers.py`,
512 examples, float32) at each size, the warm median seconds of one Adam training step (the
loss's value and gradient and optax's update, one jitted program), of one product by
`landscape.hvp_flat` (the gradient linearised afresh for it), and of a product inside a
probe's block (a 100-probe Hutchinson trace, its time divided by 100), each against the step.
"""

from __future__ import annotations

import sys

from experiments.bench.product_cost_rows import markdown, row


def main(argv: list[str]) -> None:
    print(markdown([row(size) for size in (argv[1:] or ["1e4", "1e5", "1e6"])]), flush=True)


if __name__ == "__main__":
    main(sys.argv)
