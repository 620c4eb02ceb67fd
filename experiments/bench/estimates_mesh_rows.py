"""The estimates-against-XLA table's rows: the peers MLP's product, search and three-vector SLQ
programs on two meshes of 8 emulated devices, compiled only, and each estimate beside XLA's
memory analysis; the command line: experiments/bench/estimates_mesh.py."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from experiments.bench import peers, peers_data
from landscape.core import blocks, eigen_search, krylov_schur, operator, orthonormal, three_term
from landscape.core import layout as layout_lib
from landscape.probes import spectra

MB = 2**20
NCV, K = 20, 5
DEFAULT_HOLD = layout_lib.HOLD_VECTORS


@functools.partial(jax.jit, static_argnames=("objective", "layout"))
def _product(objective: Any, params: Any, inputs: Any, v: jax.Array, layout: Any) -> jax.Array:
    return operator.hessian_operator(objective, params, inputs, layout).matvec(v)


def meshes() -> dict[str, tuple[Mesh, dict[str, P]]]:
    """The two meshes of 8 devices and the leaves' specs on them (the others replicated)."""
    devices = np.array(jax.devices())
    megatron = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)}
    return {
        "data 2 x model 4": (Mesh(devices.reshape(2, 4), ("data", "model")), megatron),
        "data 8": (Mesh(devices, ("data",)), {}),
    }


def _analysis(program: Any) -> Any:
    """XLA's memory analysis of a lowered program (XLA:CPU gives one)."""
    analysis = program.compile().memory_analysis()
    assert analysis is not None, "this backend gives no memory analysis"
    return analysis


LAYOUTS = ("held", "split")  # blocks replicated over the data axis held whole, or split


def _placed(width: int, name: str, mode: str) -> tuple[Any, dict[str, jax.Array], Any]:
    """The peers MLP of hidden width `width` with its leaves placed on mesh `name`: the point,
    its placed parameters and the flat vectors' layout over that mesh, its blocks replicated
    over the data axis held or split (`mode`; `layout.holding` decides it by the numbers)."""
    layout_lib._HOLDING.clear()
    layout_lib.HOLD_VECTORS = DEFAULT_HOLD if mode == "held" else 10**15
    one = peers.mlp_point(peers_data.mlp_arrays(width))
    mesh, specs = meshes()[name]
    params = {
        k: jax.device_put(v, NamedSharding(mesh, specs.get(k, P()))) for k, v in one.params.items()
    }
    point = one.with_params(params)
    lay = layout_lib.spread(point.params, point.batches)
    assert lay is not None
    return point, params, lay


def row(width: int, name: str, mode: str, search: bool, storage: str | None = None) -> str:
    """One table row: the product's estimate and XLA's count (temporaries and output), and the
    search's (its vectors, kept in `storage`, temporaries and what it does not write in place),
    in MB a device."""
    point, params, lay = _placed(width, name, mode)
    objective, inputs = point.shared
    v = jax.ShapeDtypeStruct((lay.padded,), jnp.float32, sharding=lay.sharding())
    made = _analysis(_product.lower(objective, params, inputs, v, lay))
    xla = made.temp_size_in_bytes + made.output_size_in_bytes
    estimate = blocks.product_bytes(point, devices=lay.devices, linearised=False)
    cells = [name, mode, f"{point.num_params:.3g}", f"{estimate / MB:.0f}", f"{xla / MB:.0f}"]
    cells.append(f"{estimate / xla:.2f}")
    if search:
        settings = krylov_schur.Settings(K, NCV - K, point.num_params, "largest", 1e-5, 10)
        plan = krylov_schur.plan(settings, krylov_schur.init(settings), np.dtype(np.float32))
        dtype = orthonormal.held_dtype(jnp.float32, storage)
        rows = jax.ShapeDtypeStruct((NCV, lay.padded), dtype, sharding=lay.sharding(1))
        key = jax.random.key(0)
        optioned = operator.with_options(objective, operator.ProductOptions(None, storage))
        program = eigen_search.advance.lower(
            optioned, params, inputs, rows, plan, key, "largest", lay
        )
        found = _analysis(program)
        unaliased = found.output_size_in_bytes - found.alias_size_in_bytes
        stored = np.dtype(dtype).itemsize
        held = NCV * lay.local * stored + found.temp_size_in_bytes + unaliased
        gradient = blocks.device_param_bytes(point)  # each call's, as the parameters lie
        product = blocks.product_bytes(point, devices=lay.devices)
        kept = eigen_search.lanczos_search_bytes(lay.local, NCV, 4, stored) + product + gradient
        cells += [f"{kept / MB:.0f}", f"{held / MB:.0f}", f"{kept / held:.2f}"]
    return "| " + " | ".join(cells) + " |"


def slq_row(width: int, name: str, mode: str, storage: str | None) -> str:
    """One row for the three-vector SLQ's program (`spectra.slq_block`, one probe of 30 steps,
    its products on pytrees split as the parameters): its estimate and XLA's temporaries and
    output, MB a device."""
    point, params, lay = _placed(width, name, mode)
    objective, inputs = point.shared
    indices = np.zeros(1, np.int32)
    program = spectra.slq_block.lower(
        objective, params, inputs, jax.random.key(0), indices, 30, "rademacher", False, lay,
        "three", storage, None, True,
    )  # fmt: skip
    made = _analysis(program)
    xla = made.temp_size_in_bytes + made.output_size_in_bytes
    kept = three_term.vector_bytes(point.num_params, 4, "three", 30, storage, pytrees=True)
    estimate = blocks.product_bytes(point, kept, lay.devices, three_term.AS_PARAMETERS)
    cells = [name, mode, f"{point.num_params:.3g}", storage or "float32", f"{estimate / MB:.0f}"]
    return "| " + " | ".join([*cells, f"{xla / MB:.0f}", f"{estimate / xla:.2f}"]) + " |"
