"""Whole configs: the kinds of their fields, sweep axes, variants and the structural cells each
validated as the run will see them, one sentence per mistake (docs/guide/configs.md). The
per-field checks they call are `config.py`."""

from __future__ import annotations

import difflib
import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np

from landscape.engine.config import (
    _EXACT,
    ConfigError,
    _is_mapping,
    check_known_fields,
    flatten,
    require,
)

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
