"""Numerical precision of a model, the Flax way: `param_dtype` for the parameters (and so the
optimizer state) and `dtype` for the computation.

A config's `train.dtype` is the parameter dtype (float32 or float64) and `model.dtype` the
computation dtype ("" = the same). A half-precision computation dtype reproduces mixed
precision as PyTorch's `torch.autocast` runs it, without a gradient scaler (as the Markov
authors trained, notes/markov.md §13): matmuls and activations in float16 (or bfloat16), master
weights and optimizer state in float32, and softmax, LayerNorm and the loss in float32.
Gradients that float16 flushes to zero show in the training metric "grad_zero_fraction"
(`training.Problem.log_grad_zeros`).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax.typing import DTypeLike

PARAM_DTYPES = ("float32", "float64")
COMPUTE_DTYPES = ("", "float32", "float64", "bfloat16", "float16")
HALF = (jnp.float16, jnp.bfloat16)


@dataclasses.dataclass(frozen=True)
class Precision:
    """param_dtype: parameters and optimizer state; dtype: matmuls and activations;
    accum_dtype: softmax, LayerNorm and the loss (float32 whenever dtype is a half type)."""

    param_dtype: jnp.dtype
    dtype: jnp.dtype

    @property
    def accum_dtype(self) -> jnp.dtype:
        return accum_dtype(self.dtype)

    @property
    def is_mixed(self) -> bool:
        return self.dtype != self.param_dtype

    @property
    def name(self) -> str:
        if self.dtype == jnp.float16:
            return "float16 autocast"
        if self.dtype == jnp.bfloat16:
            return "bfloat16 autocast"
        return jnp.dtype(self.dtype).name


def of(param_dtype: str = "float32", dtype: str = "") -> Precision:
    """The precision of `train.dtype` = param_dtype and `model.dtype` = dtype ("" = param_dtype)."""
    if param_dtype not in PARAM_DTYPES:
        raise ValueError(f"param_dtype {param_dtype!r}: must be one of {', '.join(PARAM_DTYPES)}")
    if dtype not in COMPUTE_DTYPES:
        raise ValueError(f"dtype {dtype!r}: must be one of {', '.join(map(repr, COMPUTE_DTYPES))}")
    return Precision(jnp.dtype(param_dtype), jnp.dtype(dtype or param_dtype))


def is_half(dtype: DTypeLike) -> bool:
    return jnp.dtype(dtype) in tuple(jnp.dtype(h) for h in HALF)


def accum_dtype(dtype: DTypeLike) -> jnp.dtype:
    """Where autocast keeps float32: softmax, normalisation, reductions of the loss."""
    return jnp.dtype(jnp.float32) if is_half(dtype) else jnp.dtype(dtype)
