"""Config validation shared by every experiment: one clear sentence per mistake, before compiling.

A package describes its configs by a reference `ConfigDict` (every field, with its default) and a
list of rules. `validate` rejects fields the reference does not know (with a suggestion) and
fields whose value is outside the allowed range, naming the field and the range.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from typing import Any, Callable, Iterable, Sequence

import ml_collections


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


def require_number(cfg: Any, field: str, *, low: float | None = None,
                                      high: float | None = None, low_open: bool = False,
                                      high_open: bool = False, integer: bool = False) -> None:
    """Check that config field `field` (dotted path) is a finite number in the given range."""
    value = get(cfg, field)
    interval = _describe_interval(low, high, low_open, high_open, integer)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = is_number and math.isfinite(value) and (not integer or float(value).is_integer())
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    require(ok, field, value, interval)


def require_choice(cfg: Any, field: str, choices: Sequence[Any]) -> None:
    value = get(cfg, field)
    require(value in choices, field, value, "one of " + ", ".join(repr(c) for c in choices))


def get(cfg: Any, field: str) -> Any:
    value = cfg
    for part in field.split("."):
        value = value[part]
    return value


def check_sweep(sweep: Any, rules: dict[str, Callable[[float], bool]],
                                allowed: dict[str, str]) -> None:
    """Check a sweep {field: [values]}: known sweepable fields, non-empty lists, values in range."""
    for field, values in flatten(sweep).items():
        require(field in rules, f"sweep.{field}", values,
                        "a sweepable field: one of " + ", ".join(sorted(rules)))
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        require(len(values) > 0, f"sweep.{field}", values, "a non-empty list")
        for v in values:
            require(rules[field](v), f"sweep.{field}", v, allowed[field])


def _describe_interval(low, high, low_open, high_open, integer) -> str:
    kind = "an integer" if integer else "a number"
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"{kind} in {left}{low}, {high}{right}"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{kind} {'<' if high_open else '<='} {high}"
    return f"a finite {kind[2:] if integer else 'number'}"


def with_fields(cfg: ml_collections.ConfigDict, fields: dict[str, Any]) -> ml_collections.ConfigDict:
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
    return [dict(variant, **dict(zip(axes, values)))
            for variant in variants for values in itertools.product(*axes.values())]


def traced_axes(cfg: ml_collections.ConfigDict, traced: Sequence[str]) -> dict[str, list]:
    """The sweep's axes over traced numbers: vmapped within one program."""
    return {k: list(v) for k, v in flatten(cfg.get("sweep", {})).items() if k in traced}


def require_training_steps(cfg: Any) -> None:
    """train.batch_size, train.num_steps >= 1 and train.log_every dividing num_steps: the
    schedule fields every training experiment shares."""
    require_number(cfg, "train.batch_size", low=1, integer=True)
    require_number(cfg, "train.num_steps", low=1, integer=True)
    require_number(cfg, "train.log_every", low=1, high=cfg.train.num_steps, integer=True)
    require(cfg.train.num_steps % cfg.train.log_every == 0, "train.log_every", cfg.train.log_every,
            f"a divisor of train.num_steps = {cfg.train.num_steps}")


def validate_cells(cfg: ml_collections.ConfigDict, reference: ml_collections.ConfigDict,
                   traced: Sequence[str], validate_cell: Callable[[Any], None]) -> None:
    """Unknown fields against `reference` (sweep and variants are free-form), then
    `validate_cell` on every structural cell (each program's resolved config)."""
    check_known_fields(cfg, reference, free=("sweep", "variants"))
    for fields in structural_cells(cfg, traced):
        validate_cell(with_fields(cfg, fields))


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
        if text.isdigit() and int(text) < 2 ** 60:
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
            f"{format_bytes(available)} of memory is available: lower config.{estimate.field}.")


def traced_runs(values: dict[str, Any], traced: Sequence[str], zipped: bool = False) -> int:
    """Runs one program vmaps, from a flat config (`flatten`): seeds x the traced sweep axes
    (their product, or one axis' length when `zipped`)."""
    lengths = [len(v) for k, v in values.items()
               if k.startswith("sweep.") and k[len("sweep."):] in traced]
    runs = (max(lengths) if zipped else math.prod(lengths)) if lengths else 1
    return int(values.get("num_seeds", 1)) * runs


def estimate_memory(cfg: ml_collections.ConfigDict, traced: Sequence[str],
                    cell_bytes: Callable[[dict[str, Any]], tuple[float, str]],
                    fields: Sequence[str], reference: Any = None) -> MemoryEstimate:
    """The MemoryEstimate of a config's largest structural cell, by shape arithmetic.

    cell_bytes(values) -> (bytes, what) for one cell's flat config (`flatten`, with the cell's
    fields set). The field to lower is the one of `fields` (integers, in order of preference)
    whose lowering, to half its value or to its default in `reference` if that is lower, saves
    the most in that cell (the first within 80% of the best): an absurd value, lowered to its
    default, saves nearly everything. Flat dicts, not ConfigDict copies: about a millisecond.
    """
    flat = flatten(cfg)
    defaults = flatten(reference) if reference is not None else {}
    cells = [dict(flat, **cell) for cell in structural_cells(cfg, traced)] or [flat]
    (need, what), worst = max(((cell_bytes(cell), cell) for cell in cells),
                              key=lambda pair: pair[0][0])

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
    return MemoryEstimate(float(need), what,
                          next(f for f in fields if savings[f] >= 0.8 * best))
