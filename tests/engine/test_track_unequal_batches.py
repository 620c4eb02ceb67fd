"""`Track(batches=...)` over an evaluation set whose batch size does not divide it (297 examples
in batches of 64, a short last batch of 41 kept apart): its loss, gradient norm and extreme Ritz
values are those of one batch of all 297, to 1e-12 (each batch's mean weighed by its examples,
docs/design/batches.md)."""

import jax.numpy as jnp
import numpy as np
import pytest

import landscape
from landscape.engine import track as track_lib

RNG = np.random.default_rng(3)
X, Y = RNG.standard_normal((297, 4)), RNG.standard_normal((297, 2))
PARAMS = {"w1": RNG.standard_normal((4, 6)) / 2, "w2": RNG.standard_normal((6, 2)) / 2}


def mse(params, batch):
    z = jnp.tanh(batch[0] @ params["w1"]) @ params["w2"]
    return 0.5 * jnp.mean(jnp.sum((z - batch[1]) ** 2, axis=-1))


def test_a_track_over_a_short_last_batch_is_the_mean_over_every_example():
    ragged = track_lib.Track(mse, every=1, num_lanczos=12, batches=landscape.batches((X, Y), 64))
    whole = track_lib.Track(mse, every=1, num_lanczos=12, batches=landscape.batches((X, Y), 297))
    track_lib.check_output(ragged, PARAMS, {})
    ours = track_lib.measure(ragged, PARAMS, {}, jnp.int32(0))
    exact = track_lib.measure(whole, PARAMS, {}, jnp.int32(0))
    for name in track_lib.TRACKED:
        np.testing.assert_allclose(float(ours[name]), float(exact[name]), rtol=1e-12, err_msg=name)
    assert float(exact["track_loss"]) == pytest.approx(float(mse(PARAMS, (X, Y))), rel=1e-13)
