"""The finite-difference product (`hvp(..., finite_difference=ε)`,
`operator.finite_difference_operator`): the central difference of the gradient over a step of
norm ε along v. On a quadratic loss it is exact for every ε (to rounding); on a tanh MLP its
error against the exact product falls like ε² while ε is large; one program serves every ε, over
one batch and over batches; G, a step that is not a finite number > 0 and a streamed dataset
are refused in one sentence."""

import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.core import operator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RNG = np.random.default_rng(0)
A = RNG.standard_normal((5, 5))
A = A + A.T  # indefinite, so the step crosses no special region
X, Y = RNG.standard_normal((48, 4)), RNG.standard_normal((48, 2))
MLP = {"w1": RNG.standard_normal((4, 7)) / 2, "w2": RNG.standard_normal((7, 2)) / 2}


def quadratic(params, inputs):
    x = jnp.concatenate([params["x"], params["y"]])
    return 0.5 * x @ inputs @ x


def mse(params, batch):
    z = jnp.tanh(batch[0] @ params["w1"]) @ params["w2"]
    return 0.5 * jnp.mean(jnp.sum((z - batch[1]) ** 2, axis=-1))


def _quadratic_point():
    params = {"x": jnp.asarray([1.0, -2.0, 0.5]), "y": jnp.asarray([0.3, 4.0])}
    return landscape.Point(params, objective=quadratic, inputs=jnp.asarray(A))


def _relative(a, b):
    return float(np.linalg.norm(np.ravel(a) - np.ravel(b)) / np.linalg.norm(np.ravel(b)))


@pytest.mark.parametrize("eps", [1e-4, 1e-1, 1.0, 1e3])
def test_on_a_quadratic_the_central_difference_is_exact_at_every_step(eps):
    point = _quadratic_point()
    v = RNG.standard_normal(5)
    _, matvec = landscape.hvp_flat(point, finite_difference=eps)
    assert _relative(matvec(v), A @ v) < 1e-9  # rounding: u |∇L| / ε at ε = 1e-4
    tree = landscape.hvp(point, finite_difference=eps)({"x": v[:3], "y": v[3:]})
    assert _relative(np.concatenate([tree["x"], tree["y"]]), A @ v) < 1e-9
    assert matvec(v.reshape(-1, 1)).shape == (5, 1)
    assert np.all(np.asarray(matvec(np.zeros(5))) == 0)  # v = 0: no step, H v = 0


def test_over_batches_it_differences_the_mean_gradient_and_is_exact_on_least_squares():
    def least_squares(params, batch):
        return 0.5 * jnp.mean(jnp.sum((batch[0] @ params["w"] - batch[1]) ** 2, axis=-1))

    params = {"w": RNG.standard_normal((4, 2))}
    batched = landscape.Point(params, objective=least_squares, batches=landscape.batches((X, Y), 8))
    v = RNG.standard_normal(8)
    exact = np.asarray(landscape.hvp_flat(batched)[1](v))
    hessian = np.kron(X.T @ X / len(X), np.eye(2))  # w raveled row-major: (4, 2)
    np.testing.assert_allclose(exact, hessian @ v, rtol=1e-12)
    for eps in (1e-3, 1.0):
        assert _relative(landscape.hvp_flat(batched, finite_difference=eps)[1](v), exact) < 1e-9


def test_on_a_tanh_mlp_the_error_falls_like_eps_squared_until_rounding():
    point = landscape.Point(MLP, objective=mse, inputs=(X, Y))
    v = RNG.standard_normal(point.num_params)
    exact = np.asarray(landscape.hvp_flat(point)[1](v))
    errors = {}
    for eps in (1e-1, 1e-2, 1e-3):
        errors[eps] = _relative(landscape.hvp_flat(point, finite_difference=eps)[1](v), exact)
    assert 50 < errors[1e-1] / errors[1e-2] < 200  # O(ε²): a tenth of ε, a hundredth the error
    assert 50 < errors[1e-2] / errors[1e-3] < 200
    assert errors[1e-1] > 1e-5  # the bias is real
    # far below, rounding u |∇L| / ε takes over: the error grows again as ε falls
    tiny = _relative(landscape.hvp_flat(point, finite_difference=1e-12)[1](v), exact)
    assert tiny > 100 * errors[1e-3]


def test_the_batched_point_differences_the_same_gradient_as_the_whole_dataset():
    whole = landscape.Point(MLP, objective=mse, inputs=(X, Y))
    batched = landscape.Point(MLP, objective=mse, batches=landscape.batches((X, Y), 8))
    v = {k: RNG.standard_normal(w.shape) for k, w in MLP.items()}
    one = landscape.hvp(whole, finite_difference=1e-2)(v)
    many = landscape.hvp(batched, finite_difference=1e-2)(v)
    for key in MLP:
        np.testing.assert_allclose(many[key], one[key], rtol=1e-10, atol=1e-12)


def test_one_program_serves_every_step_and_every_point_of_a_model():
    point = landscape.Point(MLP, objective=mse, inputs=(X, Y))
    v = RNG.standard_normal(point.num_params)
    landscape.hvp_flat(point, finite_difference=1e-1)[1](v)
    programs = operator.finite_difference_product._cache_size()
    other = point.with_params({k: 1.1 * w for k, w in MLP.items()})
    for eps in (1e-2, 3e-3):
        landscape.hvp_flat(point, finite_difference=eps)[1](v)
        landscape.hvp_flat(other, finite_difference=eps)[1](v)
    assert operator.finite_difference_product._cache_size() == programs


def test_float32_matches_the_exact_product_to_its_rounding_at_a_good_step():
    params = {k: w.astype(np.float32) for k, w in MLP.items()}
    point = landscape.Point(params, objective=mse, inputs=(X.astype(np.float32), Y))
    v = RNG.standard_normal(point.num_params).astype(np.float32)
    exact = np.asarray(landscape.hvp_flat(point)[1](v))
    approx = landscape.hvp_flat(point, finite_difference=1e-2)[1](v)
    assert approx.dtype == np.float32
    assert _relative(approx, exact) < 1e-2


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(matrix="ggn"), ValueError, "the Gauss-Newton matrix G has no gradient to"),
        (dict(finite_difference=0.0), ValueError, "finite_difference = 0: must be a finite number"),
        (dict(finite_difference=-1e-3), ValueError, "finite_difference = -0.001: must be"),
        (dict(finite_difference=np.inf), ValueError, "finite_difference = inf: must be a finite"),
        (dict(finite_difference=np.nan), ValueError, "finite_difference = nan: must be"),
        (dict(finite_difference="1e-3"), TypeError, "finite_difference = '1e-3': must be a real"),
    ],
)
def test_bad_steps_and_g_are_refused_in_one_sentence(kwargs, error, message):
    options = {"finite_difference": 1e-3, **kwargs}
    for probe in (landscape.hvp, landscape.hvp_flat):
        with pytest.raises(error) as raised:
            probe(_quadratic_point(), **options)
        assert message in str(raised.value)
        assert str(raised.value).startswith(probe.__name__ + ": ")
        assert str(raised.value).count(". ") == 0  # one sentence


def test_a_streamed_dataset_is_refused_in_one_sentence():
    batches = [(X[i : i + 8], Y[i : i + 8]) for i in range(0, 48, 8)]
    point = landscape.Point(MLP, objective=mse, batches=landscape.stream(batches, 2))
    with pytest.raises(ValueError, match=r"hvp: finite_difference= needs the data in memory"):
        landscape.hvp(point, finite_difference=1e-3)
    landscape.hvp(point)  # the exact product takes it


_SPLIT = r"""
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import landscape
from experiments.bench import peers, peers_data

one = peers.mlp_point(peers_data.mlp_arrays(8))
mesh = Mesh(np.array(jax.devices()).reshape(2), ("model",))
specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P(),
         "w3": P(), "b3": P()}
split = one.with_params(
    {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in one.params.items()})
w = np.random.default_rng(3).standard_normal(one.num_params).astype(np.float32)
flat = [np.asarray(landscape.hvp_flat(p, finite_difference=1e-2)[1](w)) for p in (one, split)]
tree = landscape.hvp(split, finite_difference=1e-2)(landscape.trees.unravel_numpy(one.params, w))
exact = np.asarray(landscape.hvp_flat(one)[1](w))
rel = lambda a: np.linalg.norm(a - exact) / np.linalg.norm(exact)
print(rel(flat[0]), rel(flat[1]), rel(landscape.trees.ravel_numpy(tree)),
      np.abs(flat[1] - flat[0]).max() / np.abs(flat[0]).max())
"""


def test_over_a_mesh_the_product_is_one_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    done = subprocess.run(
        [sys.executable, "-c", _SPLIT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    one, split, tree, apart = map(float, done.stdout.split())
    assert one < 1e-2 and split < 1e-2 and tree < 1e-2
    assert apart < 1e-4  # float32: the same differences, summed in another order


def test_the_bench_table_shows_the_bias_against_the_exact_product():
    from experiments.bench import finite_differences

    tables = [finite_differences.table(d, dim=300, directions=1) for d in ("float32", "bfloat16")]
    float32, bfloat16 = (min(t["fd"].values()) / t["exact"] for t in tables)
    assert float32 > 30 and bfloat16 > 3  # the best step is far from exact in either dtype
    assert tables[1]["fd"][1e-7] == 1.0  # bfloat16: θ ± h v round to θ, the difference is 0
    assert "| exact (ours) |" in finite_differences.markdown(tables)
