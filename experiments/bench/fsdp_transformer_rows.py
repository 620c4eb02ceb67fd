"""The FSDP transformer's finite-difference table: the 2-block causal transformer, its parameters
split over the devices along their largest axis, and the errors of central differences against
the exact product; the command line: experiments/bench/fsdp_transformer.py (it sets XLA_FLAGS
before anything imports jax, so this module imports jax inside its functions)."""

from __future__ import annotations

import statistics
from typing import Any

DEVICES = 8
WIDTH, HEADS, DEPTH, VOCAB, LENGTH, BATCH = 64, 4, 2, 64, 32, 16


def model() -> Any:
    """The transformer as a flax module: token and position embeddings, DEPTH pre-norm blocks of
    causal self-attention and a 4x MLP, a final norm and the logits."""
    import flax.linen as nn
    import jax.numpy as jnp

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + nn.SelfAttention(HEADS, deterministic=True)(nn.LayerNorm()(x), mask=mask)
            hidden = nn.gelu(nn.Dense(4 * WIDTH)(nn.LayerNorm()(x)))
            return x + nn.Dense(WIDTH)(hidden)

    class Transformer(nn.Module):
        @nn.compact
        def __call__(self, tokens: Any) -> Any:
            x = nn.Embed(VOCAB, WIDTH)(tokens)
            x = x + self.param("position", nn.initializers.normal(0.02), (LENGTH, WIDTH))
            for _ in range(DEPTH):
                x = Block()(x)
            return nn.Dense(VOCAB)(nn.LayerNorm()(x))

    return Transformer()


def table(dtype: str, directions: int = 3) -> dict:
    """`finite_differences.table`'s dict for the sharded transformer in `dtype`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from experiments.bench.finite_differences_rows import EPSILONS, relative_error
    from landscape.core import compiled, operator
    from landscape.core import layout as layout_lib

    net = model()
    tokens = jax.random.randint(jax.random.key(1), (BATCH, LENGTH + 1), 0, VOCAB)
    params = net.init(jax.random.key(0), tokens[:, :-1])["params"]
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("fsdp",))

    def shard(leaf: jax.Array) -> NamedSharding:
        axes = [a for a in np.argsort(leaf.shape)[::-1] if leaf.shape[a] % DEVICES == 0]
        spec: list[str | None] = [None] * leaf.ndim
        if axes:
            spec[axes[0]] = "fsdp"
        return NamedSharding(mesh, P(*spec))

    def objective(p: Any, batch: jax.Array) -> jax.Array:
        logits = net.apply({"params": p}, batch[:, :-1])
        logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
        labels = jax.nn.one_hot(batch[:, 1:], VOCAB, dtype=logits.dtype)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, axis=-1))

    def placed(tree: Any, kind: Any) -> Any:
        return jax.tree.map(lambda x: jax.device_put(x.astype(kind), shard(x)), tree)

    point = placed(params, jnp.dtype(dtype))
    wide = placed(point, jnp.float64)  # the same (rounded) point, in float64
    layout, wide_layout = layout_lib.spread(point), layout_lib.spread(wide)
    rng = np.random.default_rng(0)
    dim = sum(x.size for x in jax.tree.leaves(params))
    fd: dict[float, list[float]] = {eps: [] for eps in EPSILONS}
    exact: list[float] = []

    def flat(tree: Any) -> Any:
        return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])

    leaves, treedef = jax.tree.flatten(params)
    cuts = np.cumsum([x.size for x in leaves])[:-1]
    for _ in range(directions):
        v = rng.standard_normal(dim)
        parts = np.split(v / np.linalg.norm(v), cuts)
        shaped = [c.reshape(x.shape) for c, x in zip(parts, leaves, strict=True)]
        tree = jax.tree.unflatten(treedef, shaped)
        tangent = placed(tree, jnp.dtype(dtype))
        wide_tangent = placed(tangent, jnp.float64)  # the direction as rounded
        reference = flat(compiled.hvp(objective, wide, tokens, wide_tangent, False, wide_layout))
        ours = compiled.hvp(objective, point, tokens, tangent, False, layout)
        exact.append(relative_error(flat(ours), reference))
        for eps in EPSILONS:
            product = operator.finite_difference_product(
                objective, point, tokens, tangent, jnp.asarray(eps), flat=False, layout=layout
            )
            fd[eps].append(relative_error(flat(product), reference))
    return {
        "dtype": dtype, "D": dim,
        "fd": {eps: statistics.median(errors) for eps, errors in fd.items()},
        "exact": statistics.median(exact),
    }  # fmt: skip
