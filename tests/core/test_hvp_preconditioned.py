"""core.hvp.preconditioned against its dense closed form D H D, D = P^{-1/2}."""

import jax.numpy as jnp
import numpy as np

from landscape.core import hvp


def test_preconditioned_is_the_dense_congruence():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(6, 6))
    h = h + h.T
    inverse_sqrt = rng.uniform(0.5, 2.0, 6)
    product = hvp.preconditioned(lambda v: jnp.asarray(h) @ v, jnp.asarray(inverse_sqrt))
    columns = np.stack([np.asarray(product(jnp.eye(6)[i])) for i in range(6)], axis=1)
    np.testing.assert_allclose(
        columns, np.diag(inverse_sqrt) @ h @ np.diag(inverse_sqrt), atol=1e-5
    )
    adam_like = np.linalg.eigvalsh(columns)
    np.testing.assert_allclose(
        adam_like, np.linalg.eigvalsh(np.diag(inverse_sqrt) @ h @ np.diag(inverse_sqrt)), atol=1e-5
    )
