"""What the papers' studies share: the curvature study of each paper (docs/architecture.md, the
curvature_study room) and the edge-of-stability study (docs/notes/edge_of_stability.md). A study
checks its config (kept parameters, tracked curvature, its own claims), trains its programs in
turn with their arrays saved, probes its chosen points with a line of progress each, and writes
its tables and text beside the summary. The paper supplies what is its own: which points, which
probes (as functions: the engine imports none), which claims and figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from landscape.engine import config as config_lib
from landscape.engine import experiment, records, training
from landscape.typing import Progress, Row

T = TypeVar("T")
P = TypeVar("P")

KEPT_AND_TRACKED = ("params_every", "track_every")


def require_every(cfg: Any, study: str, why: str, fields: Sequence[str] = KEPT_AND_TRACKED) -> None:
    """Each of `fields` of the train group > 0 for experiment = `study` (kept parameters,
    tracked curvature): one ConfigError sentence naming the field, the fields asked for and
    `why` the study needs them."""
    asked = " and ".join(f"train.{f}" for f in fields)
    for field in fields:
        config_lib.require(
            cfg.train[field] > 0,
            f"train.{field}",
            cfg.train[field],
            f"> 0 for experiment = '{study}' ({asked} > 0: {why})",
        )


def require_own_claims(cfg: Any, study: str) -> None:
    """claims = `study` (the study's own claims) or 'none': one ConfigError sentence."""
    config_lib.require(cfg.claims in (study, "none"), "claims", cfg.claims, f"'{study}' or 'none'")


def programs(
    cells: Sequence[Mapping[str, Any]],
    train: Callable[[Mapping[str, Any]], T],
    workdir: records.Workdir,
    progress: Progress,
    result: Callable[[T], training.RunResult] = lambda trained: trained["result"],  # type: ignore[index]
) -> Iterator[tuple[int, T]]:
    """Each program of `cells` in turn, (index, `train(fields)`): its line of progress (a
    program with fields), then its arrays (`result(trained)`'s, complete) saved under its cell
    prefix, before the study reads them."""
    for i, fields in enumerate(cells):
        if progress and fields:
            progress(experiment.program_line(fields))
        trained = train(fields)
        prefix = experiment.cell_prefix(i, len(cells))
        workdir.save_arrays(**result(trained).arrays(prefix, complete=True))
        yield i, trained


def probe_each(
    chosen: Sequence[P],
    probe: Callable[[P], T],
    progress: Progress,
    line: Callable[[P], str] | None = None,
) -> list[T]:
    """`probe` at every chosen point, in order, each announced by `line(point)` where given."""
    out = []
    for where in chosen:
        if progress and line is not None:
            progress(line(where))
        out.append(probe(where))
    return out


def write(
    workdir: records.Workdir,
    tables: Mapping[str, Sequence[Row]],
    texts: Sequence[str] | None = None,
    text_name: str = "curvature.txt",
) -> None:
    """Every table (<name>.csv) and, where given, the probes' texts one after another
    (`text_name`, a blank line between them)."""
    for name, rows in tables.items():
        workdir.save_table(name, list(rows))
    if texts is not None:
        workdir.write_text(text_name, "\n\n".join(texts))
