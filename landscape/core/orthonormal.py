"""One orthonormalisation for every Krylov basis: Gram-Schmidt of a vector against orthonormal
rows, Householder QR of a block of rows (TSQR over a mesh), the in-place rotation a restart
applies, and the random direction an exhausted Krylov space continues from (`hashed_normal`).
numpy rows are handled on the host (nothing compiled), jax arrays in the caller's program.
docs/design/curvature.md, "Certified extreme eigenpairs"."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

ROTATION_CHUNKS = 16  # `rotate_rows` rewrites 1/16 of the columns at a time (in and out: 1/8)


def _dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def held_dtype(dtype: Any, storage: str | None) -> Any:
    """The dtype rows are held in: `dtype`, or for bfloat16 storage (`lanczos.STORAGES`) its
    bits as uint16, since XLA:CPU writes a row of a bfloat16 array through a float32 copy of the
    whole array, and a row of an integer array in place."""
    return dtype if storage is None else jnp.dtype(jnp.uint16)


def widened(rows: jax.Array, dtype: Any) -> jax.Array:
    """Rows as `dtype`, from bfloat16's bits held as uint16 (`held_dtype`) or a float dtype."""
    if rows.dtype == jnp.uint16:  # bfloat16: float32's upper half
        rows = jax.lax.bitcast_convert_type(rows.astype(jnp.uint32) << 16, jnp.float32)
    return rows.astype(dtype)


def narrowed(x: jax.Array, held: Any) -> jax.Array:
    """x rounded to what rows held as `held` keep (`held_dtype`)."""
    if held == jnp.uint16:
        return jax.lax.bitcast_convert_type(x.astype(jnp.bfloat16), jnp.uint16)
    return x.astype(held)


def coefficients(rows: jax.Array, w: jax.Array) -> jax.Array:
    """rows (r, D) times w (D,), in w's dtype; rows held as bits (`held_dtype`) read a row at a
    time, so no wide copy of them is held."""
    if rows.dtype != jnp.uint16:
        return _dot(rows, w)
    return jax.lax.map(lambda row: _dot(widened(row, w.dtype), w), rows)


def combination(c: jax.Array, rows: jax.Array) -> jax.Array:
    """c (r,) times rows (r, D), in c's dtype (`coefficients`' reading of rows held as bits)."""
    if rows.dtype != jnp.uint16:
        return _dot(c, rows)

    def add(j: jax.Array, total: jax.Array) -> jax.Array:
        return total + c[j] * widened(rows[j], c.dtype)

    return jax.lax.fori_loop(0, rows.shape[0], add, jnp.zeros(rows.shape[1:], c.dtype))


def orthogonalised(rows: jax.Array, w: jax.Array) -> jax.Array:
    """w less its components along the orthonormal `rows` (r, D) (zero rows remove nothing;
    rows held as bits, `held_dtype`, are read in w's dtype)."""
    return w - combination(coefficients(rows, w), rows)


def qr_rows(rows: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
    """Orthonormal rows spanning those of `rows` (r, n) by Householder QR (a block of lower rank
    gets orthonormal rows all the same); past n rows, zero. numpy rows: on the host."""
    xp = np if isinstance(rows, np.ndarray) else jnp
    count, length = rows.shape
    q, _ = xp.linalg.qr(rows.T)  # (n, min(r, n))
    if count <= length:
        return q.T
    return xp.concatenate([q.T, xp.zeros((count - length, length), rows.dtype)])


def tsqr_rows(rows: jax.Array, mesh: Mesh, axes: tuple[str, ...] | None = None) -> jax.Array:
    """`qr_rows` of rows (r, n) whose columns lie split over `mesh`'s `axes` (default all; the
    others hold them alike), by TSQR: each device's columns by Householder QR on it, the
    stacked r x r factors by one more, so only the factors (devices x r x r numbers) are
    gathered."""
    axes = tuple(mesh.axis_names) if axes is None else axes

    def local(block: jax.Array) -> jax.Array:
        q, r = jnp.linalg.qr(block.T)  # (local, r), (r, r)
        stacked = jax.lax.all_gather(r, axes, tiled=True)  # (devices * r, r)
        q2, _ = jnp.linalg.qr(stacked)
        index: jax.Array | int = 0
        for name in axes:
            index = index * mesh.shape[name] + jax.lax.axis_index(name)
        mine = jax.lax.dynamic_slice_in_dim(q2, index * r.shape[0], r.shape[0])
        return (q @ mine).T

    return jax.shard_map(
        local, mesh=mesh, in_specs=P(None, axes), out_specs=P(None, axes),
        axis_names=set(axes), check_vma=False,
    )(rows)  # fmt: skip


def rotate_rows(rows: jax.Array, q: jax.Array, active: jax.Array | bool = True) -> jax.Array:
    """rows <- qᵀ rows (q (n, n) for n rows), in ROTATION_CHUNKS column blocks written in
    place: a restart holds a block of the rows and its rotation, not a second copy (rows held
    as bits, `held_dtype`: each block rotated in q's dtype, then rounded back). With
    `active` False (traced) nothing is done at no cost: the loops run no block, where a
    conditional would copy the rows."""
    count, dim = rows.shape
    width = max(1, dim // ROTATION_CHUNKS)
    blocks = dim // width

    def rotated(rows: jax.Array, start: jax.Array | int, size: int) -> jax.Array:
        part = jax.lax.dynamic_slice(rows, (0, start), (count, size))
        turned = narrowed(_dot(q.T, widened(part, q.dtype)), rows.dtype)
        return jax.lax.dynamic_update_slice(rows, turned, (0, start))

    rows = jax.lax.fori_loop(
        0, jnp.where(active, blocks, 0), lambda b, rows: rotated(rows, b * width, width), rows
    )
    if blocks * width < dim:  # the last columns, a static block of their own
        rest = dim - blocks * width
        rows = jax.lax.fori_loop(
            0, jnp.where(active, 1, 0), lambda _, rows: rotated(rows, blocks * width, rest), rows
        )
    return rows


def hashed_normal(key: jax.Array, like: jax.Array) -> jax.Array:
    """A direction of `like`'s shape and dtype with entries about N(0, 1), from a counter hash
    of `key`: each entry a function of its index alone (lowbias32 twice, then the normal's
    inverse CDF), which XLA fuses into one loop. An exhausted Krylov space needs only a
    direction outside its span; `jax.random.normal` there held three vectors of D of threefry's
    state beside the step's (docs/performance.md, "The search's working set"): the search's and
    Lanczos's fresh directions."""
    words = jnp.ravel(jax.random.key_data(key)).astype(jnp.uint32)
    index = jax.lax.iota(jnp.uint32, like.size).reshape(like.shape)
    bits = _lowbias32(_lowbias32(index + words[0]) ^ words[-1])
    wide = jnp.promote_types(like.dtype, jnp.float32)
    uniform = ((bits >> 8).astype(wide) + 0.5) / float(1 << 24)  # in (0, 1)
    # a Python float (weakly typed): the float32 draw is the same with x64 on
    return (math.sqrt(2.0) * jax.lax.erf_inv(2 * uniform - 1)).astype(like.dtype)


def _lowbias32(x: jax.Array) -> jax.Array:
    """Wellons' 32-bit integer hash (xor-shift-multiply; full avalanche)."""
    x = (x ^ (x >> 16)) * np.uint32(0x7FEB352D)
    x = (x ^ (x >> 15)) * np.uint32(0x846CA68B)
    return x ^ (x >> 16)
