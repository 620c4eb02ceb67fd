"""First-order Markov chains: kernels, samplers and population measures (notes/markov.md §2, §4).

Rows of a kernel are the current state: P[i, j] = P(x_{n+1} = j | x_n = i). Everything is
jit/vmap-able with p, q traced; integer sizes are static. Contents: docs/design/markov.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from landscape import _checks
from landscape.typing import ArrayLike, NDArray

# --------------------------------------------------------------------------------------------------
# Kernels (notes §2)
# --------------------------------------------------------------------------------------------------


def _concrete(value: ArrayLike | None) -> NDArray | None:
    """value as a NumPy array, or None when it is traced (no checks on traced sweep values)."""
    if value is None or isinstance(value, jax.core.Tracer):
        return None
    return np.asarray(value, dtype=np.float64)


def _float(value: ArrayLike) -> jax.Array:
    """value as a jnp array of a float dtype (keeps float32/float64, promotes integers)."""
    value = jnp.asarray(value)
    return value if jnp.issubdtype(value.dtype, jnp.floating) else value.astype(float)


def validate_chain(
    p: ArrayLike | None = None, q: ArrayLike | None = None, num_states: int | None = None
) -> None:
    """One ValueError sentence naming the bad field: p, q in (0, 1), S >= 2 (notes §2.1, §2.2).

    p alone with num_states is the symmetric chain's switching probability (§2.2). Arrays (a grid
    about to be vmapped) are checked elementwise; traced values are skipped. A wrong type (a
    string, a bool, a non-integer num_states) is a TypeError (also a ValueError, for callers that
    catch those).
    """
    if num_states is not None:
        _checks.check_int("num_states", num_states, 2, "the number of chain states")
    if q is None and num_states is not None:
        meaning = {"p": "the probability of leaving the current state"}
    else:
        meaning = {"p": "the switching probability 0 -> 1", "q": "the switching probability 1 -> 0"}
    for name, value in (("p", p), ("q", q)):
        if value is None or _checks.real_array(name, value, scalar=False) is None:
            continue
        arr = _concrete(value)
        assert arr is not None  # real_array gave an array: the value is concrete
        bad = ~((arr > 0.0) & (arr < 1.0))
        if np.any(bad):
            shown = arr[bad].flat[0] if arr.ndim else arr.item()
            raise ValueError(f"{name} = {shown:g}: must be in (0, 1) ({meaning[name]}).")


def _require_probabilities(caller: str, **values: ArrayLike | None) -> None:
    for name, value in values.items():
        if value is None:
            raise _checks.ArgumentTypeError(
                f"{name} = None: {caller} needs {name} as a number in (0, 1) (or an array of them)."
            )


def binary_kernel(p: ArrayLike, q: ArrayLike) -> jax.Array:
    """(2, 2) P(p, q) = [[1-p, p], [q, 1-q]] (notes §2.1)."""
    _require_probabilities("binary_kernel", p=p, q=q)
    validate_chain(p=p, q=q)
    return _binary_kernel(_float(p), _float(q))


@jax.jit
def _binary_kernel(p: jax.Array, q: jax.Array) -> jax.Array:
    return jnp.stack([jnp.stack([1.0 - p, p]), jnp.stack([q, 1.0 - q])])


def symmetric_kernel(num_states: int, p: ArrayLike) -> jax.Array:
    """(S, S): stay with 1 - p, else switch to one of the S - 1 other states uniformly (§2.2)."""
    _require_probabilities("symmetric_kernel", p=p)
    validate_chain(p=p, num_states=num_states)
    return _symmetric_kernel(int(num_states), _float(p))


@functools.partial(jax.jit, static_argnums=0)
def _symmetric_kernel(num_states: int, p: jax.Array) -> jax.Array:
    eye_SS = jnp.eye(num_states, dtype=p.dtype)
    return (1.0 - p) * eye_SS + p / (num_states - 1) * (1.0 - eye_SS)


@jax.jit
def stationary(kernel: ArrayLike) -> jax.Array:
    """(S,) pi with pi P = pi, sum pi = 1, for an irreducible kernel (notes §2.1).

    pi (I - P + 1 1^T) = 1^T, and I - P + 1 1^T is nonsingular for an irreducible chain, so one
    linear solve gives pi exactly (to rounding) and differentiably. Binary: (q, p)/(p + q);
    symmetric: uniform.
    """
    kernel = jnp.asarray(kernel)
    num_states = kernel.shape[-1]
    eye_SS = jnp.eye(num_states, dtype=kernel.dtype)
    system_SS = (eye_SS - kernel + 1.0).T
    return jnp.linalg.solve(system_SS, jnp.ones(num_states, kernel.dtype))


# --------------------------------------------------------------------------------------------------
# Samplers (notes §2.1: x_1 ~ init, then inverse CDF against the current state's row)
# --------------------------------------------------------------------------------------------------


def _draws(
    key: jax.Array, kernel: ArrayLike, init: ArrayLike | None, batch_size: int, length: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Shared by both formulations: (uniforms_BN, x1_B, thresholds_S(S-1)) (inverse-CDF cut
    points); the sizes checked when the sampler is traced (they are static)."""
    _checks.check_int("batch_size", batch_size, 1, "sequences drawn")
    _checks.check_int("length", length, 1, "tokens a sequence")
    kernel = jnp.asarray(kernel)
    init = stationary(kernel) if init is None else jnp.asarray(init, kernel.dtype)
    num_states = kernel.shape[-1]
    u_BN = jax.random.uniform(key, (batch_size, length), kernel.dtype)
    cuts_SC = jnp.cumsum(kernel, axis=1)[:, : num_states - 1]  # last cut (~1) never needed
    cuts_C = jnp.cumsum(init)[: num_states - 1]
    x1_B = jnp.sum(u_BN[:, 0, None] >= cuts_C, axis=-1).astype(jnp.int32)
    return u_BN, x1_B, cuts_SC


@functools.partial(jax.jit, static_argnames=("batch_size", "length", "sequential"))
def sample(
    key: jax.Array,
    kernel: ArrayLike,
    init: ArrayLike | None = None,
    batch_size: int = 16,
    length: int = 1024,
    sequential: bool = False,
) -> jax.Array:
    """x (B, length) int32: x_1 ~ init (None: the stationary law), x_{n+1} ~ P[x_n] (notes §2.1).

    Position n >= 2 applies the map f_n: s -> #{cuts of row s <= u_n} (inverse CDF of the uniform
    u_n against row s). Maps S -> S (int arrays of length S) compose associatively, and x_1 is the
    constant map, so a prefix scan of compositions holds x_n in every entry: O(log N) depth.
    `sequential` draws the same chain (the same uniforms and comparisons) by a length-N lax.scan
    instead, the faster on a CPU (docs/design/cpu_formulations.md).
    """
    u_BN, x1_B, cuts_SC = _draws(key, kernel, init, batch_size, length)
    if _checks.check_bool("sequential", sequential, "a length-N scan"):
        return _sequential(u_BN, x1_B, cuts_SC)
    num_states = cuts_SC.shape[0]
    maps_BNS = jnp.sum(u_BN[:, :, None, None] >= cuts_SC, axis=-1).astype(jnp.int32)
    first_BS = jnp.broadcast_to(x1_B[:, None], (batch_size, num_states))
    maps_BNS = maps_BNS.at[:, 0, :].set(first_BS)

    def then(earlier: jax.Array, later: jax.Array) -> jax.Array:  # (later o earlier)[s]
        return jnp.take_along_axis(later, earlier, axis=-1)

    return jax.lax.associative_scan(then, maps_BNS, axis=1)[:, :, 0]


def _sequential(u_BN: jax.Array, x1_B: jax.Array, cuts_SC: jax.Array) -> jax.Array:
    """`sample`'s chain, one position a step of a lax.scan."""

    def step(x_B: jax.Array, u_B: jax.Array) -> tuple[jax.Array, jax.Array]:
        x_B = jnp.sum(u_B[:, None] >= cuts_SC[x_B], axis=-1).astype(jnp.int32)
        return x_B, x_B

    _, rest_NB = jax.lax.scan(step, x1_B, u_BN[:, 1:].T)
    return jnp.concatenate([x1_B[:, None], rest_NB.T], axis=1)


# --------------------------------------------------------------------------------------------------
# Population measures (notes §4, §7 "population-loss engine")
# --------------------------------------------------------------------------------------------------


def enumerate_sequences(num_states: int, length: int, max_sequences: int = 2**16) -> NDArray:
    """(S^N, N) int32: every sequence, lexicographic (first position most significant) (§4)."""
    validate_chain(num_states=num_states)
    _checks.check_int("length", length, 1, "the sequence length N")
    _checks.check_int("max_sequences", max_sequences, 1, "the exact-enumeration limit")
    count = int(num_states) ** int(length)
    if count > max_sequences:
        raise ValueError(
            f"N = {length} with S = {num_states} gives {count} sequences, above the "
            f"exact-enumeration limit of {max_sequences}; use the Monte-Carlo "
            "population loss (markov.task.monte_carlo_population)."
        )
    digits = np.unravel_index(np.arange(count), (int(num_states),) * int(length))
    return np.stack(digits, axis=1).astype(np.int32)


@jax.jit
def sequence_probs(x_MN: ArrayLike, kernel: ArrayLike, init: ArrayLike | None = None) -> jax.Array:
    """(M,) init[x_1] prod_n P[x_n, x_{n+1}] (notes §7; init None: the stationary law)."""
    kernel = jnp.asarray(kernel)
    init = stationary(kernel) if init is None else jnp.asarray(init, kernel.dtype)
    x_MN = jnp.asarray(x_MN)
    steps_MN1 = kernel[x_MN[:, :-1], x_MN[:, 1:]]
    return init[x_MN[:, 0]] * jnp.prod(steps_MN1, axis=1)


@jax.jit
def soft_targets(x_MN: ArrayLike, kernel: ArrayLike) -> jax.Array:
    """(M, N, S) t_n = P[x_n, :], the law of x_{n+1} given x_n (notes §4, low-variance form)."""
    return jnp.asarray(kernel)[jnp.asarray(x_MN)]


def exact_population(
    num_states: int, length: int, kernel: ArrayLike, init: ArrayLike | None = None
) -> tuple[NDArray, jax.Array, jax.Array]:
    """(x_MN, weights_M, targets_MNS): all S^N sequences with their probabilities (notes §4, §7).

    With soft targets, the weighted CE over this measure is the exact population loss.
    """
    validate_chain(num_states=num_states)
    if jnp.shape(kernel)[-1] != num_states:
        raise ValueError(
            f"num_states = {num_states}: the kernel has {jnp.shape(kernel)[-1]} states."
        )
    x_MN = enumerate_sequences(num_states, length)
    return x_MN, sequence_probs(x_MN, kernel, init), soft_targets(x_MN, kernel)


def monte_carlo_population(
    key: jax.Array, kernel: ArrayLike, init: ArrayLike | None, num_sequences: int, length: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(x_MN, weights_M = 1/M, targets_MNS): M sampled sequences with soft targets (notes §7).

    Unbiased for the population loss and lower variance than hard targets; the same structure as
    `exact_population`, so losses need not care which measure they get.
    """
    _checks.check_key("key", key)
    _checks.check_int("num_sequences", num_sequences, 1, "the Monte-Carlo sample size M")
    _checks.check_int("length", length, 1, "the sequence length N")
    x_MN = sample(key, kernel, init, batch_size=num_sequences, length=length)
    weights_M = jnp.full((num_sequences,), 1.0 / num_sequences, jnp.asarray(kernel).dtype)
    return x_MN, weights_M, soft_targets(x_MN, kernel)


def binary_log_probs(logits_MN: jax.Array) -> jax.Array:
    """(M, N, 2) log(1 - f), log f for f = sigma(logit) (the theory model's head, notes §3.1)."""
    return jnp.stack([jax.nn.log_sigmoid(-logits_MN), jax.nn.log_sigmoid(logits_MN)], axis=-1)


@jax.jit
def population_cross_entropy(
    log_probs_MNS: jax.Array, weights_M: jax.Array, targets_MNS: jax.Array
) -> jax.Array:
    """(1/N) sum_n sum_m w_m CE(t_mn, probs_mn) (notes §4 Eq. 1, soft-target form).

    Entries with target 0 contribute 0 even where the log-probability is -inf.
    """
    num_positions = log_probs_MNS.shape[1]
    terms_MNS = jnp.where(targets_MNS > 0, targets_MNS * log_probs_MNS, 0.0)
    ce_M = -jnp.sum(terms_MNS, axis=(1, 2))
    return jnp.sum(weights_M * ce_M) / num_positions
