"""The memory rows against depth: XLA's count (`memory_analysis()`, compiled only) of one
product, a Hutchinson block, the search and the three-vector SLQ against the probes' estimates
(`blocks.product_bytes` and what each probe keeps), on tanh MLPs of 2 to 16 equal hidden layers;
the command line: experiments/bench/depth_memory.py."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import three_term_memory_rows
from landscape.core import blocks, eigen_search, krylov_schur, operator, orthonormal
from landscape.point import Point
from landscape.probes import traces

EXAMPLES = 16  # few, so that the vectors weigh and not the activations
INPUTS, CLASSES = 64, 10


def deep_mlp_point(layers: int, width: int, examples: int = EXAMPLES, seed: int = 0) -> Point:
    """64 -> width (x layers) -> 10 tanh MLP, mean cross-entropy on `examples` fixed Gaussian
    inputs, float32; weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases zero."""
    rng = np.random.default_rng(seed)
    sizes = [INPUTS] + [width] * layers + [CLASSES]
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        bound = 1 / math.sqrt(fan_in)
        weight = rng.uniform(-bound, bound, (fan_in, fan_out))
        params[f"w{i:02d}"] = jnp.asarray(weight, jnp.float32)
        params[f"b{i:02d}"] = jnp.zeros(fan_out, jnp.float32)
    x = jnp.asarray(rng.standard_normal((examples, INPUTS)), jnp.float32)
    y = jnp.asarray(rng.integers(0, CLASSES, examples), jnp.int32)
    return Point(params, objective=_loss, inputs=(x, y), name=f"{layers}-layer MLP h={width}")


def _loss(params: dict[str, jax.Array], inputs: tuple[jax.Array, jax.Array]) -> jax.Array:
    x, y = inputs
    last = len(params) // 2 - 1
    for i in range(last):
        x = jnp.tanh(x @ params[f"w{i:02d}"] + params[f"b{i:02d}"])
    logits = x @ params[f"w{last:02d}"] + params[f"b{last:02d}"]
    picked = jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def _held(made: Any, point: Point, output: bool = True) -> float:
    """XLA's count less the parameters and data (resident before a call); the output left out
    where it is the arguments' buffers (`output=False`: the search's donated vectors)."""
    resident = sum(np.asarray(x).nbytes for x in jax.tree.leaves(point.shared[1]))
    resident += 4 * point.num_params
    total = made.temp_size_in_bytes + made.argument_size_in_bytes
    return float(total + (made.output_size_in_bytes if output else 0) - resident)


def product_held(point: Point) -> tuple[float, float]:
    """One product v -> H v on flat vectors: (XLA's count, the estimate)."""
    objective, inputs = point.shared

    def product(params: Any, inputs: Any, v: jax.Array) -> jax.Array:
        return operator.hessian_operator(objective, params, inputs).matvec(v)

    v = jnp.zeros(point.num_params, jnp.float32)
    made = jax.jit(product).lower(point.params, inputs, v).compile().memory_analysis()
    return _held(made, point), blocks.product_bytes(point, linearised=False)


def search_held(point: Point, storage: str | None = None) -> tuple[float, float]:
    """The search's program (k = 5, ncv = 20, its vectors kept in `storage`): (XLA's count,
    the estimate)."""
    objective, inputs = point.shared
    objective = operator.with_options(objective, operator.ProductOptions(None, storage))
    settings = krylov_schur.Settings(5, 15, point.num_params, "largest", 1e-5, 10)
    plan = krylov_schur.plan(settings, krylov_schur.init(settings), np.dtype(np.float32))
    held = orthonormal.held_dtype(jnp.float32, storage)
    vectors = jnp.zeros((20, point.num_params), held)
    key = jax.random.key(0)
    lowered = eigen_search.advance.lower(
        objective, point.params, inputs, vectors, plan, key, "largest"
    )
    made = lowered.compile().memory_analysis()
    stored = None if storage is None else jnp.dtype(storage).itemsize
    kept = eigen_search.lanczos_search_bytes(point.num_params, 20, 4, stored)
    return _held(made, point, output=False), kept + blocks.product_bytes(point)


def trace_held(point: Point) -> tuple[float, float]:
    """A Hutchinson block of one product at a time (the CPU's): (XLA's temporaries, estimate)."""
    objective, inputs = point.shared
    dim = point.num_params
    zeros = jnp.zeros((0, dim), jnp.float32), jnp.zeros((), jnp.float32), jnp.zeros(8)
    state = traces.TraceState(*zeros)
    lowered = traces.trace_block.lower(
        objective, point.params, inputs, jax.random.key(0), state, np.int32(traces.REST),
        np.arange(8, dtype=np.int32), False,
    )  # fmt: skip
    made = lowered.compile().memory_analysis()
    assert made is not None, "this backend gives no memory analysis"
    return float(made.temp_size_in_bytes), blocks.product_bytes(point)


def rows(depths: tuple[tuple[int, int], ...], examples: int = EXAMPLES) -> list[str]:
    """A row per (layers, width) and program: D, the largest leaf's share, bytes a parameter
    by XLA and by the estimate, their ratio, and the ratio had the product counted four
    vectors of D (v and H v flat and as the parameters lie)."""
    found = []
    for layers, width in depths:
        point = deep_mlp_point(layers, width, examples)
        dim = point.num_params
        share = max(math.prod(np.shape(x)) for x in jax.tree.leaves(point.params)) / dim
        programs = [("a product", product_held(point)), ("Hutchinson block", trace_held(point)),
                    ("search, ncv 20", search_held(point)),
                    ("search, ncv 20, bfloat16", search_held(point, "bfloat16"))]  # fmt: skip
        for storage in (None, "bfloat16"):
            for pytrees in (True, False):
                name = f"SLQ three, {storage or 'float32'}, {'pytrees' if pytrees else 'flat'}"
                programs.append((name, three_term_memory_rows.measured(point, storage, pytrees)))
        for name, (held, estimate) in programs:
            four = estimate + 4 * dim * (1 - share)  # the product as four vectors of D
            cells = [str(layers), f"{dim:.3g}", f"{share:.2f}", name, f"{held / dim:.1f}"]
            cells += [f"{estimate / dim:.1f}", f"{estimate / held:.2f}", f"{four / held:.2f}"]
            found.append("| " + " | ".join(cells) + " |")
    return found


def _deep_specs(point: Point, layout: str) -> dict[str, Any]:
    """Each leaf's spec on a 1-D mesh ("model") of 8 devices: "rows", every hidden weight split
    by its rows (FSDP-like), or "megatron", the hidden weights split by columns then rows in
    turn; the first and last layers and the other biases replicated."""
    from jax.sharding import PartitionSpec as P

    last = len(point.params) // 2 - 1
    specs: dict[str, Any] = {}
    for i in range(last + 1):
        weight, bias = P(), P()
        if 0 < i < last and layout == "rows":
            weight = P("model", None)
        elif 0 < i < last:
            column = i % 2 == 1
            weight = P(None, "model") if column else P("model", None)
            bias = P("model") if column else P()
        specs[f"w{i:02d}"], specs[f"b{i:02d}"] = weight, bias
    return specs


def mesh_rows(layers: int, width: int) -> list[str]:
    """Over 8 devices (`XLA_FLAGS=--xla_force_host_platform_device_count=8`), per layout: a
    product's and the three-vector SLQ's estimate against XLA's temporaries and output, MB a
    device, and XLA's count in bytes a parameter of the whole model."""
    from jax.sharding import Mesh, NamedSharding

    from experiments.bench import estimates_mesh_rows as mesh_lib
    from landscape.core import layout as layout_lib
    from landscape.core import three_term
    from landscape.probes import spectra

    one = deep_mlp_point(layers, width)
    mesh, dim, found = Mesh(np.array(jax.devices()), ("model",)), one.num_params, []
    for name in ("rows", "megatron"):
        specs = _deep_specs(one, name)
        layout_lib._HOLDING.clear()
        params = {
            k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in one.params.items()
        }
        point = one.with_params(params)
        lay = layout_lib.spread(point.params, point.batches)
        assert lay is not None, "the parameters lie on one device"
        objective, inputs = point.shared
        v = jax.ShapeDtypeStruct((lay.padded,), jnp.float32, sharding=lay.sharding())
        made = mesh_lib._analysis(mesh_lib._product.lower(objective, params, inputs, v, lay))
        lone = blocks.product_bytes(point, devices=lay.devices, linearised=False)
        programs = [("a product", made, lone)]
        for storage in (None, "bfloat16"):
            lowered = spectra.slq_block.lower(
                objective, params, inputs, jax.random.key(0), np.zeros(1, np.int32), 30,
                "rademacher", False, lay, "three", storage, None, True,
            )  # fmt: skip
            kept = three_term.vector_bytes(dim, 4, "three", 30, storage, pytrees=True)
            estimate = blocks.product_bytes(point, kept, lay.devices, three_term.AS_PARAMETERS)
            label = f"SLQ three, {storage or 'float32'}"
            programs.append((label, mesh_lib._analysis(lowered), estimate))
        for label, analysis, estimate in programs:
            xla = analysis.temp_size_in_bytes + analysis.output_size_in_bytes
            cells = [name, f"{dim:.3g}", label, f"{estimate / 2**20:.0f}", f"{xla / 2**20:.0f}"]
            cells += [f"{estimate / xla:.2f}", f"{xla * mesh.size / dim:.1f}"]
            found.append("| " + " | ".join(cells) + " |")
    return found
