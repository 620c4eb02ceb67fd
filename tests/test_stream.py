"""Datasets that stream (`landscape.stream`): a point over an iterable of equal batches equals
the stacked form on the same data through every probe that takes it, reads the data once per
product (or block of products), and says one sentence for a ragged batch, a spent generator and
a probe that does not take it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import landscape

RNG = np.random.default_rng(0)
X, Y = RNG.standard_normal((48, 4)), RNG.standard_normal((48, 2))
PARAMS = {"w1": RNG.standard_normal((4, 7)) / 2, "w2": RNG.standard_normal((7, 2)) / 2}
BATCHES = [(X[i : i + 8], Y[i : i + 8]) for i in range(0, 48, 8)]  # 6 batches of 8


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def outputs(params, batch):
    return jnp.tanh(batch[0] @ params["w1"]) @ params["w2"]


def squared_error(z, batch):
    return 0.5 * jnp.mean(jnp.sum((z - batch[1]) ** 2, axis=-1))


def mse(params, batch):
    return squared_error(outputs(params, batch), batch)


class Loader:
    """A numpy loader that can be iterated again, counting its passes."""

    def __init__(self):
        self.passes = 0

    def __iter__(self):
        self.passes += 1
        return iter(BATCHES)


def _points(source, chunk=4):
    split = dict(objective=mse, outputs=outputs, output_loss=squared_error)
    stacked = landscape.Point(PARAMS, batches=landscape.batches((X, Y), 8), **split)
    return stacked, landscape.Point(PARAMS, batches=landscape.stream(source, chunk), **split)


def _generated():
    yield from BATCHES


@pytest.mark.parametrize(
    "source, chunk, every_probe",
    [(BATCHES, 4, True), (_generated, 6, False), (Loader(), 1, False)],
    ids=["a list, the last chunk padded", "a generator function", "a loader"],
)
def test_a_stream_is_its_stacked_form(source, chunk, every_probe):
    """Every probe on a list; the other sources (read the same way after their first batch)
    through the loss, the gradient and a product of each matrix."""
    stacked, streamed = _points(source, chunk)
    assert streamed.loss() == pytest.approx(stacked.loss(), rel=1e-14)
    np.testing.assert_allclose(
        landscape.gradient_at(streamed).vector, landscape.gradient_at(stacked).vector, atol=1e-14
    )
    v = RNG.standard_normal(42)
    for matrix in ("hessian", "ggn"):
        one, other = landscape.hvp_flat(stacked, matrix)[1], landscape.hvp_flat(streamed, matrix)[1]
        np.testing.assert_allclose(np.asarray(other(v)), np.asarray(one(v)), atol=1e-13)
        if not every_probe:
            continue
        spectra = [
            landscape.lanczos_spectrum(p, 20, progress=None, matrix=matrix)
            for p in (stacked, streamed)
        ]
        np.testing.assert_allclose(spectra[1].ritz_values, spectra[0].ritz_values, atol=1e-12)
        for method in ("hutchinson", "hutch++"):
            traces = [
                landscape.trace(p, 30, method=method, progress=None, matrix=matrix)
                for p in (stacked, streamed)
            ]
            assert traces[1].value == pytest.approx(traces[0].value, rel=1e-12)
            assert traces[1].stderr == pytest.approx(traces[0].stderr, rel=1e-9)
        densities = [  # 5 probes: a group of 5 runs advanced together, the same probes
            landscape.spectral_density(p, 5, 8, probe=kind, progress=None, matrix=matrix)
            for p in (stacked, streamed)
            for kind in ("rademacher", "gaussian")
        ]
        for i in (0, 1):
            np.testing.assert_allclose(densities[2 + i].nodes, densities[i].nodes, atol=1e-12)
            np.testing.assert_allclose(densities[2 + i].weights, densities[i].weights, atol=1e-12)
    if not every_probe:
        return
    tree = landscape.hvp(streamed)({"w1": np.ones((4, 7)), "w2": np.ones((7, 2))})
    expected = landscape.hvp(stacked)({"w1": np.ones((4, 7)), "w2": np.ones((7, 2))})
    np.testing.assert_allclose(tree["w2"], np.asarray(expected["w2"]), atol=1e-13)


def test_each_product_is_one_pass_over_the_data():
    """Lanczos of 5 steps reads the loader 5 times (and once to learn its batches' shapes);
    a Hutchinson trace of 40 probes in blocks of 16 reads it 3 times."""
    loader = Loader()
    _, streamed = _points(loader)
    assert loader.passes == 1
    landscape.lanczos_spectrum(streamed, 5, progress=None)
    assert loader.passes == 6
    landscape.trace(streamed, 40, method="hutchinson", progress=None)
    assert loader.passes == 9
    landscape.spectral_density(streamed, 20, 4, progress=None)  # two groups of 10 probes
    assert loader.passes == 9 + 2 * 4


@pytest.mark.parametrize("matrix", ["hessian", "ggn"])
def test_eigenpairs_and_the_dense_probes_over_a_stream_are_the_stacked_forms(matrix):
    """The certified search over a stream takes the stacked form's products, one pass each (the
    loss and gradient come with them); the dense solve, hessian_at and ggn_at form the matrix a
    block of columns a pass; diagonal's probes are the stacked form's."""
    loader = Loader()
    stacked, streamed = _points(loader)
    for which, dense_below in (("largest", 0), ("smallest", 0), ("largest", 3000)):
        ours, theirs = (
            landscape.eigenpairs(p, 3, which, dense_below=dense_below, progress=None, matrix=matrix)
            for p in (streamed, stacked)
        )  # the smallest of G are zeros: Lanczos falls back to the dense solve (D <= 3000)
        passes = loader.passes
        assert ours.method == theirs.method and ours.num_hvps == theirs.num_hvps
        np.testing.assert_allclose(ours.values, theirs.values, atol=1e-13)
        assert np.max(ours.residuals) <= 1e-9 * np.max(np.abs(ours.values))
        assert (ours.gradient is None) == (theirs.gradient is None)  # G's dense solve: none
        if theirs.gradient is not None:
            np.testing.assert_allclose(ours.gradient.vector, theirs.gradient.vector, atol=1e-14)
    searched = landscape.eigenpairs(streamed, 2, "largest", dense_below=0, progress=None)
    assert loader.passes - passes == searched.num_hvps  # a product a pass, nothing more
    if matrix == "hessian":
        dense = [landscape.hessian_at(p, progress=None) for p in (streamed, stacked)]
        np.testing.assert_allclose(dense[0].matrix, dense[1].matrix, atol=1e-14)
        diagonals = [landscape.diagonal(p, 20) for p in (streamed, stacked)]
        np.testing.assert_allclose(diagonals[0].values, diagonals[1].values, atol=1e-14)
        np.testing.assert_allclose(diagonals[0].stderr, diagonals[1].stderr, atol=1e-14)
    else:
        dense = [landscape.ggn_at(p, progress=None) for p in (streamed, stacked)]
        np.testing.assert_allclose(dense[0].ggn, dense[1].ggn, atol=1e-14)
        np.testing.assert_allclose(dense[0].remainder, dense[1].remainder, atol=1e-14)


def test_losses_at_other_parameters_over_a_stream_are_the_stacked_forms():
    """path, slice_2d and escape_directions' second-order check take every loss they need in one
    pass over the data (`stream.mean_of`), equal to the stacked form's."""
    loader = Loader()
    stacked, streamed = _points(loader)
    u, v = (landscape.random_direction(streamed, jax.random.key(i)) for i in (1, 2))
    other = {name: 1.3 * leaf for name, leaf in PARAMS.items()}
    grid = np.linspace(-1.0, 1.0, 5)
    calls = {
        "path": (lambda p: landscape.path(p, p.with_params(other)).losses, 1),
        "slice_2d": (lambda p: landscape.slice_2d(p, u, v, grid, grid).losses, 1),
        # the dense solve, its certificates and the losses along its vectors: 3 passes
        "escape_directions": (lambda p: landscape.escape_directions(p, progress=None).measured, 3),
    }
    for name, (call, passes) in calls.items():
        before = loader.passes
        ours = np.asarray(call(streamed))
        assert loader.passes - before == passes, name
        np.testing.assert_allclose(ours, np.asarray(call(stacked)), atol=1e-13, err_msg=name)
    assert landscape.escape_directions(streamed, progress=None).kind() == "not stationary"


def test_each_mistake_is_one_sentence():
    ragged = landscape.Point(
        PARAMS, objective=mse, batches=landscape.stream(BATCHES + [(X[:5], Y[:5])])
    )
    sentence = (
        r"batch 6 has leaves \[\(5, 4\), \(5, 2\)\] where batch 0 has \[\(8, 4\), \(8, 2\)\]: "
        r"a streamed dataset's batches are equal \(its loss is their mean\); drop the last "
        r"partial batch"
    )
    with pytest.raises(ValueError, match=sentence):
        ragged.loss()
    with pytest.raises(TypeError, match="an iterator \\(a generator\\) is spent after one pass"):
        landscape.stream(_generated())
    _, streamed = _points(BATCHES)
    with pytest.raises(TypeError, match="bezier_path does not take a streamed dataset yet"):
        landscape.bezier_path(streamed, streamed.with_params(PARAMS))
    with pytest.raises(TypeError, match="trace: give points over a streamed dataset one at a time"):
        landscape.trace([streamed, streamed], 4, progress=None)
    with pytest.raises(TypeError, match=r"or for a Point stream them, landscape.stream\(batches\)"):
        landscape.Point(PARAMS, objective=mse, batches=BATCHES)
    with pytest.raises(TypeError, match="landscape.stream takes an iterable of batches"):
        landscape.stream((X, Y))
