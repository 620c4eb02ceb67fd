"""Config validation shared by every experiment: one clear sentence per mistake, before compiling.

A package describes its configs by a reference `ConfigDict` (every field, with its default) and a
list of rules. `validate` rejects fields the reference does not know (with a suggestion) and
fields whose value is outside the allowed range, naming the field and the range.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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
        raise ConfigError(f"config.{field} = {value!r}: must be {allowed}.")


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
    """Check that config field `field` (dotted path) is a finite number in the given range."""
    value = get(cfg, field)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = is_number and math.isfinite(value) and (not integer or float(value).is_integer())
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        require(ok, field, value, _describe_interval(low, high, low_open, high_open, integer))


def require_choice(cfg: Any, field: str, choices: Sequence[Any]) -> None:
    value = get(cfg, field)
    require(value in choices, field, value, "one of " + ", ".join(repr(c) for c in choices))


def get(cfg: Any, field: str) -> Any:
    value = cfg
    for part in field.split("."):
        value = value[part]
    return value


def check_sweep(
    sweep: Any, rules: dict[str, Callable[[float], bool]], allowed: dict[str, str]
) -> None:
    """Check a sweep {field: [values]}: known sweepable fields, non-empty lists, values in range."""
    for field, values in flatten(sweep).items():
        require(
            field in rules,
            f"sweep.{field}",
            values,
            "a sweepable field: one of " + ", ".join(sorted(rules)),
        )
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        require(len(values) > 0, f"sweep.{field}", values, "a non-empty list")
        for v in values:
            require(rules[field](v), f"sweep.{field}", v, allowed[field])


def _describe_interval(
    low: float | None, high: float | None, low_open: bool, high_open: bool, integer: bool
) -> str:
    kind = "an integer" if integer else "a number"
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"{kind} in {left}{low}, {high}{right}"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{kind} {'<' if high_open else '<='} {high}"
    return f"a finite {kind[2:] if integer else 'number'}"


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

# Fields that hold one value per run: a sweep axis or a variant may not set them (the seeds of a
# run are seed .. seed + num_seeds - 1; name, experiment and claims describe the whole run).
UNSWEEPABLE = ("name", "experiment", "seed", "num_seeds", "claims", "sweep_zip")


class Fields(dict):
    """A plain nested dict read like a ConfigDict (cfg.train.num_steps, cfg["train"], .get):
    what validation checks, built once per config (ConfigDict copies are ~1 ms each)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def as_fields(cfg: Any) -> Any:
    """A `Fields` copy of a (nested) ConfigDict or dict; lists are copied, leaves shared."""
    if isinstance(cfg, (dict, ml_collections.ConfigDict, Mapping)):
        return Fields((k, as_fields(v)) for k, v in cfg.items())
    if isinstance(cfg, list):
        return [as_fields(v) for v in cfg]
    if isinstance(cfg, tuple):
        return tuple(as_fields(v) for v in cfg)
    return cfg


def _is_mapping(value: Any) -> bool:
    return isinstance(value, (dict, ml_collections.ConfigDict)) or (
        not isinstance(value, (int, float, str, list, tuple)) and isinstance(value, Mapping)
    )


# A field's kind is that of its default: "bool", "int", "float", "str", ("list", element kind or
# None when the default list is empty) or None (not checked: a default of None).
def kind_of(default: Any) -> Any:
    if isinstance(default, (bool, np.bool_)):
        return "bool"
    if isinstance(default, numbers.Integral):
        return "int"
    if isinstance(default, numbers.Real):
        return "float"
    if isinstance(default, str):
        return "str"
    if isinstance(default, (list, tuple)):
        return ("list", kind_of(default[0]) if len(default) else None)
    return None


_EXACT: dict[str, type[Any]] = {"float": float, "int": int, "str": str, "bool": bool}


def has_kind(value: Any, kind: Any) -> bool:
    """Whether value has `kind`: bools are exactly bools, integers never bools or floats, numbers
    finite ints or floats (never bools or strings), lists lists or tuples with elements of kind."""
    if kind is None:
        return True
    if type(value) is _EXACT.get(kind):  # the common case, fast
        return kind != "float" or math.isfinite(value)
    if kind == "bool":
        return isinstance(value, (bool, np.bool_))
    if isinstance(value, (bool, np.bool_)):
        return False
    if kind == "int":
        return isinstance(value, numbers.Integral)
    if kind == "float":
        return isinstance(value, numbers.Real) and math.isfinite(value)
    if kind == "str":
        return isinstance(value, str)
    return isinstance(value, (list, tuple)) and all(has_kind(v, kind[1]) for v in value)


def describe_kind(kind: Any, plural: bool = False) -> str:
    if kind is None:
        return "values" if plural else "a value"
    if isinstance(kind, tuple):
        inner = "" if kind[1] is None else " of " + describe_kind(kind[1], plural=True)
        return ("lists" if plural else "a list") + inner
    one, many = {
        "bool": ("True or False", "True or False values"),
        "int": ("an integer", "integers"),
        "float": ("a finite number", "finite numbers"),
        "str": ("a string", "strings"),
    }[kind]
    return many if plural else one


def reference_kinds(reference: Any) -> dict[str, Any]:
    """{dotted field: kind} for every leaf of a package's default_config()."""
    return {path: kind_of(value) for path, value in flatten(reference).items()}


def _groups(kinds: Mapping[str, Any]) -> set[str]:
    return {k.rsplit(".", i)[0] for k in kinds for i in range(1, k.count(".") + 1)}


def _unknown(path: str, known: Iterable[str], prefix: str = "") -> ConfigError:
    close = difflib.get_close_matches(path, list(known), n=1)
    hint = f" Did you mean config.{prefix}{close[0]}?" if close else ""
    return ConfigError(f"config.{prefix}{path} is not a known field.{hint}")


def check_types(cfg: Any, kinds: Mapping[str, Any], *, free: Iterable[str] = ()) -> None:
    """Every field of the reference is present in cfg with the kind of its default; every group
    is a group (a dict), not a value."""
    free = tuple(free)
    for group in sorted(_groups(kinds), key=lambda g: g.count(".")):
        value = _lookup(cfg, group)
        if value is not _MISSING and not _is_mapping(value):
            fields = ", ".join(sorted(k for k in kinds if k.startswith(group + "."))[:3])
            require(False, group, value, f"a group of fields ({fields}, ...), not a value")
    for path, kind in kinds.items():
        if path in free:
            continue
        value = _lookup(cfg, path)
        if value is _MISSING:
            raise ConfigError(
                f"config.{path} is missing: every field of default_config() must be set."
            )
        require(has_kind(value, kind), path, value, describe_kind(kind))


_MISSING = object()


def _lookup(cfg: Any, path: str) -> Any:
    value = cfg
    for part in path.split("."):
        if not _is_mapping(value) or part not in value:
            return _MISSING
        value = value[part]
    return value


def check_sweep_axes(
    cfg: Any,
    kinds: Mapping[str, Any],
    *,
    sweepable: Sequence[str] | None = None,
    unsweepable: Sequence[str] = UNSWEEPABLE,
) -> dict[str, list]:
    """The sweep {field: [values]}: a dict whose axes name known fields (a suggestion for a typo),
    that may be swept, each a non-empty list of values of the field's kind. Returns the axes."""
    sweep = cfg.get("sweep", {})
    if sweep is None:
        return {}
    require(
        _is_mapping(sweep),
        "sweep",
        sweep,
        "a dict of axes {field: [values]}, e.g. {'optim': {'lr': [0.1, 1.0]}}",
    )
    groups = _groups(kinds)
    axes = {}
    for path, values in flatten(sweep).items():
        if path not in kinds:
            if path in groups:
                if _is_mapping(values) and not len(values):
                    continue  # an emptied group, e.g. sweep.optim = {}
                require(
                    False,
                    f"sweep.{path}",
                    values,
                    f"a dict of axes {{field: [values]}} under the group {path}, not a value",
                )
            raise _unknown(path, kinds, "sweep.")
        require(
            not _one_per_run(path, unsweepable),
            f"sweep.{path}",
            values,
            f"left out of the sweep: config.{path} holds one value per run",
        )
        if sweepable is not None:
            require(
                path in sweepable,
                f"sweep.{path}",
                values,
                "a sweepable field: one of " + ", ".join(sorted(sweepable)),
            )
        require(
            isinstance(values, (list, tuple)) and len(values) > 0,
            f"sweep.{path}",
            values,
            f"a non-empty list of values of config.{path}, e.g. [{_example(kinds[path])}]",
        )
        for v in values:
            require(has_kind(v, kinds[path]), f"sweep.{path}", v, describe_kind(kinds[path]))
        axes[path] = list(values)
    return axes


def _one_per_run(path: str, unsweepable: Sequence[str]) -> bool:
    """Whether `path` is, or lies in a group, of `unsweepable` (e.g. "task" covers task.alpha)."""
    return any(path == u or path.startswith(u + ".") for u in unsweepable)


def _example(kind: Any) -> str:
    return (
        {"bool": "True, False", "int": "1, 2", "float": "0.1, 1.0", "str": "'a', 'b'"}.get(
            kind, "[...], [...]"
        )
        if not isinstance(kind, tuple)
        else "[...], [...]"
    )


def check_variants(
    cfg: Any, kinds: Mapping[str, Any], *, unsweepable: Sequence[str] = UNSWEEPABLE
) -> list[dict[str, Any]]:
    """`variants`: a list of override dicts (one program each) whose fields are known, may vary
    between programs, and have their field's kind. Returns the flattened overrides."""
    variants = cfg.get("variants", None)
    if variants is None or (isinstance(variants, (list, tuple)) and not variants):
        return []
    require(
        isinstance(variants, (list, tuple)),
        "variants",
        variants,
        "a list of override dicts, e.g. [{'model': {'tied': True}}, {'model': {'tied': False}}]",
    )
    groups = _groups(kinds)
    out = []
    for i, variant in enumerate(variants):
        require(
            _is_mapping(variant),
            f"variants[{i}]",
            variant,
            "a dict of overrides, e.g. {'model': {'tied': True}}",
        )
        flat = flatten(variant)
        for path, value in flat.items():
            if path not in kinds:
                if path in groups and _is_mapping(value) and not len(value):
                    continue
                if path in groups:
                    require(
                        False,
                        f"variants[{i}].{path}",
                        value,
                        f"a dict of overrides under the group {path}, not a value",
                    )
                raise _unknown(path, kinds, f"variants[{i}].")
            require(
                not _one_per_run(path, unsweepable),
                f"variants[{i}].{path}",
                value,
                f"left out of the variants: config.{path} holds one value per run",
            )
            require(
                has_kind(value, kinds[path]),
                f"variants[{i}].{path}",
                value,
                describe_kind(kinds[path]),
            )
        out.append({k: v for k, v in flat.items() if k in kinds})
    return out


def _extremes(values: list) -> list:
    """The values of a traced axis worth checking: its least and greatest number (ranges are
    intervals, and the kinds already said every value is a finite number), or every value."""
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        low, high = min(values), max(values)
        return [low] if low == high else [low, high]
    return values


def _set(cfg: Fields, path: str, value: Any) -> Any:
    group, _, name = path.rpartition(".")
    target = _lookup(cfg, group) if group else cfg
    old = target[name]
    target[name] = value
    return old


def _copy_groups(cfg: Any) -> Any:
    return Fields((k, _copy_groups(v)) for k, v in cfg.items()) if isinstance(cfg, Fields) else cfg


def _run_cell(validate_cell: Callable[[Any], None], cell: Fields) -> None:
    """validate_cell, with anything it raises but ConfigError made one ConfigError sentence."""
    try:
        validate_cell(cell)
    except ConfigError:
        raise
    except (
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        IndexError,
        ZeroDivisionError,
        OverflowError,
    ) as error:
        raise ConfigError(
            f"config could not be checked ({type(error).__name__}: {error}); "
            "please report this with the config."
        ) from None


def _in_context(
    error: ConfigError, overrides: dict[str, Any], origin: dict[str, str]
) -> ConfigError:
    """The error of a cell, naming where its value came from: `config.sweep.chain.p = 1.5: ...`
    when it is about a swept or variant field, else with the cell's overrides in brackets."""
    message = str(error)
    for path in overrides:
        head = f"config.{path} = "
        if message.startswith(head) or message.startswith(f"config.{path}:"):
            return ConfigError(f"config.{origin[path]}{message[len('config.' + path) :]}")
    where = ", ".join(f"config.{origin[k]} = {v!r}" for k, v in overrides.items())
    body = message[:-1] if message.endswith(".") else message
    return ConfigError(f"{body} (in the program with {where}).")


def require_numbers(
    cfg: Any,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    nonempty: bool = True,
    length: int | None = None,
    length_of: str = "",
) -> None:
    """Check that list field `field` holds (finite) numbers in a range: one sentence naming the
    whole list, e.g. `config.theory.fig3_eta_y = [0.1, -1.0]: must be a non-empty list of
    numbers > 0.`; `length` (described by `length_of`) fixes its length."""
    values = get(cfg, field)
    noun = "integers" if integer else "numbers"
    if low is None and high is None:
        plural = noun if length is not None else f"finite {noun}"
    else:
        plural = (
            noun
            + _describe_interval(low, high, low_open, high_open, integer).split(
                "number" if not integer else "integer", 1
            )[1]
        )
    if length is not None:
        allowed = f"a list of {length} {plural}" + (f" ({length_of})" if length_of else "")
    else:
        allowed = ("a non-empty list of " if nonempty else "a list of ") + plural
    ok = isinstance(values, (list, tuple)) and (len(values) > 0 or not nonempty)
    ok = ok and (length is None or len(values) == length)
    for v in values if ok else ():
        ok = (
            isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, bool)
            and math.isfinite(v)
            and (not integer or float(v).is_integer())
        )
        if ok and low is not None:
            ok = v > low if low_open else v >= low
        if ok and high is not None:
            ok = v < high if high_open else v <= high
        if not ok:
            break
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


def validate_cells(
    cfg: Any,
    reference: ml_collections.ConfigDict,
    traced: Sequence[str] | Callable[[Any], Sequence[str]],
    validate_cell: Callable[[Any], None],
    *,
    sweepable: Sequence[str] | None = None,
    unsweepable: Sequence[str] = UNSWEEPABLE,
    before: Callable[[Any], None] | None = None,
) -> Any:
    """The whole check of a config, before anything is made; one ConfigError sentence.

    1. unknown fields (with a suggestion), 2. every field's kind (that of its default in
    `reference`), 3. the sweep's axes and the variants (known fields, lists, kinds), 4.
    `before(cfg)` (the fields of the whole run, e.g. `experiment`), 5. `validate_cell` (ranges
    and relations) on every program's resolved config: each variant x structural sweep value, and
    in each, every traced axis at its extremes. `traced` may be a function of the config. Cells
    are `Fields` (dicts read like ConfigDicts). Returns the config as `Fields`.
    """
    free = tuple(f for f in ("sweep", "variants") if f in reference)
    check_known_fields(cfg, reference, free=free)
    fields = as_fields(cfg)
    kinds = reference_kinds(reference)
    check_types(fields, kinds, free=free)
    axes = check_sweep_axes(fields, kinds, sweepable=sweepable, unsweepable=unsweepable)
    variants = "variants" in free and check_variants(fields, kinds, unsweepable=unsweepable) or [{}]
    if before is not None:
        _run_cell(before, fields)
    traced = tuple(traced(fields) if callable(traced) else traced)
    for i, variant in enumerate(variants):
        for path in axes:
            require(
                path not in variant or path in traced,
                f"sweep.{path}",
                axes[path],
                f"a field the variants leave alone (config.variants[{i}] sets it too)",
            )
    structural = {k: v for k, v in axes.items() if k not in traced}
    traced_axes = {k: v for k, v in axes.items() if k in traced}
    for i, variant in enumerate(variants):
        for values in itertools.product(*structural.values()):
            overrides = dict(variant, **dict(zip(structural, values, strict=True)))
            origin = {k: f"variants[{i}].{k}" for k in variant}
            origin.update({k: f"sweep.{k}" for k in structural})
            cell = _copy_groups(fields)
            for path, value in overrides.items():
                _set(cell, path, value)
            _check_cell(validate_cell, cell, fields, overrides, origin)
            for axis, axis_values in traced_axes.items():
                for value in _extremes(axis_values):
                    old = _set(cell, axis, value)
                    _check_cell(
                        validate_cell,
                        cell,
                        fields,
                        {**overrides, axis: value},
                        {**origin, axis: f"sweep.{axis}"},
                    )
                    _set(cell, axis, old)
    return fields


def _check_cell(
    validate_cell: Callable[[Any], None],
    cell: Fields,
    base: Fields,
    overrides: dict[str, Any],
    origin: dict[str, str],
) -> None:
    try:
        _run_cell(validate_cell, cell)
    except ConfigError as error:
        if not overrides:
            raise
        try:  # the same mistake without the overrides: say so
            _run_cell(validate_cell, base)
        except ConfigError as base_error:
            if str(base_error) == str(error):
                raise base_error from None
        raise _in_context(error, overrides, origin) from None


# ----------------------------------------------------------------------------- memory


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """What a config's largest program needs at once, by shape arithmetic (before compiling).

    bytes: the estimate; what: the arrays it counts, in words ("the test set: 65536 sequences x
    32 tokens x ..."); field: the config field to lower to need less (dotted, without "config.").
    """

    bytes: float
    what: str
    field: str


def available_memory_bytes() -> float:
    """Memory this process may still take: MemAvailable of /proc/meminfo, capped by a cgroup
    limit where one is set; inf where neither can be read (then nothing is refused)."""
    available = math.inf
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = float(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            available = min(available, float(text))
    return available


def format_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def check_memory(estimate: MemoryEstimate | None, available: float | None = None) -> None:
    """Raise one ConfigError sentence when `estimate` exceeds the available memory."""
    if estimate is None:
        return
    available = available_memory_bytes() if available is None else available
    if estimate.bytes > available:
        raise ConfigError(
            f"this run needs about {format_bytes(estimate.bytes)} at once ({estimate.what}) but "
            f"{format_bytes(available)} of memory is available: lower config.{estimate.field}."
        )


def traced_runs(values: dict[str, Any], traced: Sequence[str], zipped: bool = False) -> int:
    """Runs one program vmaps, from a flat config (`flatten`): seeds x the traced sweep axes
    (their product, or one axis' length when `zipped`)."""
    lengths = [
        len(v) for k, v in values.items() if k.startswith("sweep.") and k[len("sweep.") :] in traced
    ]
    runs = (max(lengths) if zipped else math.prod(lengths)) if lengths else 1
    return int(values.get("num_seeds", 1)) * runs


@functools.cache
def _flat_defaults(default_config: Callable[[], Any]) -> dict[str, Any]:
    return flatten(default_config())


def estimate_memory(
    cfg: ml_collections.ConfigDict,
    traced: Sequence[str],
    cell_bytes: Callable[[dict[str, Any]], tuple[float, str]],
    fields: Sequence[str],
    default_config: Callable[[], Any] | None = None,
) -> MemoryEstimate:
    """The MemoryEstimate of a config's largest structural cell, by shape arithmetic.

    cell_bytes(values) -> (bytes, what) for one cell's flat config (`flatten`, with the cell's
    fields set). The field to lower is the one of `fields` (integers, in order of preference)
    whose lowering, to half its value or to its default (`default_config()`) if that is lower, saves
    the most in that cell (the first within 80% of the best): an absurd value, lowered to its
    default, saves nearly everything. Flat dicts, not ConfigDict copies: about a millisecond.
    """
    flat = flatten(cfg)
    defaults = _flat_defaults(default_config) if default_config is not None else {}
    cells = [dict(flat, **cell) for cell in structural_cells(cfg, traced)] or [flat]
    (need, what), worst = max(
        ((cell_bytes(cell), cell) for cell in cells), key=lambda pair: pair[0][0]
    )

    def saving(field: str) -> float:
        value = worst.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            return -math.inf
        lower = value // 2
        default = defaults.get(field)
        if isinstance(default, int) and not isinstance(default, bool) and 1 <= default < lower:
            lower = default
        return need - cell_bytes(dict(worst, **{field: lower}))[0]

    savings = {field: saving(field) for field in fields}
    best = max(savings.values())
    return MemoryEstimate(float(need), what, next(f for f in fields if savings[f] >= 0.8 * best))
