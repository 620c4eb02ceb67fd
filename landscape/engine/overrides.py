"""A config from a command line's words: a config file (`configs/<file>.py[:variant]`, or a
workdir's config.json to run it again), `--config.a.b=value` overrides read as each field's type
(an unknown field or a group named in one sentence, with the closest field; a swept field replaced
by the single value given, with a note), dotted keys nested for `ConfigDict`, and the result
validated by its experiment: docs/design/experiments.md, "Overrides"."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import pathlib
import traceback
import types
from typing import Any

import ml_collections

from landscape.engine import config as config_lib
from landscape.engine import records
from landscape.engine.protocols import Experiment


class UsageError(config_lib.ConfigError):
    """A mistake in the command (a flag, a config file): one sentence, exit status 2."""


def configured(
    experiment: Experiment, data: dict[str, Any], overrides: list[tuple[str, str]]
) -> tuple[ml_collections.ConfigDict, list[str]]:
    """`data` (a config as a nested dict, changed in place) with `overrides` set, as a validated
    ConfigDict, and the notes for the user (a sweep axis replaced by a single value)."""
    notes = apply_overrides(data, overrides, config_lib.flatten(experiment.default_config()))
    cfg = ml_collections.ConfigDict(nested(data))  # sweep axes may be dotted: "optim.lr"
    experiment.validate(cfg)
    return cfg, notes


def split_overrides(args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(--config.a.b=value pairs as ("a.b", "value"), the other arguments)."""
    overrides, rest, i = [], [], 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--config."):
            name, eq, value = arg[len("--config.") :].partition("=")
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    raise UsageError(f"--config.{name} needs a value: --config.{name}=VALUE.")
                value, i = args[i + 1], i + 1
            if not name:
                raise UsageError(f"{arg}: name a field, e.g. --config.train.num_steps=200.")
            overrides.append((name, value))
        else:
            rest.append(arg)
        i += 1
    return overrides, rest


def apply_overrides(
    data: dict[str, Any], overrides: list[tuple[str, str]], schema: dict[str, Any]
) -> list[str]:
    """Set each `field=text` of `overrides` in the nested dict `data`. Returns notes for the
    user (a sweep axis replaced). Raises ConfigError for an unknown field or a field the
    config's variants set."""
    notes = []
    for field, text in overrides:
        if field == "sweep" or field.startswith("sweep."):
            target = field[len("sweep.") :]
            if target and target not in schema:
                raise _unknown(target, schema, prefix="sweep.")
            value = _literal(text)
            if target:
                _set(data, field, value)
            else:
                data["sweep"] = value
            continue
        if field not in schema:
            groups = {k.rsplit(".", i)[0] for k in schema for i in range(1, k.count(".") + 1)}
            if field in groups:
                raise config_lib.ConfigError(
                    f"config.{field} is a group of fields: set them one by one, e.g. "
                    f"--config.{next(k for k in schema if k.startswith(field + '.'))}=..."
                )
            raise _unknown(field, schema)
        for variant in data.get("variants") or []:
            if isinstance(variant, dict) and field in config_lib.flatten(variant):
                raise config_lib.ConfigError(
                    f"config.{field} is set by this config's variants, which would override "
                    "the command line: change --config.variants instead."
                )
        current = _get(data, field)
        value = _parse_value(text, current if current is not None else schema[field])
        _set(data, field, value)
        swept = config_lib.flatten(data.get("sweep") or {})
        if field in swept:
            _drop_sweep_axis(data, field)
            notes.append(
                f"note: --config.{field} replaces the sweep over {field} "
                f"({swept[field]}) with the single value {value!r}."
            )
    return notes


def _unknown(field: str, schema: dict[str, Any], prefix: str = "") -> config_lib.ConfigError:
    close = difflib.get_close_matches(field, list(schema), n=1)
    hint = f" Did you mean config.{prefix}{close[0]}?" if close else ""
    return config_lib.ConfigError(f"config.{prefix}{field} is not a known field.{hint}")


def _parse_value(text: str, like: Any) -> Any:
    """`text` read as the type of `like` (the field's current value); validation then checks
    the result's type and range, so a wrong type gets the field's own sentence."""
    if isinstance(like, bool):
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        return text
    value = _literal(text)
    if isinstance(like, str):
        return value if isinstance(value, str) else text
    if isinstance(like, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # a float field given 1 means 1.0
    return value


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _get(data: dict, field: str) -> Any:
    value: Any = data
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _set(data: dict, field: str, value: Any) -> None:
    *groups, name = field.split(".")
    for part in groups:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[name] = value


def _drop_sweep_axis(data: dict, field: str) -> None:
    path = field.split(".")
    chain = [data["sweep"]]
    for part in path[:-1]:
        chain.append(chain[-1][part])
    del chain[-1][path[-1]]
    # drop emptied groups (chain holds the sweep and one group per part of path[:-1])
    for group, part in zip(reversed(chain[:-1]), reversed(path[:-1]), strict=True):
        if not group[part]:
            del group[part]


def nested(data: Any) -> Any:
    """A config's dicts with dotted keys nested: {"sweep": {"optim.lr": v}} -> {"sweep":
    {"optim": {"lr": v}}} (ConfigDict takes no dots), in lists (variants) too."""
    if isinstance(data, list):
        return [nested(item) for item in data]
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        value = nested(value)
        *groups, name = key.split(".") if isinstance(key, str) else [key]
        target = out
        for part in groups:
            target = target.setdefault(part, {})
        if isinstance(target.get(name), dict) and isinstance(value, dict):
            target[name].update(value)
        else:
            target[name] = value
    return out


# ----------------------------------------------------------------------------- config files


def load_config(spec: str) -> dict[str, Any]:
    """A config as a plain dict from `configs/<file>.py[:variant]` or a workdir's config.json."""
    path, _, variant = spec.partition(":")
    file = pathlib.Path(path)
    if file.suffix not in (".py", ".json"):
        raise UsageError(
            f"--config={spec}: a config is a .py file (configs/<file>.py[:variant]) "
            "or a workdir's config.json."
        )
    if not file.is_file():
        raise UsageError(f"--config={spec}: no config file {path}.")
    if file.suffix == ".json":
        if variant:
            raise UsageError(f"--config={spec}: a config.json has no variants.")
        try:
            return records.load_config_json(file)
        except (ValueError, OSError) as error:
            raise UsageError(f"--config={spec}: cannot read it as a config ({error}).") from None
    module = _import_file(file)
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        raise UsageError(f"{path} has no get_config() function.")
    try:
        cfg = get_config(variant) if variant else get_config()
    except TypeError as error:
        if variant and "positional argument" in str(error):
            raise UsageError(f"--config={spec}: {path} has no variants.") from None
        raise UsageError(_where(error, file)) from None
    except Exception as error:
        raise UsageError(_where(error, file, spec)) from None
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)


def _import_file(file: pathlib.Path) -> types.ModuleType:
    name = f"_config_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None  # a .py file always has both
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise UsageError(f"{file}:{error.lineno}: SyntaxError: {error.msg}.") from None
    except Exception as error:
        raise UsageError(_where(error, file)) from None
    return module


def _where(error: Exception, file: pathlib.Path, spec: str | None = None) -> str:
    """`<file>:<line>: <Error>: <message>` at the innermost frame inside `file`."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if pathlib.Path(frame.filename).resolve() == file.resolve():
            line = frame.lineno
    if isinstance(error, ValueError) and spec and ":" in spec:  # e.g. an unknown variant
        return f"--config={spec}: {error}"
    where = f"{file}:{line}" if line else str(file)
    return f"{where}: {type(error).__name__}: {error}"
