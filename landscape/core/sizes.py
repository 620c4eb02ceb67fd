"""The size classes of the probes' program shapes: a block of products, a group of runs or a
Lanczos basis is one of a few sizes (`bucket`), so a new count of a class compiles nothing
(docs/design/curvature.md, "One program per probe")."""

from __future__ import annotations


def bucket(count: int) -> int:
    """The block size for `count` products: the smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
    (powers of two and one and a half times them) that holds them, so a block program serves
    every count of its size class and pads at most a third of its products (25 -> 32)."""
    size = 1
    while size < count:
        power = 1 << (size.bit_length() - 1)  # the largest power of two <= size
        size = power * 3 // 2 if size == power > 1 else 2 * power
    return size


def basis_rows(num_iters: int, dim: int) -> int:
    """The rows of a Lanczos basis a program keeps for `num_iters` steps: `bucket`'s size
    class (a new num_iters of the class compiles nothing; the steps are an argument), at most D
    and at least num_iters."""
    return max(num_iters, min(bucket(num_iters), dim))


def bucket_below(limit: int) -> int:
    """The largest block size of `bucket`'s sizes that is at most `limit` (>= 1)."""
    size = 1
    while bucket(size + 1) <= limit:
        size = bucket(size + 1)
    return size
