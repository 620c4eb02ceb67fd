"""Which formulation of a hot path to trace: the one place that decides.

Some formulations are tuned for XLA's CPU backend on a few cores and would only cost elsewhere:
reductions over a short minor axis written as chains of slices, the attention's values padded to
8 columns, the block-causal tiled attention with its hand-written backward pass and its loop over
chunks of sequences that keeps the scores in cache, the sequential Markov sampler, glibc
allocator tuning. They apply when `cpu_tuned()` is true: on the CPU backend. On a GPU or TPU the
plain XLA formulations are traced instead (the dense masked softmax, jnp reductions, the
associative-scan sampler). Both give the same numbers up to float rounding (the samplers the
same sequences); tests/test_backend.py checks that on CPU with `tuning("plain")`.

The decision is read while a function is traced, so a jitted function keeps the formulation it
was traced with.

`use_float32_matmuls()` (the CLIs and the benchmark call it) makes float32 dots float32 on every
backend: on NVIDIA GPUs JAX's default rounds their inputs to TensorFloat-32 (10-bit mantissa),
which broke Lemma 1's zero row sums by 2e-4 on an H200 and would make the Markov precision
study's "float32" cells TF32. Half-precision models (`model.dtype`) are unaffected.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax

TUNINGS = ("cpu", "plain")
_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "landscape_tuning", default=None
)


def current() -> str:
    """ "cpu" on the CPU backend, "plain" elsewhere, unless `tuning` forces one."""
    forced = _forced.get()
    if forced is not None:
        return forced
    return "cpu" if jax.default_backend() == "cpu" else "plain"


def cpu_tuned() -> bool:
    return current() == "cpu"


def use_float32_matmuls() -> None:
    """float32 x float32 dots in full float32 (not TF32 or bfloat16 passes) on any backend."""
    jax.config.update("jax_default_matmul_precision", "highest")


@contextlib.contextmanager
def tuning(name: str) -> Iterator[None]:
    """Trace with the formulations of `name` ("cpu" or "plain") on any backend (tests,
    benchmarks)."""
    if name not in TUNINGS:
        raise ValueError(f"tuning {name!r}: must be one of {TUNINGS}.")
    token = _forced.set(name)
    try:
        yield
    finally:
        _forced.reset(token)
