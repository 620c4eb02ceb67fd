"""A run's workdir: the only file I/O of the library.

<workdir>/config.json     the resolved config
<workdir>/metrics.jsonl   one JSON object per run per logged step (pandas.read_json(lines=True))
<workdir>/arrays.npz      loss curves, snapshots (attention maps, Z rows), final values
<workdir>/summary.json    the paper's claims: statement, measured value, expected, verdict
<workdir>/figures/*.png   paper-style plots
<workdir>/manifest.json   every file the runs wrote here (size and sha256 where final): what
                          `overwrite` may remove and what `verify` checks
<workdir>/.lock           held (fcntl.flock) by the process writing the workdir; holds its pid
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import hashlib
import json
import math
import os
import pathlib
import re
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import integrity
from landscape.engine.checkpoints import (
    Checkpoint,
    atomic,
    latest_checkpoint_metrics_bytes,
    space_for,
)
from landscape.engine.checkpoints import (
    DiskFullError as DiskFullError,  # re-exported: a record the disk had no space for
)
from landscape.engine.integrity import (
    MANIFEST,
    WorkdirError,
    check_free,
    check_resumable,
    has_records,
    lock,
    others,
    read_entries,
    read_npz,
    read_summary_json,
    remove_records,
    sha256_of,
)
from landscape.engine.result import RunResult

# the workdir's integrity, where callers know it: records.verify, records.lock, ...
LOCK, RECORD_FILES, verify = integrity.LOCK, integrity.RECORD_FILES, integrity.verify
load_config_json, read_manifest = integrity.load_config_json, integrity.read_manifest
paper_config = integrity.paper_config

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


class Workdir:
    """Creates and writes the files of one experiment run.

    Every file but metrics.jsonl is written atomically (a temporary file, then a rename), so a
    killed run never leaves a half-written record; metrics.jsonl is appended a chunk at a time
    and cut back to the last checkpoint on resume (`truncate_metrics`).
    """

    def __init__(self, path: str | pathlib.Path, checkpoint_seconds: float = 60.0) -> None:
        self.path = pathlib.Path(path)
        self.path.mkdir(parents=True, exist_ok=True)  # figures/ only once a figure is drawn
        self.checkpoint_seconds = checkpoint_seconds  # training state saved at least this often
        self.provenance: dict[str, Any] | None = None  # what ran it (command, versions, git, ...)
        # Where the training state is saved. A process other than 0 of a multi-process run keeps
        # its records in a throw-away folder but reads process 0's checkpoints (on --resume) and
        # writes none (experiments/cli.py).
        self.checkpoints = self.path / "checkpoints"
        self.writes_checkpoints = True
        self._checkpoints_opened = 0
        # what `overwrite` may remove: name -> {"size", "sha256"} once written whole, else None
        self._entries = read_entries(self.path)
        self._metrics_hash: Any = None  # sha256 of metrics.jsonl so far (made on first use)
        self._release: Callable[[], Any] | None = None  # the lock's, while `open` holds it

    @classmethod
    def new(cls, name: str, root: str | pathlib.Path = "runs") -> Workdir:
        """runs/<name>/<UTC time>/ (a suffix keeps two runs in the same second apart)."""
        return cls(new_path(name, root))

    @classmethod
    def open(
        cls,
        path: str | pathlib.Path,
        *,
        overwrite: bool = False,
        resume: bool = False,
        keep_others: bool = False,
        checkpoint_seconds: float = 60.0,
    ) -> Workdir:
        """The workdir at `path` under the workdir policy (`check_path`): a folder with earlier
        records is refused unless `overwrite` (the files its runs wrote are removed first, and
        nothing else: a folder holding files they did not write is refused unless
        `keep_others`) or `resume` (they are kept, metrics.jsonl is cut back to the latest
        checkpoint, and arrays.npz, which the resumed run writes whole again, is removed: a
        stopped program's partial arrays go).

        The returned Workdir holds the workdir's lock (one writer per workdir) until `close()`
        or the process ends; `resume` first verifies what it reads (`check_resumable`)."""
        path = pathlib.Path(path)
        check_path(path, overwrite=overwrite, resume=resume, keep_others=keep_others)
        path.mkdir(parents=True, exist_ok=True)
        descriptor = lock(path)
        try:
            if resume:
                check_resumable(path)
            if overwrite:
                remove_records(path)
            workdir = cls(path, checkpoint_seconds)
            if resume:  # the resumed run writes arrays.npz again, from its first program on
                workdir.truncate_metrics(latest_checkpoint_metrics_bytes(path))
                (path / "arrays.npz").unlink(missing_ok=True)
        except BaseException:
            os.close(descriptor)
            raise
        workdir._release = weakref.finalize(workdir, os.close, descriptor)
        return workdir

    def close(self) -> None:
        """Release the workdir's lock (taken by `open`); the records stay."""
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self) -> Workdir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ records

    def write_config(self, config: Any, provenance: dict[str, Any] | None = None) -> None:
        """config.json: the resolved config, plus (under "provenance") what ran it. A config.json
        is itself a config: `--config=<workdir>/config.json` reruns it (`load_config_json`)."""
        data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        provenance = provenance or self.provenance
        if provenance:
            data = dict(data, provenance=provenance)
        self._write_json("config.json", data)

    def append_metrics(self, rows: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(_jsonable(row)) + "\n" for row in rows).encode()
        self.metrics_sha256()  # the hash of what is there before this chunk
        file = self.file("metrics.jsonl")
        with space_for(file), open(file, "ab") as f:  # one write per chunk of rows (a resume
            f.write(data)  # cuts what a full disk left of one back to the checkpoint)
            f.flush()
        self._metrics_hash.update(data)

    def metrics_sha256(self) -> str:
        """The sha256 of metrics.jsonl as it is (a checkpoint keeps it with the file's size)."""
        if self._metrics_hash is None:
            file = self.path / "metrics.jsonl"
            self._metrics_hash = sha256_of(file) if file.exists() else hashlib.sha256()
        return self._metrics_hash.hexdigest()

    def metrics_bytes(self) -> int:
        file = self.path / "metrics.jsonl"
        return file.stat().st_size if file.exists() else 0

    def truncate_metrics(self, size: int) -> None:
        """Keep the first `size` bytes of metrics.jsonl (the rows up to a checkpoint)."""
        file = self.path / "metrics.jsonl"
        if file.exists() and file.stat().st_size > size:
            with open(file, "r+") as f:
                f.truncate(size)
        self._metrics_hash = None

    def save_arrays(self, **arrays: Any) -> None:
        """Write arrays.npz, keeping arrays saved earlier (in this run) under other names."""
        file = self.file("arrays.npz")
        merged = {}
        if file.exists():
            with np.load(file) as saved:  # closed: a leaked handle is a ResourceWarning
                merged = dict(saved)
        merged.update({k: np.asarray(v) for k, v in arrays.items()})
        with atomic(file, "wb") as f:
            np.savez_compressed(f, **merged)
        self.seal("arrays.npz")

    def write_summary(self, claims: list[Claim], **extra: Any) -> dict[str, Any]:
        """summary.json of a complete run: its status, the claims with their verdicts (the
        claim fields only when there are claims), and `extra`."""
        paper = [c for c in claims if c.kind == "paper"]
        checks = [c for c in claims if c.kind == "sanity"]
        tallies = {
            "claims": [dict(dataclasses.asdict(c), verdict=c.verdict) for c in paper],
            "reproduced": sum(c.passed for c in paper),
            "total": len(paper),
            "sanity_checks": [dict(dataclasses.asdict(c), verdict=c.verdict) for c in checks],
            "sanity_passed": sum(c.passed for c in checks),
        }
        summary = {"status": "complete", **(tallies if claims else {}), **extra}
        summary = _jsonable(summary)
        self._write_json("summary.json", summary)
        return summary

    def finish(
        self,
        claims: list[Claim],
        progress: Callable[[str], object] | None = print,
        where: str = "",
        **extra: Any,
    ) -> dict[str, Any]:
        """The end of a run: summary.json (`write_summary`), then the claims and the records'
        folder (with `where`, e.g. a file to look at) through `progress` (None: silent)."""
        summary = self.write_summary(claims, **extra)
        if progress and claims:
            progress(format_claims(claims))
        if progress:
            progress(f"records: {self.path}{where}")
        return summary

    def read_summary(self) -> dict[str, Any]:
        """summary.json as written (e.g. what an experiment module's run returns)."""
        with open(self.path / "summary.json") as f:
            return json.load(f)

    def write_status(self, status: str, **extra: Any) -> dict[str, Any]:
        """summary.json of a run that did not complete: its status ("interrupted",
        "stopped at a non-finite loss", "failed") and where (step, message, how to resume)."""
        summary = _jsonable({"status": status, **extra})
        self._write_json("summary.json", summary)
        return summary

    def save_table(self, name: str, rows: list[dict[str, Any]]) -> pathlib.Path:
        """<name>.csv, one row per dict (columns: the union of keys, in first-seen order), for
        `pandas.read_csv`; nested values are written as JSON."""
        columns = list(dict.fromkeys(key for row in rows for key in row))
        path = self.file(f"{name}.csv")
        with atomic(path, "w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {
                        k: (
                            json.dumps(_jsonable(v))
                            if isinstance(v, (dict, list, tuple))
                            else _jsonable(v)
                        )
                        for k, v in row.items()
                    }
                )
        self.seal(f"{name}.csv")
        return path

    def write_text(self, name: str, text: str) -> pathlib.Path:
        """A plain-text report next to the records (e.g. Hessian descriptions)."""
        path = self.file(name)
        with atomic(path, "w") as f:
            f.write(text + "\n")
        self.seal(name)
        return path

    def figure_path(self, name: str) -> pathlib.Path:
        """figures/<name>.png (the folder is made here, so a run without figures has none)."""
        (self.path / "figures").mkdir(exist_ok=True)
        return self.file(f"figures/{name}.png")

    def file(self, name: str) -> pathlib.Path:
        """The path of the record `name` (relative to the workdir), entered in manifest.json
        before anything writes it: `overwrite` removes the files the manifest lists, no other."""
        if name not in self._entries:
            self._entries[name] = None
            self._write_manifest()
        return self.path / name

    def seal(self, *names: str, gone: str = "") -> None:
        """Enter the size and sha256 of the records `names`, now written whole, in manifest.json
        (and drop the entries under the folder `gone` whose files no longer exist)."""
        if gone:
            for name in [n for n in self._entries if n.startswith(gone + "/")]:
                if not (self.path / name).exists():
                    del self._entries[name]
        for name in names:
            file = self.path / name
            self._entries[name] = {
                "size": file.stat().st_size,
                "sha256": sha256_of(file).hexdigest(),
            }
        self._write_manifest()

    def _write_manifest(self) -> None:
        with atomic(self.path / MANIFEST, "w") as f:
            json.dump({"format": 2, "files": dict(sorted(self._entries.items()))}, f, indent=0)
            f.write("\n")

    def next_checkpoint(self) -> Checkpoint:
        """The checkpoint of the next training program of this run (cell0, cell1, ... in the
        order the experiment trains them, which a resumed run repeats)."""
        index, self._checkpoints_opened = self._checkpoints_opened, self._checkpoints_opened + 1
        written = None
        if self.writes_checkpoints and self.checkpoints.parent == self.path:
            self.file(f"{self.checkpoints.name}/cell{index}")  # the folder: what the library
            # writes there (CHECKPOINT_FILE, CHECKPOINT_STEP), never a file of anyone else's

            def written(files: list[pathlib.Path]) -> None:  # a save's, the old one's gone
                cell = f"{self.checkpoints.name}/cell{index}"
                self.seal(*(p.relative_to(self.path).as_posix() for p in files), gone=cell)

        return Checkpoint(
            self.checkpoints / f"cell{index}", writable=self.writes_checkpoints, written=written
        )

    def _write_json(self, name: str, data: Any) -> None:
        with atomic(self.file(name), "w") as f:
            json.dump(_jsonable(data), f, indent=2)
            f.write("\n")
        self.seal(name)


def new_path(name: str, root: str | pathlib.Path = "runs") -> pathlib.Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = pathlib.Path(root) / name / stamp
    integrity.check_name_lengths(path, "config.name")
    suffix = 1
    while path.exists():
        path, suffix = pathlib.Path(root) / name / f"{stamp}-{suffix}", suffix + 1
    return path


def check_path(
    path: str | pathlib.Path,
    *,
    overwrite: bool = False,
    resume: bool = False,
    keep_others: bool = False,
) -> None:
    """Raise WorkdirError (one sentence) unless `path` can take this run's records, creating
    nothing: it must not be a file, its first existing ancestor must be writable, a folder
    with earlier records needs `overwrite` or `resume` (and `resume` needs such a folder), and
    `overwrite` needs a folder holding nothing but what earlier runs wrote (or `keep_others`)."""
    path = pathlib.Path(path)
    if overwrite and resume:
        raise WorkdirError("--overwrite and --resume exclude each other: pick one.")
    integrity.check_name_lengths(path, "--workdir")
    if path.exists() and not path.is_dir():
        raise WorkdirError(f"--workdir={path} is a file, not a folder: give a folder path.")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise WorkdirError(f"--workdir={path} lies under the file {existing}: give a folder path.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise WorkdirError(f"--workdir={path} cannot be written ({existing} is not writable).")
    if path.is_dir():
        check_free(path)
    if resume and not has_records(path):
        raise WorkdirError(f"--resume: {path} holds no records of an earlier run to resume.")
    if has_records(path) and not (overwrite or resume):
        raise WorkdirError(
            f"--workdir={path} already holds the records of an earlier run: pass "
            "--resume to continue it or --overwrite to start over."
        )
    if overwrite and not keep_others and has_records(path) and (foreign := others(path)):
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if foreign[5:] else "")
        raise WorkdirError(
            f"--overwrite: {path} also holds files no run wrote ({shown}); --overwrite removes "
            "only what runs wrote, so move those files or pass --keep_others to keep them there."
        )


def load(path: str | pathlib.Path, cell: int | None = None) -> RunResult:
    """The `RunResult` of a finished run from its workdir (arrays.npz), from the CLI or a script:
    `result.point(run, loss, step=s)` and `result.params_at(s, run)` work on it as on the
    returned one. A run of several programs names each one's arrays "cell<i>_": pass `cell`."""
    file, summary = pathlib.Path(path) / "arrays.npz", pathlib.Path(path) / "summary.json"
    status = read_summary_json(summary) if summary.is_file() else {}  # its seconds too
    arrays = read_npz(file) if file.is_file() else {}
    cells = sorted({int(k[4:].split("_")[0]) for k in arrays if re.match(r"cell\d+_", k)})
    prefix = f"cell{cell}_" if cells else ""
    if f"{prefix}hparam_names" not in arrays and status.get("status", "complete") != "complete":
        said = {"interrupted": "was interrupted", "running": "is running (or was killed)"}
        raise ValueError(
            f"{path}: the run {said.get(status['status'], status['status'])}"
            + (f" at step {status['step']}" if "step" in status else "")
            + ", so it holds no result to load, only its metrics.jsonl rows up to then "
            "(pandas.read_json(path, lines=True))."
        )
    if not file.is_file():
        raise FileNotFoundError(f"{path} holds no arrays.npz: give the workdir of a finished run.")
    if (cell is None and cells) or (cell is not None and cell not in (cells or [0])):
        raise ValueError(f"cell = {cell}: {path} holds the programs (cells) {cells or [0]}.")
    recorded = status.get("seconds", {})
    seconds = [np.nan if cells else recorded.get(k, np.nan) for k in ("compile", "run")]
    return RunResult.from_arrays(arrays, prefix, seconds)


def require_same_config(stored: dict, given: dict, workdir: str) -> None:
    """Raise WorkdirError (one sentence naming the field) unless the config a resume was given
    (its --config, or the stored one with overrides) is the stored one: a resume never changes a
    hyperparameter, nor train.num_steps."""
    a = config_lib.flatten(json.loads(json.dumps(_jsonable(stored))))
    b = config_lib.flatten(json.loads(json.dumps(_jsonable(given))))
    for field in sorted(set(a) | set(b)):
        if a.get(field) != b.get(field):
            raise WorkdirError(
                f"--resume: config.{field} = {config_lib.shown(b.get(field))} differs from the "
                f"run in {workdir} ({config_lib.shown(a.get(field))}); a resume never changes "
                "its config: resume without overrides, or start over with --overwrite."
            )


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


def _jsonable(value: Any) -> Any:
    """numpy scalars/arrays to Python; NaN/inf to None so the files stay valid JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


# ----------------------------------------------------------------------------- provenance


class MetricsRecorder:
    """Streams metrics.jsonl rows (one per run per snapshot step) while a run goes on."""

    def __init__(
        self,
        workdir: Any,
        hparams: dict[str, np.ndarray],
        seeds: np.ndarray,
        log_every: int,
        num_runs: int,
        tags: dict[str, Any],
    ) -> None:
        self.workdir, self.log_every, self.tags = workdir, log_every, tags
        self.hparams = {k: np.asarray(v)[:num_runs] for k, v in hparams.items()}
        self.seeds = seeds[:num_runs]

    def write_rows(
        self,
        first_step: int,
        loss: np.ndarray | None,
        snaps: dict[str, np.ndarray],
        tracked: tuple[dict[str, np.ndarray], int] = ({}, 0),
    ) -> None:
        """The rows of a chunk's snapshots; `tracked`: the tracked metrics (R, S) and their
        cadence, added to the rows of tracked steps."""
        scalars = {k: v for k, v in snaps.items() if np.ndim(v) == 2}  # (R, S), padded R
        values, every = tracked
        num_snaps = (
            next(iter(snaps.values())).shape[1]
            if snaps
            else (1 if loss is None else loss.shape[1] // self.log_every)
        )
        rows = []
        for s in range(num_snaps):
            step = first_step + (0 if loss is None else (s + 1) * self.log_every)
            for r, seed in enumerate(self.seeds):
                row = {"step": int(step), "run": r, "seed": int(seed), **self.tags}
                row.update({k: v[r].item() for k, v in self.hparams.items()})
                if loss is not None:  # batch loss of the last step before this snapshot
                    row["loss"] = float(loss[r, (s + 1) * self.log_every - 1])
                row.update({k: float(v[r, s]) for k, v in scalars.items()})
                if every and step % every == 0:
                    row.update({k: float(v[r, s]) for k, v in values.items()})
                rows.append(row)
        self.workdir.append_metrics(rows)

    def save_partial(self, losses: list[np.ndarray], snaps: list[dict[str, np.ndarray]]) -> None:
        """arrays.npz of a run stopped early: the steps so far, real runs only."""
        n = len(self.seeds)
        self.workdir.save_arrays(
            losses=np.concatenate(losses, axis=1)[:n],
            **{
                f"snapshot_{k}": np.concatenate([s[k] for s in snaps], axis=1)[:n] for k in snaps[0]
            },
        )
