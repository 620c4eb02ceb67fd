"""Config validation shared by every experiment: one clear sentence per mistake, before compiling.

A package describes its configs by a reference `ConfigDict` (every field, with its default) and a
list of rules. `validate` rejects fields the reference does not know (with a suggestion) and
fields whose value is outside the allowed range, naming the field and the range.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import ml_collections
import numpy as np


class ConfigError(ValueError):
    """A config field is unknown or outside its allowed range."""


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """{'a.b': value} for every leaf of a (nested) ConfigDict or dict."""
    items = cfg.items() if hasattr(cfg, "items") else []
    flat = {}
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, (dict, ml_collections.ConfigDict)) and len(value):
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def check_known_fields(cfg: Any, reference: Any, *, free: Iterable[str] = ()) -> None:
    """Raise ConfigError for the first field of `cfg` that `reference` does not have.

    Fields under a prefix in `free` (e.g. "sweep") may hold any keys; their values are checked
    by the package's own rules.
    """
    known = flatten(reference)
    known_groups = {k.rsplit(".", i)[0] for k in known for i in range(1, k.count(".") + 1)}
    free = tuple(free)
    for path in flatten(cfg):
        if path in known or path.startswith(tuple(f + "." for f in free)) or path in free:
            continue
        if path in known_groups:  # an emptied group, e.g. sweep = {}
            continue
        close = difflib.get_close_matches(path, list(known), n=1)
        hint = f" Did you mean config.{close[0]}?" if close else ""
        raise ConfigError(f"config.{path} is not a known field.{hint}")


def require(ok: bool, field: str, value: Any, allowed: str) -> None:
    """Raise `config.<field> = <value>: must be <allowed>.` unless ok."""
    if not ok:
        raise ConfigError(f"config.{field} = {shown(value)}: must be {allowed}.")


def shown(value: Any, limit: int = 80) -> str:
    """repr(value) for a sentence, cut to about `limit` characters (an override may be long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"


class Interval(NamedTuple):
    """Where a config number may lie: finite (not a bool), within low..high (each end closed
    unless open, absent when None), an integer if asked."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def holds(self, value: Any) -> bool:
        if isinstance(value, bool) or not math.isfinite(value):
            return False
        if self.integer and not float(value).is_integer():
            return False
        low, high = self.low, self.high
        if low is not None and not (value > low if self.low_open else value >= low):
            return False
        return high is None or (value < high if self.high_open else value <= high)

    def described(self) -> str:
        """e.g. "a number in (0, 1]", "an integer >= 1", "a finite number"."""
        kind = "an integer" if self.integer else "a number"
        low, high = self.low, self.high
        if low is not None and high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{kind} in {left}{low}, {high}{right}"
        if low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {low}"
        if high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {high}"
        return f"a finite {kind[2:] if self.integer else 'number'}"


def require_number(
    cfg: Any,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
) -> None:
    """Check that config field `field` (dotted path) is a finite number in the `Interval` of the
    bounds."""
    value, within = get(cfg, field), Interval(low, high, low_open, high_open, integer)
    if not isinstance(value, (int, float)) or not within.holds(value):
        require(False, field, value, within.described())


def require_choice(cfg: Any, field: str, choices: Sequence[Any]) -> None:
    """Check that config field `field` (dotted path) is one of `choices`."""
    value = get(cfg, field)
    require(value in choices, field, value, "one of " + ", ".join(repr(c) for c in choices))


def get(cfg: Any, field: str) -> Any:
    value = cfg
    for part in field.split("."):
        value = value[part]
    return value


def with_fields(
    cfg: ml_collections.ConfigDict, fields: dict[str, Any]
) -> ml_collections.ConfigDict:
    """A copy of cfg with dotted fields replaced, e.g. {"data.num_last": 3}."""
    cfg = ml_collections.ConfigDict(cfg.to_dict())
    for path, value in fields.items():
        group, _, name = path.rpartition(".")
        (get(cfg, group) if group else cfg)[name] = value
    return cfg


def structural_cells(cfg: ml_collections.ConfigDict, traced: Sequence[str]) -> list[dict[str, Any]]:
    """The programs a config needs: its `variants` (a list of nested override dicts, if any) times
    the product of its sweep's axes that are not `traced` (those change shapes or code, so each
    value compiles its own program). Each cell is a {dotted field: value} dict."""
    axes = {k: list(v) for k, v in flatten(cfg.get("sweep", {})).items() if k not in traced}
    variants = [flatten(v) for v in cfg.get("variants", None) or [{}]]
    return [
        dict(variant, **dict(zip(axes, values, strict=True)))
        for variant in variants
        for values in itertools.product(*axes.values())
    ]


def program_config(cfg: Any, traced: Sequence[str], cell: int | None = None) -> Any:
    """The config of program `cell` of a run (None: its only one), its structural cell's fields
    set, from a ConfigDict or a dict (a workdir's config.json: `records.load_config_json`)."""
    cfg = ml_collections.ConfigDict(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
    cells = structural_cells(cfg, traced)
    if (cell is None and len(cells) > 1) or (cell is not None and cell not in range(len(cells))):
        raise ValueError(f"cell = {cell}: the run has programs (cells) 0 .. {len(cells) - 1}.")
    return with_fields(cfg, cells[cell or 0])


def traced_axes(cfg: ml_collections.ConfigDict, traced: Sequence[str]) -> dict[str, list]:
    """The sweep's axes over traced numbers: vmapped within one program."""
    return {k: list(v) for k, v in flatten(cfg.get("sweep", {})).items() if k in traced}


def require_training_steps(cfg: Any) -> None:
    """train.batch_size, train.num_steps >= 1 and train.log_every dividing num_steps: the
    schedule fields every training experiment shares."""
    require_number(cfg, "train.batch_size", low=1, integer=True)
    require_number(cfg, "train.num_steps", low=1, integer=True)
    require_number(cfg, "train.log_every", low=1, high=cfg.train.num_steps, integer=True)
    require(
        cfg.train.num_steps % cfg.train.log_every == 0,
        "train.log_every",
        cfg.train.log_every,
        f"a divisor of train.num_steps = {cfg.train.num_steps}",
    )


# ----------------------------------------------------------------------------- whole configs


_EXACT: dict[str, type[Any]] = {"float": float, "int": int, "str": str, "bool": bool}


def require_numbers(
    cfg: Any,
    field: str,
    *,
    nonempty: bool = True,
    length: int | None = None,
    length_of: str = "",
    **interval: Any,
) -> None:
    """Check that list field `field` holds (finite) numbers in the `Interval` of the keywords, as
    `require_number`: one sentence naming the whole list, e.g. `config.theory.fig3_eta_y = [0.1,
    -1.0]: must be a non-empty list of numbers > 0.`; `length` (described by `length_of`) fixes
    its length."""
    values, within = get(cfg, field), Interval(**interval)
    noun = "integers" if within.integer else "numbers"
    if within.low is None and within.high is None:
        plural = noun if length is not None else f"finite {noun}"
    else:
        plural = noun + within.described().split("integer" if within.integer else "number", 1)[1]
    if length is not None:
        allowed = f"a list of {length} {plural}" + (f" ({length_of})" if length_of else "")
    else:
        allowed = ("a non-empty list of " if nonempty else "a list of ") + plural
    ok = isinstance(values, (list, tuple)) and (len(values) > 0 or not nonempty)
    ok = ok and (length is None or len(values) == length)
    ok = ok and all(
        isinstance(v, (int, float, np.integer, np.floating)) and within.holds(v) for v in values
    )
    require(ok, field, values, allowed)


def field_error(error: Exception, group: str) -> ConfigError:
    """A constructor's `name = value: reason` error as `config.<group>.name = value: reason`
    (one sentence naming the field); other messages as `config.<group>: message`."""
    message = " ".join(str(error).split())
    name, sep, _ = message.partition(" = ")
    if sep and name.isidentifier():
        return ConfigError(f"config.{group}.{message}")
    return ConfigError(f"config.{group}: {message}")


def require_text(cfg: Any, field: str) -> None:
    """A non-empty string of printable characters without path separators (names go into paths)."""
    value = get(cfg, field)
    require(
        isinstance(value, str)
        and value.strip() == value
        and value != ""
        and value.isprintable()
        and "/" not in value
        and "\\" not in value,
        field,
        value,
        "a non-empty name without spaces at its ends, '/' or '\\'",
    )


def require_seeds(cfg: Any) -> None:
    """seed >= 0, num_seeds >= 1, and the last seed a 31-bit integer (PRNG keys take it)."""
    require_number(cfg, "seed", low=0, high=2**31 - 1, integer=True)
    require_number(cfg, "num_seeds", low=1, high=2**31 - cfg.seed, integer=True)


def require_chunking(cfg: Any) -> None:
    """train.chunk_steps: 0 (about ten progress lines) or a multiple of train.log_every, at most
    train.num_steps."""
    t = cfg.train
    require(
        t.chunk_steps == 0
        or (
            t.chunk_steps > 0 and t.chunk_steps % t.log_every == 0 and t.chunk_steps <= t.num_steps
        ),
        "train.chunk_steps",
        t.chunk_steps,
        f"0 (the default: about ten chunks) or a multiple of train.log_every = {t.log_every} "
        f"that is at most train.num_steps = {t.num_steps}",
    )


def require_nonfinite_policy(cfg: Any) -> None:
    require_choice(cfg, "train.on_nonfinite", ("stop", "mark"))


def require_schedule(cfg: Any, *, warmup_set_by: str = "") -> None:
    """optim.warmup_steps within train.num_steps (or 0 where `warmup_set_by` sets it)."""
    o = cfg.optim
    if warmup_set_by:
        require(
            o.warmup_steps == 0,
            "optim.warmup_steps",
            o.warmup_steps,
            f"0: {warmup_set_by} sets the warm-up of this experiment",
        )
    else:
        require_number(cfg, "optim.warmup_steps", low=0, high=cfg.train.num_steps, integer=True)
        require(
            o.schedule != "constant" or o.warmup_steps == 0,
            "optim.warmup_steps",
            o.warmup_steps,
            "0 unless optim.schedule is 'warmup_cosine' or 'onecycle' (the "
            "constant schedule has no warm-up)",
        )


def require_empty_sweep(cfg: Any, why: str) -> None:
    """No sweep and no variants: `why` names the experiment that would ignore them."""
    for field in ("sweep", "variants"):
        value = cfg.get(field, None)
        axes = (
            [v for v in flatten(value).values() if not _is_mapping(v)]
            if _is_mapping(value)
            else value
        )
        require(
            not axes,
            field,
            value,
            f"empty: {why} runs no sweep or variants (they would be ignored)",
        )


def require_one_checked_study(cfg: Any, claims: str) -> None:
    """For an experiment whose claims are always checked: no sweep, no variants and
    config.claims = `claims` (one ConfigError sentence for the first that is not)."""
    experiment = f"experiment = {cfg.experiment!r}"
    require_empty_sweep(cfg, experiment)
    allowed = f"{claims!r} for {experiment} (its claims are always checked)"
    require(cfg.claims == claims, "claims", cfg.claims, allowed)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, (dict, ml_collections.ConfigDict)) or (
        not isinstance(value, (int, float, str, list, tuple)) and isinstance(value, Mapping)
    )
