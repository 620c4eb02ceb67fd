"""A dataset of n examples in batches that do not divide it is taken whole: 297 examples in
batches of 64 (in memory, `landscape.batches`: four of 64 and a short last one of 41; streamed,
`landscape.stream`: batches of any sizes) give the loss, gradient, Hessian-vector products, dense
Hessian, Gauss-Newton matrix and top eigenpairs of one batch of all 297, to 1e-12 relative: each
batch's mean weighed by its examples (docs/design/batches.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.core import batches as batches_lib
from landscape.core import hvp
from tests.golden.answers import mse, outputs, squared_error  # the tanh MLP

RNG = np.random.default_rng(7)
N, B = 297, 64
X, Y = RNG.standard_normal((N, 4)), RNG.standard_normal((N, 2))
PARAMS = {"w1": RNG.standard_normal((4, 6)) / 2, "w2": RNG.standard_normal((6, 2)) / 2}
D = 4 * 6 + 6 * 2
SPLIT = {}


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


SPLIT.update(objective=mse, outputs=outputs, output_loss=squared_error)


def _cut(sizes):
    """(X, Y) cut into consecutive batches of `sizes` (summing to N)."""
    edges = np.cumsum([0, *sizes])
    assert edges[-1] == N
    return [(X[a:b], Y[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _whole():
    return landscape.Point(PARAMS, inputs=(X, Y), **SPLIT)


def _close(ours, exact, what):
    """Equal to `exact` to 1e-12 of its largest entry (relative, entrywise where entries are
    of one scale)."""
    ours, exact = np.asarray(ours), np.asarray(exact)
    scale = float(np.max(np.abs(exact)))
    assert scale > 0, what
    np.testing.assert_allclose(ours, exact, rtol=1e-12, atol=1e-12 * scale, err_msg=what)


def _same_as_whole(point):
    """Loss, gradient, H v, G v, the dense H and G, and the top 3 eigenpairs (matrix-free) of
    `point` against one batch of all N examples."""
    whole = _whole()
    _close(point.loss(), whole.loss(), "loss")
    _close(landscape.gradient_at(point).vector, landscape.gradient_at(whole).vector, "gradient")
    v = jax.tree.map(lambda x: jnp.asarray(RNG.standard_normal(x.shape)), PARAMS)
    for matrix in ("hessian", "ggn"):
        ours, exact = landscape.hvp(point, matrix)(v), landscape.hvp(whole, matrix)(v)
        for name in PARAMS:
            _close(ours[name], exact[name], f"{matrix} product, {name}")
    exact = landscape.hessian_at(whole).matrix
    _close(landscape.hessian_at(point).matrix, exact, "hessian_at")
    _close(landscape.ggn_at(point).ggn, landscape.ggn_at(whole).ggn, "ggn_at")
    values, vectors = np.linalg.eigh(exact)
    top = landscape.eigenpairs(point, 3, "largest", dense_below=0, progress=None)
    _close(top.values, values[::-1][:3], "top 3 eigenvalues")
    overlaps = np.abs(np.sum(top.flat_vectors * vectors[:, ::-1][:, :3].T, axis=1))
    np.testing.assert_allclose(overlaps, 1.0, atol=1e-10)


def test_in_memory_a_short_last_batch_is_weighed_by_its_examples():
    data = landscape.batches((X, Y), B)
    stack, last = batches_lib.split(data)
    assert [np.shape(x) for x in jax.tree.leaves(stack)] == [(4, B, 4), (4, B, 2)]
    assert [np.shape(x) for x in jax.tree.leaves(last)] == [(41, 4), (41, 2)]
    assert batches_lib.count(data) == 5
    point = landscape.Point(PARAMS, batches=data, **SPLIT)
    # the plain mean of the five batch means is another number: the weights matter
    means = [float(mse(PARAMS, b)) for b in _cut([B] * 4 + [41])]
    assert abs(np.mean(means) - _whole().loss()) > 1e-4
    _same_as_whole(point)


@pytest.mark.parametrize(
    "sizes, chunk",
    [([B] * 4 + [41], 8), ([B] * 4 + [41], 2), ([41, 100, 100, 56], 3)],
    ids=["a loader's short last batch", "in chunks of 2", "every size, the first short"],
)
def test_a_stream_of_unequal_batches_is_the_mean_over_every_example(sizes, chunk):
    point = landscape.Point(PARAMS, batches=landscape.stream(_cut(sizes), chunk), **SPLIT)
    _same_as_whole(point)


def test_in_memory_and_streamed_agree_and_equal_batches_keep_their_stack():
    in_memory = landscape.Point(PARAMS, batches=landscape.batches((X, Y), B), **SPLIT)
    streamed = landscape.Point(
        PARAMS, batches=landscape.stream(_cut([B] * 4 + [41]), chunk=3), **SPLIT
    )
    _close(streamed.loss(), in_memory.loss(), "loss")
    _close(landscape.hessian_at(streamed).matrix, landscape.hessian_at(in_memory).matrix, "hessian")
    equal = landscape.batches((X[:256], Y[:256]), B)  # no remainder: the stack as it was
    assert not isinstance(equal, batches_lib.Ragged)
    assert [np.shape(x) for x in jax.tree.leaves(equal)] == [(4, B, 4), (4, B, 2)]
    dropped = landscape.batches((X, Y), B, drop_remainder=True)
    assert [np.shape(x) for x in jax.tree.leaves(dropped)] == [(4, B, 4), (4, B, 2)]
    kept = landscape.Point(PARAMS, batches=dropped, **SPLIT)
    _close(kept.loss(), float(mse(PARAMS, (X[:256], Y[:256]))), "loss without the last 41")


def test_the_tracked_operator_takes_a_short_last_batch():
    """`core.hvp.batched_gradient` (the tracker's and the engine Track's operator)."""
    flat, unravel = jax.flatten_util.ravel_pytree(PARAMS)
    data = landscape.batches((X, Y), B)
    value, grad, matvec, rows = hvp.batched_gradient(lambda x, b: mse(unravel(x), b), flat, data)
    exact = hvp.linearized_gradient(lambda x: mse(unravel(x), (X, Y)), flat)
    v = jnp.asarray(RNG.standard_normal((2, D)))
    _close(value, exact[0], "loss")
    _close(grad, exact[1], "gradient")
    _close(matvec(v[0]), exact[2](v[0]), "H v")
    _close(rows(v), jax.vmap(exact[2])(v), "H V")


def test_what_cannot_be_weighed_is_one_sentence():
    with pytest.raises(ValueError, match="batch_size = 298 is larger than the n = 297 examples"):
        landscape.batches((X, Y), 298)
    with pytest.raises(TypeError, match="drop_remainder"):
        landscape.batches((X, Y), B, drop_remainder="yes")
    wider = _cut([B] * 4 + [41])[:4] + [(X[256:], np.hstack([Y[256:], Y[256:]]))]
    point = landscape.Point(PARAMS, objective=mse, batches=landscape.stream(wider))
    sentence = (
        r"landscape.stream: batch 4 has leaves \[\(41, 4\), \(41, 4\)\] where batch 0 has "
        r"\[\(64, 4\), \(64, 2\)\]: a streamed dataset's batches may differ only in their "
        r"number of examples, the leading axis every leaf of a batch shares"
    )
    with pytest.raises(ValueError, match=sentence):
        point.loss()
