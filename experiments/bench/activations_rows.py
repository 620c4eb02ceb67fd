"""The activations' rows: XLA's count (`memory_analysis()`, compiled only) of a lone product, a
Hutchinson block and the search (ncv = 20) on models whose activations weigh (MLPs at 512-1024
examples, causal transformers), against `blocks.product_bytes` and against the count of four
loss evaluations' peaks it replaced; the command line: experiments/bench/activations.py."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from experiments.bench import peers, peers_data
from experiments.bench.depth_memory_rows import (
    deep_mlp_point,
    product_held,
    search_held,
    trace_held,
)
from landscape.core import blocks, budget
from landscape.point import Point

VOCAB = 64
MB = 2**20


def transformer_point(width: int, depth: int, length: int, batch: int) -> Point:
    """A causal pre-norm transformer (4 heads, a 4x MLP, `VOCAB` tokens) as a flax module, its
    next-token cross-entropy on `batch` random sequences of `length`, float32."""
    import flax.linen as nn
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + nn.MultiHeadDotProductAttention(4, deterministic=True)(
                nn.LayerNorm()(x), mask=mask
            )
            return x + nn.Dense(width)(nn.gelu(nn.Dense(4 * width)(nn.LayerNorm()(x))))

    class Transformer(nn.Module):
        @nn.compact
        def __call__(self, tokens: Any) -> Any:
            x = nn.Embed(VOCAB, width)(tokens)
            position = nn.initializers.normal(0.02)
            x = x + self.param("position", position, (length, width), jnp.float32)
            for _ in range(depth):
                x = Block()(x)
            return nn.Dense(VOCAB)(nn.LayerNorm()(x))

    net = Transformer()
    tokens = jax.random.randint(jax.random.key(1), (batch, length + 1), 0, VOCAB)
    params = net.init(jax.random.key(0), tokens[:, :-1])["params"]

    def loss(params: Any, tokens: jax.Array) -> jax.Array:
        logits = net.apply({"params": params}, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    name = f"transformer w{width} x{depth}, {batch} x {length} tokens"
    return Point(params, objective=loss, inputs=tokens, name=name)


MODELS = {
    "MLP 64-1000-1000-10, 512 examples": lambda: peers.mlp_point(peers_data.mlp_arrays(1000)),
    "MLP 64-4472-4472-10, 512 examples": lambda: peers.mlp_point(peers_data.mlp_arrays(4472)),
    "MLP 8 x 700, 512 examples": lambda: deep_mlp_point(8, 700, 512),
    "MLP 16 x 500, 1024 examples": lambda: deep_mlp_point(16, 500, 1024),
    "transformer w128 x4, 64 x 64 tokens": lambda: transformer_point(128, 4, 64, 64),
    "transformer w256 x2, 32 x 128 tokens": lambda: transformer_point(256, 2, 128, 32),
}


def rows(names: list[str]) -> list[str]:
    """A row per model and program: D, XLA's count, the estimate, their ratio, and the ratio
    had the activations been four loss evaluations' peaks, MB."""
    found = []
    for name in names:
        point = MODELS[name]()
        programs = (("a product", product_held, False), ("Hutchinson block", trace_held, True),
                    ("search, ncv 20", search_held, True))  # fmt: skip
        for program, measured, linearised in programs:
            held, estimate = measured(point)
            four = estimate - blocks.activation_bytes(point, linearised)
            four += 4 * budget.loss_bytes(point)
            cells = [name, f"{point.num_params:.3g}", program, f"{held / MB:.0f}"]
            cells += [f"{estimate / MB:.0f}", f"{estimate / held:.2f}", f"{four / held:.2f}"]
            found.append("| " + " | ".join(cells) + " |")
    return found
