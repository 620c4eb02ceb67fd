"""Datasets that stream (`landscape.stream`): a point over an iterable of equal batches equals
the stacked form on the same data through every probe that takes it, reads the data once per
product (or block of products), never reads a batch it does not use, and says one sentence for a
batch that differs from the first in more than its examples (or in dtypes), a spent or shared
generator, a source that is none (a path) and a probe that does not take it; a non-finite product
ends eigenpairs' search at once."""

import re

import jax
import numpy as np
import pytest

import landscape
from tests.golden.answers import mse, outputs, squared_error  # the tanh MLP

RNG = np.random.default_rng(0)
X, Y = RNG.standard_normal((48, 4)), RNG.standard_normal((48, 2))
PARAMS = {"w1": RNG.standard_normal((4, 7)) / 2, "w2": RNG.standard_normal((7, 2)) / 2}
BATCHES = [(X[i : i + 8], Y[i : i + 8]) for i in range(0, 48, 8)]  # 6 batches of 8


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


class Loader:
    """A numpy loader that can be iterated again, counting its passes and the batches read."""

    def __init__(self, batches=BATCHES):
        self.passes, self.read, self.data = 0, 0, batches

    def __iter__(self):
        self.passes += 1
        for batch in self.data:
            self.read += 1
            yield batch


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
    through the loss, the gradient and a product of each matrix. The list's probes take the
    golden answers' sizes (tests/golden/answers.py: the same model, data and chunk), so a
    worker that computed those compiles none of them again."""
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
            landscape.lanczos_spectrum(p, 12, progress=None, matrix=matrix)
            for p in (stacked, streamed)
        ]
        np.testing.assert_allclose(spectra[1].ritz_values, spectra[0].ritz_values, atol=1e-12)
        for method, probes in (("hutchinson", 8), ("hutch++", 12)):
            traces = [
                landscape.trace(p, probes, method=method, progress=None, matrix=matrix)
                for p in (stacked, streamed)
            ]
            assert traces[1].value == pytest.approx(traces[0].value, rel=1e-12)
            assert traces[1].stderr == pytest.approx(traces[0].stderr, rel=1e-9)
        densities = [  # 4 probes: a group of 4 runs advanced together, the same probes
            landscape.spectral_density(p, 4, 10, probe=kind, progress=None, matrix=matrix)
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


@pytest.mark.parametrize("matrix", ["hessian", "ggn"])
def test_slq_in_three_vectors_over_a_stream_is_its_stacked_form(matrix):
    """basis="three" over a stream: the same probes and the same three-term steps as on the
    stacked batches (four runs advanced together, a pass each step), 12 steps of a D = 42
    model, so ghosts of converged values are in both; "auto" keeps the bases where they fit."""
    stacked, streamed = _points(BATCHES)
    densities = [
        landscape.spectral_density(p, 4, 12, progress=None, matrix=matrix, basis="three")
        for p in (stacked, streamed)
    ]
    assert [d.basis for d in densities] == ["three", "three"]
    np.testing.assert_allclose(densities[1].nodes, densities[0].nodes, atol=1e-12)
    np.testing.assert_allclose(densities[1].weights, densities[0].weights, atol=1e-12)
    assert landscape.spectral_density(streamed, 4, 12, progress=None).basis == "full"


def test_each_product_is_one_pass_over_the_data():
    """Lanczos of 5 steps reads the loader's 6 batches 5 times, the first pass going on from the
    batch read to learn their shapes; a Hutchinson trace of 40 probes in blocks of 16 reads it 3
    times."""
    loader = Loader()
    _, streamed = _points(loader)
    assert (loader.passes, loader.read) == (1, 1)
    landscape.lanczos_spectrum(streamed, 5, progress=None)
    assert (loader.passes, loader.read) == (5, 5 * 6)
    landscape.trace(streamed, 40, method="hutchinson", progress=None)
    assert loader.passes == 8
    landscape.spectral_density(streamed, 20, 4, progress=None)  # two groups of 10 probes
    assert loader.passes == 8 + 2 * 4


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
    pass over the data (`stream.Streamed.mean_of`), equal to the stacked form's."""
    loader = Loader()
    stacked, streamed = _points(loader)
    assert streamed.loss() == pytest.approx(stacked.loss(), rel=1e-14)  # the first pass
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
        PARAMS, objective=mse, batches=landscape.stream(BATCHES + [(X[:5], Y[:5, :1])])
    )
    sentence = (
        r"batch 6 has leaves \[\(5, 4\), \(5, 1\)\] where batch 0 has \[\(8, 4\), \(8, 2\)\]: "
        r"a streamed dataset's batches may differ only in their number of examples, the leading "
        r"axis every leaf of a batch shares \(each batch's mean is weighed by it\)"
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


def _direct_mean(batches):
    """The mean over the batches of the loss and its gradient, each batch on its own."""
    values = [jax.value_and_grad(mse)(PARAMS, batch) for batch in batches]
    flat = [np.concatenate([np.ravel(g[n]) for n in sorted(g)]) for _, g in values]
    return np.mean([float(v) for v, _ in values]), np.mean(flat, axis=0)


def test_the_batch_read_to_learn_the_shapes_is_the_first_passs_and_counts():
    """A generator function's batches are each read once by the first pass (the batch read at
    construction goes on into it), and the loss and gradient are the mean over every batch;
    one batch alone is its own loss, not 0 / 0."""
    read = []

    def counted():
        for batch in BATCHES:
            read.append(1)
            yield batch

    streamed = landscape.Point(PARAMS, objective=mse, batches=landscape.stream(counted))
    assert len(read) == 1
    loss, gradient = _direct_mean(BATCHES)
    assert streamed.loss() == pytest.approx(loss, abs=1e-12)
    assert len(read) == len(BATCHES)
    np.testing.assert_allclose(landscape.gradient_at(streamed).vector, gradient, atol=1e-12)
    alone = landscape.Point(PARAMS, objective=mse, batches=landscape.stream(BATCHES[:1]))
    assert alone.loss() == pytest.approx(float(mse(PARAMS, BATCHES[0])), abs=1e-12)


class SharedLoader:
    """An iterable whose every pass is one generator, made once."""

    def __init__(self):
        self.generator = _generated()

    def __iter__(self):
        return self.generator


@pytest.mark.parametrize("make", [lambda g: lambda: g, lambda g: SharedLoader()])
def test_a_source_giving_one_generator_twice_is_refused_before_a_batch_is_read(make):
    """lambda: g (or a loader whose every pass is one generator) would give the first pass the
    batches after the one read to learn their shapes, and a second pass nothing: refused as a
    generator itself is, and no batch of it is consumed."""
    generator = _generated()
    source = make(generator)
    if isinstance(source, SharedLoader):
        generator = source.generator
    sentence = (
        r"^landscape.stream: a source that gives the same iterator at every call \(one "
        r"generator, as lambda: g\) is spent after one pass, and every product reads the data "
        r"once: give a list, .*\.$"
    )
    with pytest.raises(TypeError, match=sentence):
        landscape.stream(source)
    np.testing.assert_array_equal(next(generator)[0], BATCHES[0][0])  # nothing consumed


class ResetIterator:
    """A loader's own iterator that its loader resets at every pass (as a torch DataLoader with
    persistent workers gives the same one)."""

    def __init__(self):
        self.position, self.resets = 0, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.position == len(BATCHES):
            raise StopIteration
        self.position += 1
        return BATCHES[self.position - 1]


class ResettingLoader:
    def __init__(self):
        self.iterator = ResetIterator()

    def __iter__(self):
        self.iterator.position, self.iterator.resets = 0, self.iterator.resets + 1
        return self.iterator


def test_a_loader_that_resets_its_one_iterator_streams():
    """The same iterator at every pass is taken when it is no generator (its loader may reset
    it), opened once to learn the shapes; every pass is the mean over every batch."""
    loader = ResettingLoader()
    streamed = landscape.Point(PARAMS, objective=mse, batches=landscape.stream(loader, 4))
    assert loader.iterator.resets == 1
    loss, gradient = _direct_mean(BATCHES)
    for _ in range(2):
        assert streamed.loss() == pytest.approx(loss, abs=1e-12)
    np.testing.assert_allclose(landscape.gradient_at(streamed).vector, gradient, atol=1e-12)
    assert loader.iterator.resets == 3


def test_a_chunk_beyond_the_dataset_stacks_the_batches_there_are():
    """3 batches at chunk=1024: one chunk of 3 batches (no copies padding it to 1024, whose
    memory was 1024 batches'), from the first pass on; its loss and gradient the mean of 3."""
    source = landscape.stream(BATCHES[:3], chunk=1024)
    for _ in range(2):
        (stacked, weights), *rest = list(source.chunks())
        assert not rest and stacked[0].shape == (3, 8, 4) and weights.tolist() == [1, 1, 1]
    streamed = landscape.Point(PARAMS, objective=mse, batches=landscape.stream(BATCHES[:3], 1024))
    loss, gradient = _direct_mean(BATCHES[:3])
    assert streamed.loss() == pytest.approx(loss, abs=1e-12)
    np.testing.assert_allclose(landscape.gradient_at(streamed).vector, gradient, atol=1e-12)


def _not_iterable():
    return 3


@pytest.mark.parametrize(
    "source, kind, sentence",
    [
        (
            BATCHES[:3] + [(X[24:32].astype(np.float32), Y[24:32].astype(np.float32))],
            ValueError,
            r"landscape.stream: batch 3 has leaves of dtypes \['float32', 'float32'\] where "
            r"batch 0 has \['float64', 'float64'\]: a streamed dataset's batches may differ only "
            r"in their number of examples, each leaf of one dtype \(one compiled program adds "
            r"them\); cast them in the source\.",
        ),
        (
            BATCHES[:3] + [{"x": X[24:32], "y": Y[24:32]}],
            ValueError,
            r"landscape.stream: batch 3 is PyTreeDef\(\{'x': \*, 'y': \*\}\) where batch 0 is "
            r"PyTreeDef\(\(\*, \*\)\): a streamed dataset's batches may differ only in their "
            r"number of examples",
        ),
        (
            "data/train.npy",
            TypeError,
            r"landscape.stream takes an iterable of batches \(a list, a loader, a function "
            r"returning an iterator\), not a path \('data/train.npy'\): load the file first",
        ),
        (
            3,
            TypeError,
            r"landscape.stream takes an iterable of batches \(.*\), not a value of type int\.",
        ),
        (
            ["data/a.npy", "data/b.npy"],
            TypeError,
            r"landscape.stream takes an iterable of batches \(.*\), each a pytree of numeric "
            r"arrays: its first batch holds a leaf of dtype <U10 \('data/a.npy'\)\.",
        ),
        (
            _not_iterable,
            TypeError,
            r"landscape.stream: the source function returned a value of type int, which is not "
            r"iterable: give a function that returns an iterator over the batches",
        ),
    ],
    ids=["a dtype changing", "a structure changing", "a path", "an int", "paths", "a function"],
)
def test_each_source_mistake_is_one_sentence(source, kind, sentence):
    """What a source is, or how a batch differs from the first, in one sentence naming it."""
    with pytest.raises(kind) as info:
        landscape.Point(PARAMS, objective=mse, batches=landscape.stream(source)).loss()
    message = str(info.value)
    assert re.match(sentence, message), message
    assert "\n" not in message and message.endswith("."), message


def test_a_non_finite_product_ends_the_search_at_once_saying_so():
    """One NaN in one batch: eigenpairs over the stream makes one product (one pass over the
    data) and returns NaN values, with the reason; the stacked form ends at the same product
    (it made a run of products, then up to max_restarts runs counted as done)."""
    bad = [(x.copy(), y) for x, y in BATCHES]
    bad[3][0][2, 1] = np.nan
    loader = Loader(bad)
    streamed = landscape.Point(PARAMS, objective=mse, batches=landscape.stream(loader))
    data = (np.concatenate([x for x, _ in bad]), Y)
    stacked = landscape.Point(PARAMS, objective=mse, batches=landscape.batches(data, 8))
    lines = []
    for point in (streamed, stacked):
        found = landscape.eigenpairs(
            point, 2, "largest", dense_below=0, max_restarts=300, progress=lines.append
        )
        assert np.isnan(found.values).all() and not found.finite
        assert (found.num_hvps, found.runs) == (1, 0)
        assert found.reason.endswith(
            "product 1 (of H or G with a vector) was not finite (NaN or inf): the search "
            "ended there"
        )
        assert "non-finite Hessian-vector products: no eigenpairs." in found.describe()
    assert loader.passes == 1 and loader.read == len(bad)
    assert lines == [f"eigenpairs: {found.reason}"] * 2
