"""How a point's parameters lie as one flat vector, the vector every matrix-free probe works on
(docs/guide/split_model.md, "What lies where" and "Held or split").

On one device the flat vector is `ravel_pytree`'s. Over a mesh of devices it is laid out so that
each device's slice holds its own shards: the leaves' local blocks in leaf order, a block that
several devices hold alike (replicated over some mesh axes) split among them, or, over an axis
every leaf is replicated over, held whole by each (`holding`), each device's part padded to one
length. A probe's vectors then carry the parameters' sharding: a product unflattens its vector
locally, multiplies (XLA partitions the model as the parameters are partitioned), flattens
locally; a dot product is local sums and one all-reduce; nothing of size D is gathered.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from landscape.core import memory, orthonormal
from landscape.core.batches import Ragged
from landscape.typing import PyTree


@dataclasses.dataclass(frozen=True)
class Layout:
    """The flat layout of a model's parameters (hashable: a static argument of the probes'
    programs, the same for every point of the model laid out alike).

    mesh: None on one device. specs: each leaf's PartitionSpec over the mesh. shapes, dtypes:
    the leaves'. treedef: the params' structure. data: the mesh axes over which a dataset's
    batches split their examples (`data_axes`; empty: none, or `inputs=`). held: mesh axes
    over which every leaf is replicated and the flat vector too, each of their devices holding
    its blocks whole, so a product gathers nothing over them (`holding`)."""

    treedef: Any
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    mesh: Mesh | None = None
    specs: tuple[P, ...] = ()
    data: tuple[str, ...] = ()
    held: tuple[str, ...] = ()

    # ------------------------------------------------------------------------- sizes

    @property
    def dim(self) -> int:
        """D, the parameters."""
        return sum(math.prod(shape) for shape in self.shapes)

    @property
    def devices(self) -> int:
        return 1 if self.mesh is None else self.mesh.size

    @property
    def axes(self) -> tuple[str, ...]:
        """The mesh axes the flat vector is split over (all but the `held` ones)."""
        assert self.mesh is not None
        return tuple(name for name in self.mesh.axis_names if name not in self.held)

    @property
    def slices(self) -> int:
        """The distinct slices of the flat vector: the devices over its `axes` (1: one device)."""
        return 1 if self.mesh is None else _copies(self.mesh, self.axes)

    def _local_shape(self, shape: tuple[int, ...], spec: P) -> tuple[int, ...]:
        """A leaf's block on one device."""
        assert self.mesh is not None
        local = list(shape)
        for axis, names in enumerate(tuple(spec) + (None,) * (len(shape) - len(spec))):
            for name in _names(names):
                local[axis] //= self.mesh.shape[name]
        return tuple(local)

    def _shared_by(self, spec: P) -> tuple[str, ...]:
        """The flat vector's axes over which a leaf's block is replicated (the ones its spec
        leaves out): its devices split the block among them."""
        used = {name for names in spec for name in _names(names)}
        return tuple(name for name in self.axes if name not in used)

    def _part(self, shape: tuple[int, ...], spec: P) -> int:
        """The length of a device's part of a leaf's block: the block split among the devices
        that hold it alike, rounded up."""
        size = math.prod(self._local_shape(shape, spec))
        copies = math.prod(self.mesh.shape[name] for name in self._shared_by(spec))  # type: ignore[union-attr]
        return -(-size // copies)

    @property
    def local(self) -> int:
        """A device's slice of the flat vector."""
        return sum(self._part(s, p) for s, p in zip(self.shapes, self.specs, strict=True))

    @property
    def gathered(self) -> int:
        """The entries of a vector a device gathers to unflatten it: each block its flat slice
        splits among devices (replicated over a flat axis), whole."""
        return sum(
            math.prod(self._local_shape(shape, spec))
            for shape, spec in zip(self.shapes, self.specs, strict=True)
            if self._shared_by(spec)
        )

    @property
    def largest_whole(self) -> int:
        """The entries of the largest leaf every device holds whole (its spec splits it over
        no mesh axis); 0 if none."""
        whole = [math.prod(s) for s, p in zip(self.shapes, self.specs, strict=True) if not any(p)]
        return max(whole, default=0)

    @property
    def padded(self) -> int:
        """The flat vector's length: D on one device, `slices` x `local` over a mesh (the
        parts' padding zero)."""
        return self.dim if self.mesh is None else self.slices * self.local

    def sharding(self, leading: int = 0) -> NamedSharding | None:
        """The sharding of a (..., padded) array of flat vectors with `leading` axes before
        the flat one: the flat axis split over `axes` (replicated over the held ones); None on
        one device."""
        if self.mesh is None:
            return None
        return NamedSharding(self.mesh, P(*([None] * leading), self.axes or None))

    def divides(self) -> bool:
        """Whether every leaf splits evenly over the mesh axes its spec names."""
        assert self.mesh is not None
        for shape, spec in zip(self.shapes, self.specs, strict=True):
            entries = tuple(spec) + (None,) * (len(shape) - len(spec))
            for size, names in zip(shape, entries, strict=False):
                if size % math.prod(self.mesh.shape[name] for name in _names(names)):
                    return False
        return True

    # ------------------------------------------------------------------------- on the devices

    def place(self, x: jax.Array) -> jax.Array:
        """x (..., padded) constrained to the flat sharding (inside a program; no-op on one
        device): a random draw then comes out shard by shard, each device its own part."""
        if self.mesh is None:
            return x
        return jax.lax.with_sharding_constraint(x, self.sharding(x.ndim - 1))

    @property
    def cpu_mesh(self) -> bool:
        """Over a mesh of CPU devices (XLA:CPU, emulated devices included), where a program
        holds no collective inside a conditional: XLA:CPU orders a program's collectives only
        by when they start, so a conditional whose branch is still running lets the next
        collective start, and a device holds two of one program at once, each blocking a thread
        of a pool the devices share; a process of 8 emulated devices aborted in the rendezvous
        (docs/guide/split_model.md, "Emulated devices"). There the probes' programs keep their
        collectives out of conditionals that another collective does not wait for."""
        return self.mesh is not None and self.mesh.devices.flat[0].platform == "cpu"

    def clean(self, x: jax.Array) -> jax.Array:
        """x (padded,) with its padding zero (a random draw's; no-op on one device)."""
        return x if self.mesh is None else self.to_flat(self.from_flat(x))

    def rotate(self, rows: jax.Array, q: jax.Array, **options: Any) -> jax.Array:
        """`orthonormal.rotate_rows` of rows (n, padded), each device on its own columns."""
        if self.mesh is None:
            return orthonormal.rotate_rows(rows, q, **options)
        active = options.pop("active", True)
        return self._mapped(
            lambda local, q, active: orthonormal.rotate_rows(local, q, active=active, **options),
            (P(None, self.axes), P(), P()),
            P(None, self.axes),
        )(rows, q, jnp.asarray(active))

    # ------------------------------------------------------------------------- the maps

    def to_flat(self, tree: PyTree) -> jax.Array:
        """The flat vector (padded,) of a pytree shaped like the params (traceable)."""
        if self.mesh is None:
            return ravel_pytree(tree)[0]
        leaves = jax.tree.leaves(tree)
        return self._mapped(self._local_to_flat, (list(self.specs),), P(self.axes))(leaves)

    def from_flat(self, flat: jax.Array) -> PyTree:
        """The pytree of a flat vector (traceable), each leaf sharded as its parameter."""
        if self.mesh is None:
            shapes = [jax.ShapeDtypeStruct(s, self.dtype) for s in self.shapes]
            return ravel_pytree(jax.tree.unflatten(self.treedef, shapes))[1](flat)
        leaves = self._mapped(self._local_from_flat, (P(self.axes),), list(self.specs))(flat)
        return jax.tree.unflatten(self.treedef, leaves)

    def _mapped(self, f: Any, in_specs: Any, out_specs: Any) -> Any:
        """`f` on each device's blocks: a shard_map manual over the flat vector's `axes` (the
        held ones left to XLA, which keeps them alike, so no transpose sums over them), or
        `f` itself where every axis is held (the flat vector whole on each device)."""
        if not self.axes:
            return f
        return jax.shard_map(
            f, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs,
            axis_names=set(self.axes), check_vma=False,
        )  # fmt: skip

    def _local_to_flat(self, blocks: list[jax.Array]) -> jax.Array:
        parts = []
        for block, shape, spec in zip(blocks, self.shapes, self.specs, strict=True):
            shared, part = self._shared_by(spec), self._part(shape, spec)
            raveled = jnp.ravel(block)
            raveled = jnp.pad(raveled, (0, part * _copies(self.mesh, shared) - raveled.size))
            index = _index(self.mesh, shared)
            parts.append(jax.lax.dynamic_slice(raveled, (index * part,), (part,)))
        return jnp.concatenate(parts)

    def _local_from_flat(self, chunk: jax.Array) -> list[jax.Array]:
        blocks, offset = [], 0
        for shape, spec in zip(self.shapes, self.specs, strict=True):
            shared, part = self._shared_by(spec), self._part(shape, spec)
            mine = chunk[offset : offset + part]
            offset += part
            whole = jax.lax.all_gather(mine, shared, tiled=True) if shared else mine
            local = self._local_shape(shape, spec)
            blocks.append(whole[: math.prod(local)].reshape(local))
        return blocks


def _names(names: Any) -> tuple[str, ...]:
    """A PartitionSpec entry's mesh axes: None, a name, or a tuple of names."""
    if names is None:
        return ()
    return (names,) if isinstance(names, str) else tuple(names)


def _copies(mesh: Mesh | None, axes: tuple[str, ...]) -> int:
    return 1 if mesh is None else math.prod(mesh.shape[name] for name in axes)


def _index(mesh: Mesh | None, axes: tuple[str, ...]) -> jax.Array | int:
    """This device's linear index over `axes` (inside a shard_map)."""
    index: jax.Array | int = 0
    for name in axes:
        assert mesh is not None
        index = index * mesh.shape[name] + jax.lax.axis_index(name)
    return index


def of(params: PyTree) -> Layout:
    """The layout of `params` (concrete arrays): over their mesh when every leaf is a jax array
    with a NamedSharding over one mesh of several devices, else `ravel_pytree`'s."""
    leaves, treedef = jax.tree.flatten(params)
    shapes = tuple(tuple(np.shape(leaf)) for leaf in leaves)
    dtype = str(jnp.result_type(*leaves)) if leaves else "float32"
    shardings = [getattr(leaf, "sharding", None) for leaf in leaves]
    named = [s for s in shardings if isinstance(s, NamedSharding)]
    if not leaves or len(named) != len(leaves) or named[0].mesh.size == 1:
        return Layout(treedef, shapes, dtype)
    mesh = named[0].mesh
    if not isinstance(mesh, Mesh) or any(s.mesh != mesh for s in named):
        return Layout(treedef, shapes, dtype)
    layout = Layout(treedef, shapes, dtype, mesh, tuple(s.spec for s in named))
    if not layout.divides():  # uneven shards: the flat vector of ravel_pytree, gathered
        return Layout(treedef, shapes, dtype)
    return holding(layout)


HOLD_VECTORS = 32  # a default search's basis (20), its restart's block and a step's work, with room
_HOLDING: dict[Layout, Layout] = {}


def holding(layout: Layout) -> Layout:
    """`layout`, holding whole the blocks over the mesh axes every leaf is replicated over (a
    data-parallel axis) when HOLD_VECTORS flat vectors so held fit the memory policy's budget,
    else splitting them among their devices (docs/guide/split_model.md, "Held or split"). A
    split block is all-gathered inside every product: (c - 1) / c of it received by each of
    its c devices, and held whole for the product's length; held, each vector of D costs those
    bytes for as long as the probe keeps it, and a product gathers nothing. Decided once per
    layout in a process, so a probe's programs and its memory plan see one layout."""
    assert layout.mesh is not None
    if layout not in _HOLDING:
        used = {name for spec in layout.specs for names in spec for name in _names(names)}
        replicated = tuple(name for name in layout.mesh.axis_names if name not in used)
        held = dataclasses.replace(layout, held=replicated)
        need = HOLD_VECTORS * held.local * np.dtype(layout.dtype).itemsize
        fits = bool(replicated) and need <= memory.budget()
        _HOLDING[layout] = held if fits else layout
    return _HOLDING[layout]


def spread(params: PyTree, batches: PyTree = None) -> Layout | None:
    """The layout of `params` over their mesh (`of`), with the axes over which `batches` (a
    point's dataset, if any) split their examples, or None on one device: the static argument
    the probes' programs take (None keeps one device's programs as they were)."""
    found = of(params)
    if found.mesh is None:
        return None
    return dataclasses.replace(found, data=data_axes(found.mesh, batches))


def data_axes(mesh: Mesh, batches: PyTree) -> tuple[str, ...]:
    """The mesh axes over which every leaf of `batches` (B, examples, ...) splits its examples
    alike, the batch axis whole; empty otherwise (XLA then partitions the scan as it will), and
    for a dataset with a short last batch (`batches.Ragged`), whose shares would be unequal."""
    if isinstance(batches, Ragged):
        return ()
    found = set()
    for leaf in jax.tree.leaves(batches):
        sharding = getattr(leaf, "sharding", None)
        if not isinstance(sharding, NamedSharding) or sharding.mesh != mesh or leaf.ndim < 2:
            return ()
        spec = tuple(sharding.spec) + (None, None)
        if spec[0] is not None:
            return ()
        found.add(_names(spec[1]))
    return found.pop() if len(found) == 1 else ()


def draw(kind: str, key: jax.Array, params: PyTree, layout: Layout | None) -> jax.Array:
    """A random flat vector (padded,) of Rademacher signs or N(0, 1) entries (`kind`), entry e
    of `ravel_pytree`'s order made from (key, e), so the same vector in every layout: a sign is
    bit e % 32 of the word jax.random.bits hashes at e // 32 (one Threefry hash for 32 signs:
    a hash an entry took 40% of a trace's time at D = 10^6 on the CPU), a normal entry
    jax.random.normal's of shape (D,). On one device one hash over the vector (one fusion; a
    hash a leaf compiled for 0.5-4 s each on the CPU); over a mesh each device hashes the
    positions it holds (`_hashed`)."""
    leaves = jax.tree.leaves(params)
    dtype = jnp.result_type(*leaves)
    dim = sum(math.prod(jnp.shape(x)) for x in leaves)
    if (layout is None or layout.mesh is None) and kind == "rademacher":
        words = jax.random.bits(key, (-(-dim // 32),), jnp.uint32)
        bits = words[:, None] >> jnp.arange(32, dtype=jnp.uint32) & 1
        return (1 - 2 * bits.reshape(-1)[:dim].astype(jnp.int32)).astype(dtype)
    if layout is None or layout.mesh is None:
        return jax.random.normal(key, (dim,), dtype)
    offset, drawn = 0, []
    for j, leaf in enumerate(leaves):
        sharding = NamedSharding(layout.mesh, layout.specs[j])
        drawn.append(_hashed(kind, key, offset, jnp.shape(leaf), dtype, sharding))
        offset += math.prod(jnp.shape(leaf))
    return layout.to_flat(jax.tree.unflatten(jax.tree.structure(params), drawn))


def probe(
    key: jax.Array, index: jax.Array, kind: str, params: PyTree, layout: Layout | None
) -> jax.Array:
    """Probe `index` (padded,) of the stochastic estimators: Rademacher signs, or a Gaussian
    vector scaled to norm sqrt(D), drawn from fold_in(key, index) by `draw` (the same vector in
    every layout)."""
    key = jax.random.fold_in(key, index)
    drawn = draw("rademacher" if kind == "rademacher" else "normal", key, params, layout)
    if kind == "rademacher":
        return drawn
    dim = sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree.leaves(params))
    return drawn * (math.sqrt(dim) / jnp.linalg.norm(drawn))


def _hashed(
    kind: str, key: jax.Array, offset: int, shape: tuple[int, ...], dtype: Any, sharding: Any
) -> jax.Array:
    """Entries offset + 0, 1, ... (row-major in `shape`) of `draw`'s vector from `key`, bit for
    bit (jax.random's partitionable Threefry counters and its bits-to-float rules), computed
    sharded as `sharding`: each device hashes the positions it holds."""
    if kind == "rademacher":
        return jax.lax.with_sharding_constraint(_signs(key, offset, shape, dtype), sharding)
    index = jax.lax.with_sharding_constraint(_row_major_index(shape), sharding)
    low = index + np.uint32(offset % 2**32)  # the position's two 32-bit words, carried
    high = jnp.full(shape, np.uint32(offset // 2**32)) + (low < index).astype(jnp.uint32)
    bits1, bits2 = _threefry(key, high, low)
    bits, width = (bits1 ^ bits2, jnp.uint32) if np.dtype(dtype).itemsize == 4 else (None, None)
    if bits is None:
        bits, width = (bits1.astype(jnp.uint64) << 32) | bits2.astype(jnp.uint64), jnp.uint64
    finfo = jnp.finfo(dtype)
    one = np.array(1.0, dtype).view(width)
    unit = jax.lax.bitcast_convert_type((bits >> (finfo.bits - finfo.nmant)) | one, dtype) - 1
    low_end = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    uniform = jnp.maximum(low_end, unit * (1 - low_end) + low_end)
    return np.sqrt(2).astype(dtype) * jax.lax.erf_inv(uniform)


def _signs(key: jax.Array, offset: int, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """`draw`'s Rademacher entries offset + 0, 1, ... (row-major in `shape`): entry e is bit
    e % 32 of the word hashed at e // 32, each row's words hashed once (rows x about C / 32
    hashes for C columns, where a hash an entry held a dozen block-sized temporaries) and
    read by a gather."""
    cols = shape[-1] if shape else 1
    rows = math.prod(shape[:-1]) if shape else 1
    starts = jnp.arange(rows, dtype=jnp.uint32) * np.uint32(cols)  # each row's first position
    low = starts + np.uint32(offset % 2**32)  # as 64 bits in two words, carried
    high = np.uint32(offset // 2**32) + (low < starts).astype(jnp.uint32)
    first_low, first_high = (low >> 5) | (high << 27), high >> 5  # the row's first word
    width = (cols + 30) // 32 + 1  # the words a row of C entries touches, from its first
    word_low = first_low[:, None] + jnp.arange(width, dtype=jnp.uint32)
    word_high = first_high[:, None] + (word_low < first_low[:, None]).astype(jnp.uint32)
    hashed = _threefry(key, word_high, word_low)
    words = hashed[0] ^ hashed[1]  # (rows, width)
    within = (low & 31)[:, None] + jnp.arange(cols, dtype=jnp.uint32)  # from the first word
    bit = jnp.take_along_axis(words, (within >> 5).astype(jnp.int32), axis=1) >> (within & 31)
    return (1 - 2 * (bit & 1).astype(jnp.int32)).astype(dtype).reshape(shape)


def _threefry(key: jax.Array, high: jax.Array, low: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 of the counters (high, low) under `key`, as jax.random hashes them."""
    words = jax.random.key_data(key)
    shape = high.shape
    return tuple(
        threefry2x32_p.bind(
            jnp.broadcast_to(words[0], shape), jnp.broadcast_to(words[1], shape), high, low
        )
    )


def _row_major_index(shape: tuple[int, ...]) -> jax.Array:
    """Each entry's row-major position in `shape` (uint32)."""
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index += jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(stride)
        stride *= shape[axis]
    return index
