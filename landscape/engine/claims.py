"""The claims a run checks against a measurement, with their verdicts, and their terminal table
(`records` re-exports them: `records.claim`, `records.sanity`, `records.Claim`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

CLAIM_KINDS = ("paper", "sanity")


@dataclasses.dataclass
class Claim:
    """One claim checked against a measurement.

    kind "paper": a claim of the paper (or of its notes) that the figure reproduces or not;
    kind "sanity": a check of the run itself (e.g. every seed's final loss >= the Bayes loss),
    reported apart and never counted among the paper's claims.
    """

    claim: str
    measured: Any
    expected: Any
    passed: bool
    source: str = ""
    kind: str = "paper"

    @property
    def verdict(self) -> str:
        return "reproduced" if self.passed else "NOT reproduced"


ClaimFn = Callable[[Any, Any], list[Claim]]  # a paper's claims: (config, its run groups)


def claim(
    statement: str,
    measured: Any,
    expected: Any,
    passed: object,
    source: str = "",
    kind: str = "paper",
) -> Claim:
    """A Claim with `passed` coerced to a Python bool (numpy bools are common here)."""
    if kind not in CLAIM_KINDS:
        raise ValueError(f"claim kind {kind!r}: must be one of {', '.join(CLAIM_KINDS)}")
    return Claim(statement, measured, expected, bool(passed), source, kind)


def sanity(statement: str, measured: Any, expected: Any, passed: object, source: str = "") -> Claim:
    """A check of the run itself, reported apart from the paper's claims."""
    return claim(statement, measured, expected, passed, source, kind="sanity")


def evaluated(name: str, evaluate: Callable[[], Iterable[Claim]]) -> list[Claim]:
    """The claims `evaluate()` returns; if it raises (data its claims were not written for, e.g. a
    collapsed run), one claim saying that claim set could not be evaluated and why (NOT
    reproduced), so the run's other claims, figures and summary are still written."""
    try:
        return list(evaluate())
    except Exception as error:  # noqa: BLE001 -- reported as the verdict
        return [
            claim(
                f"{name}: could not be evaluated on this run",
                f"{type(error).__name__}: {error}",
                "a run its claims can be evaluated on",
                False,
            )
        ]


def format_claims(claims: list[Claim]) -> str:
    """A terminal table: verdict, claim, measured vs expected; the paper's claims first, the
    run's sanity checks after them, each with its own count."""
    lines = []
    for kind, title, tally in (
        ("paper", None, "claims reproduced"),
        ("sanity", "  sanity checks of the runs:", "sanity checks passed"),
    ):
        chosen = [c for c in claims if c.kind == kind]
        if not chosen and kind == "sanity":
            continue
        if title:
            lines.append(title)
        for c in chosen:
            mark = "ok " if c.passed else "NO "
            lines.append(
                f"  [{mark}] {c.claim}\n         measured {format_value(c.measured)}; "
                f"expected {format_value(c.expected)}"
            )
        lines.append(f"  {sum(c.passed for c in chosen)}/{len(chosen)} {tally}")
    return "\n".join(lines)


def format_value(value: Any) -> str:
    """A measured or expected value in a line of text: floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)
