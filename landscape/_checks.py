"""Argument checks shared by the interactive API: one sentence naming the argument and what it
expects (TypeError for a wrong type, ValueError for a wrong value).

Checks run on Python-level arguments only, never inside jitted code: a jax Tracer (a value being
traced by jit/vmap) is always accepted as it is, so sweeps that vmap over a value still compile.
"""

from __future__ import annotations

import inspect
import numbers
import warnings
from collections.abc import Callable, Collection
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np


class ArgumentTypeError(TypeError, ValueError):
    """A wrong argument type. A TypeError, and also a ValueError so that callers written to catch
    the ValueError these checks used to raise (config validation) still catch it."""


def is_traced(value: object) -> bool:
    return isinstance(value, jax.core.Tracer)


def type_name(value: object) -> str:
    return type(value).__name__


def check_int(
    name: str, value: object, low: int | None = None, meaning: str = "", high: int | None = None
) -> int:
    """An int (or numpy integer, not a bool) with low <= value <= high; returns int(value)."""
    what = f" ({meaning})" if meaning else ""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(
            f"{name} = {value!r}: must be an integer{what}, not {type_name(value)}."
        )
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = (
            f"between {low} and {high}"
            if low is not None and high is not None
            else f">= {low}"
            if low is not None
            else f"<= {high}"
        )
        raise ValueError(f"{name} = {value!r}: must be an integer {bounds}{what}.")
    return int(value)


def check_bool(name: str, value: object, meaning: str = "") -> bool:
    if not isinstance(value, (bool, np.bool_)):
        what = f" ({meaning})" if meaning else ""
        raise ArgumentTypeError(
            f"{name} = {value!r}: must be True or False{what}, not {type_name(value)}."
        )
    return bool(value)


def check_choice(name: str, value: object, choices: Collection[str]) -> None:
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} = {value!r}: must be one of {options}.")


def real_array(name: str, value: object, scalar: bool) -> np.ndarray | None:
    """value as a float64 array (None when traced); ArgumentTypeError unless real numbers."""
    if is_traced(value):
        return None
    what = "a real number" if scalar else "a real number or an array of them"
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        raise ArgumentTypeError(f"{name} = {value!r}: must be {what}, not {type_name(value)}.")
    if isinstance(value, numbers.Real):
        return np.asarray(float(value))
    try:
        arr = np.asarray(value)
    except Exception:  # e.g. a tracer inside a container: leave it to the caller
        return None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ArgumentTypeError(
            f"{name} = {value!r}: must be {what}, not {type_name(value)}"
            f"{'' if arr.dtype == object else f' of dtype {arr.dtype}'}."
        )
    if scalar and arr.ndim:
        raise ArgumentTypeError(f"{name} has shape {arr.shape}: must be a single real number.")
    return arr.astype(np.float64)


def check_real(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    scalar: bool = True,
    meaning: str = "",
) -> None:
    """A real number (or, scalar=False, an array of them) within the bounds; NaN always fails.

    Traced values are skipped; arrays are checked elementwise.
    """
    arr = real_array(name, value, scalar)
    if arr is None:
        return
    bad = np.isnan(arr)
    if finite:
        bad |= ~np.isfinite(arr)
    if low is not None:
        bad |= (arr <= low) if low_open else (arr < low)
    if high is not None:
        bad |= (arr >= high) if high_open else (arr > high)
    if not np.any(bad):
        return
    shown = arr[bad].flat[0] if arr.ndim else arr.item()
    if low is not None and high is not None:
        bounds = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        bounds = f"{'>' if low_open else '>='} {low:g}"
    elif high is not None:
        bounds = f"{'<' if high_open else '<='} {high:g}"
    else:
        bounds = ""
    expected = " ".join(part for part in ("a finite number" if finite else "", bounds) if part)
    what = f" ({meaning})" if meaning else ""
    raise ValueError(f"{name} = {shown:g}: must be {expected or 'a number'}{what}.")


def check_key(name: str, key: object) -> None:
    """None or a jax PRNG key (jax.random.key(0) or jax.random.PRNGKey(0))."""
    if key is None or is_traced(key):
        return
    if isinstance(key, jax.Array):
        typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
        shape = key.shape if typed else key.shape[:-1]
        if (typed or (key.dtype == np.uint32 and key.shape[-1:] == (2,))) and shape != ():
            raise ArgumentTypeError(
                f"{name} holds {int(np.prod(shape))} keys (shape {shape}) where one goes: give "
                f"one key, e.g. jax.random.key(0), or {name}[0] (one key draws all it needs)."
            )
        if typed or (key.dtype == np.uint32 and key.shape == (2,)):
            return
    if isinstance(key, list | tuple) and key and all(isinstance(k, jax.Array) for k in key):
        raise ArgumentTypeError(
            f"{name} is a {type(key).__name__} of {len(key)} keys where one goes: give one key, "
            f"e.g. jax.random.key(0), or {name}[0] (one key draws all it needs)."
        )
    raise ArgumentTypeError(
        f"{name} = {key!r}: must be a jax random key "
        f"(jax.random.key(0)) or None, not {type_name(key)}."
    )


def key_or_default(name: str, key: object) -> jax.Array:
    """`key` once checked (`check_key`), or `jax.random.key(0)` for None, made without compiling
    a program (threefry's key 0 is two zero words; another default implementation draws it)."""
    check_key(name, key)
    if key is not None:
        return key  # type: ignore[return-value]  # checked above
    impl = jax.config.jax_default_prng_impl  # type: ignore[attr-defined]  # not in the stubs
    if impl != "threefry2x32":
        return jax.random.key(0)
    return jax.random.wrap_key_data(jax.device_put(np.zeros(2, np.uint32)))


def check_not_a_python_number(name: str, leaf: object) -> None:
    """A Point's parameter `name` ("" for the params themselves) must be an array: a Python
    float has no dtype of its own (jax's x64 setting would choose it)."""
    if isinstance(leaf, float | complex) and not isinstance(leaf, np.generic):  # numpy's has one
        where = f"parameter {name!r}" if name else "params"
        raise TypeError(
            f"{where} = {leaf!r} is a Python {type(leaf).__name__}, which has no dtype of its "
            f"own: give an array, e.g. jnp.array({leaf!r}) (or jnp.array([{leaf!r}]), in the "
            "dtype the probes should work in)."
        )


def refuse_mixed_dtypes(
    caller: str, index: int, names: tuple[str, str], dtypes: list[str]
) -> NoReturn:
    """The sentence for a list of points whose point `index` has another dtype than point 0."""
    raise ValueError(
        f"{caller}: the points of a list share one dtype; point {index} ({names[0] or 'unnamed'}) "
        f"is in {dtypes[0]}, point 0 ({names[1] or 'unnamed'}) in {dtypes[1]}: cast them to one, "
        f"e.g. point.with_params(jax.tree.map(lambda a: a.astype(jnp.{dtypes[0]}), "
        "point.params))."
    )


HALF = ("bfloat16", "float16")


def refuse_half_precision(caller: str, dtype: Any) -> None:
    """One sentence for parameters in a half type, the same from every probe."""
    name = np.dtype(dtype).name
    if name in HALF:
        eps = float(jnp.finfo(dtype).eps)
        raise TypeError(
            f"{caller}: the parameters are {name}, whose rounding ({eps:.1e}) would be most of "
            "a curvature estimate: the probes work in float32 or float64; cast them first, e.g. "
            "jax.tree.map(lambda a: a.astype(jnp.float32), params)."
        )


def floating_dtype(name: str, value: Any, meaning: str = "") -> np.dtype:
    """`value` as a floating dtype; one sentence naming `name` otherwise (`meaning` says what the
    dtype is for)."""
    try:
        resolved = jnp.dtype(value)
    except TypeError:
        resolved = None
    if resolved is None or not jnp.issubdtype(resolved, jnp.floating):
        raise ArgumentTypeError(
            f"{name} = {value!r}: must be a floating dtype (np.float32 or np.float64)"
            + (f", {meaning}." if meaning else ".")
        )
    return resolved


def takes(fn: Any, count: int) -> bool | None:
    """Whether `fn` can be called with `count` positional arguments (None where its signature
    cannot be read, e.g. some builtins: then the caller trusts it)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in parameters):
        return False
    required = sum(p.default is p.empty for p in positional)
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return required <= count
    return required <= count <= len(positional)


def check_signature(name: str, fn: Any, count: int, expected: str, instead: str = "") -> None:
    """One sentence unless `fn` takes `count` positional arguments: `expected` is the signature
    asked for, `instead` what to do with a function of another form."""
    if takes(fn, count) is False:
        raise ArgumentTypeError(
            f"{name}: {getattr(fn, '__name__', type_name(fn))} cannot be called as {expected}"
            + (f"; {instead}." if instead else ".")
        )


class RecompileWarning(UserWarning):
    """A loss given afresh for each point: every probe compiles again."""


FRESH_LOSSES = 3  # distinct things met under one key before the warning
_FRESH: dict[Any, set[Any]] = {}  # key -> the distinct things seen under it
_WARNED: set[Any] = set()


def note_fresh(key: Any, thing: Any, message: Callable[[int], str]) -> None:
    """Once per key, a RecompileWarning (`message(count)`) when `FRESH_LOSSES` distinct things
    have been met under it, each of which compiled a program afresh."""
    if key in _WARNED:
        return
    if len(_FRESH) > 256:  # many keys, each seen once or twice: start again
        _FRESH.clear()
    seen = _FRESH.setdefault(key, set())
    seen.add(thing)
    if len(seen) < FRESH_LOSSES:
        return
    _WARNED.add(key)
    _FRESH.pop(key, None)
    warnings.warn(message(len(seen)), RecompileWarning, stacklevel=outside_the_library())


def note_fresh_loss(loss_fn: Any, own_objective: Any, caller: str) -> None:
    """`note_fresh` per code location of `loss_fn`: each Point made with a loss_fn from there
    compiles its programs afresh."""
    code = getattr(getattr(loss_fn, "func", loss_fn), "__code__", None)
    if code is None:
        return
    note_fresh(
        code,
        id(own_objective),
        lambda count: (
            f"{caller}: {count} points made with a loss_fn from {code.co_filename}:"
            f"{code.co_firstlineno}, each compiled afresh (a Point made with loss_fn traces it "
            "anew): give the loss as objective=f(params, inputs) with inputs= (the batch), and "
            "points of one model share their compiled programs."
        ),
    )


def outside_the_library() -> int:
    """The stacklevel of the first frame outside landscape/: the user's call of the probe."""
    package = __file__.rsplit("/", 1)[0]
    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level - 1
