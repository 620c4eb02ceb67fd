"""A run's workdir: the only file I/O of the library.

config.json (the resolved config), metrics.jsonl (one JSON object per run per logged step),
arrays.npz (loss curves, snapshots, final values), summary.json (the status, the paper's claims
and their verdicts), figures/*.png, checkpoints/ (each program's state, for --resume),
manifest.json (every file the runs wrote, sealed with its size and sha256 once written whole,
and the run's id: what `overwrite` may remove and what `verify` checks), .lock (the pid of the
process holding the workdir's lock, while it writes). docs/guide/records.md."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import hashlib
import json
import math
import os
import pathlib
import re
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from landscape.engine import config as config_lib
from landscape.engine import integrity, verification
from landscape.engine import lock as lock_lib
from landscape.engine.checkpoints import Checkpoint, remove_step
from landscape.engine.claims import CLAIM_KINDS as CLAIM_KINDS  # re-exported: records.claim, ...
from landscape.engine.claims import Claim as Claim
from landscape.engine.claims import ClaimFn as ClaimFn
from landscape.engine.claims import claim as claim
from landscape.engine.claims import evaluated as evaluated
from landscape.engine.claims import format_claims as format_claims
from landscape.engine.claims import format_value as format_value
from landscape.engine.claims import sanity as sanity
from landscape.engine.integrity import MANIFEST, has_records, others, remove_records
from landscape.engine.lock import check_free
from landscape.engine.result import RunResult
from landscape.engine.rows import MetricsRecorder as MetricsRecorder  # re-exported
from landscape.engine.verification import check_resumable, read_npz, read_summary_json, sha256_of
from landscape.engine.writes import DiskFullError as DiskFullError  # re-exported
from landscape.engine.writes import WorkdirError as WorkdirError  # re-exported
from landscape.engine.writes import WriteError as WriteError  # re-exported
from landscape.engine.writes import atomic, writes_to

# the workdir's integrity, where callers know it: records.verify, records.lock, ...
LOCK, RECORD_FILES, verify = lock_lib.LOCK, integrity.RECORD_FILES, verification.verify
load_config_json, read_manifest = verification.load_config_json, integrity.read_manifest
paper_config, read_entries = verification.paper_config, integrity.read_entries
paper_of = verification.paper_of  # the paper whose runs have a config's groups
latest_checkpoint_metrics_bytes = verification.metrics_offset  # rows up to the newest checkpoint
lock, unlock = lock_lib.lock, lock_lib.release  # one writer per workdir
check_code, code_sha256 = integrity.check_code, integrity.code_sha256  # the code that wrote it
check_place = integrity.check_place  # where records may go (the report's folders too)


class Workdir:
    """Creates and writes the files of one experiment run.

    Every file but metrics.jsonl is written atomically (a temporary file, then a rename), so a
    killed run never leaves a half-written record; metrics.jsonl is appended a chunk at a time
    and cut back to the last checkpoint on resume (`truncate_metrics`). Every file is entered in
    manifest.json before it is written and sealed (size, sha256) once written whole; a complete
    run seals them all. `resume`: the checkpoints the manifest seals are offered to training
    (a fresh Workdir restores none).
    """

    def __init__(
        self, path: str | pathlib.Path, checkpoint_seconds: float = 60.0, resume: bool = False
    ) -> None:
        check_checkpoint_seconds(checkpoint_seconds)
        self.path = pathlib.Path(path)
        with writes_to(self.path):
            self.path.mkdir(parents=True, exist_ok=True)  # figures/ only once a figure is drawn
        self.checkpoint_seconds = checkpoint_seconds  # training state saved at least this often
        self.provenance: dict[str, Any] | None = None  # what ran it (command, versions, git, ...)
        # Where the training state is saved. A process other than 0 of a multi-process run keeps
        # its records in a throw-away folder but reads process 0's checkpoints (on --resume) and
        # writes none (experiments/running.py: `read_checkpoints_of`).
        self.checkpoints = self.path / "checkpoints"
        self.writes_checkpoints = True
        self.resuming = resume
        self._checkpoints_opened = 0
        # what `overwrite` may remove: name -> {"size", "sha256"} once written whole, else None
        self._entries, run = integrity.read_manifest_data(self.path)
        self.run_id = run or uuid.uuid4().hex  # the run these records and checkpoints belong to
        # the code versions that wrote these records (a resume under other code adds its own)
        fresh = [integrity.code_sha256()]  # "unknown": a manifest from before they were kept
        self.code = (integrity.read_code(self.path) or ["unknown"]) if run else fresh
        self._sealed_source = self._entries  # the manifest sealing the checkpoints read
        self.config_sha256 = ""  # the digest of config.json's config, once written
        self._metrics_hash: Any = None  # sha256 of metrics.jsonl so far (made on first use)
        self._release: Callable[[], Any] | None = None  # the lock's, while `open` holds it
        self._started = False  # a resume's provenance entered in config.json's (once)

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
        force: bool = False,
        checkpoint_seconds: float = 60.0,
        other_code: bool = False,
    ) -> Workdir:
        """The workdir at `path` under the workdir policy (`check_path`): a folder with earlier
        records is refused unless `overwrite` (the files its runs wrote are removed first, and
        nothing else: a folder holding files they did not write is refused unless
        `keep_others`; `force`: without reading the manifest, the files a run writes are
        recognised by name and the rest kept) or `resume` (they are kept, metrics.jsonl is cut
        back to the latest sealed checkpoint, what a killed save left is removed, and
        arrays.npz, which the resumed run writes whole again, is removed).

        The returned Workdir holds the workdir's lock (one writer per workdir) until `close()`
        or the process ends; `resume` first verifies what it reads (`check_resumable`) and the
        code that wrote it (`check_code`: other code only with `other_code`, then recorded)."""
        path = pathlib.Path(path)
        check_path(path, overwrite=overwrite, resume=resume, keep_others=keep_others, force=force)
        with writes_to(path):
            path.mkdir(parents=True, exist_ok=True)
        descriptor = lock(path)
        try:
            if resume:
                check_resumable(path)
                integrity.check_code(path, other_code)
            if overwrite:
                remove_records(path, force=force)
            workdir = cls(path, checkpoint_seconds, resume=resume)
            if resume:  # the resumed run writes arrays.npz again, from its first program on
                if workdir.code[-1:] != [integrity.code_sha256()]:  # other code: recorded
                    workdir.code.append(integrity.code_sha256())
                workdir._prepare_resume()
        except BaseException:
            unlock(path, descriptor)
            raise
        workdir._release = weakref.finalize(workdir, unlock, path, descriptor)
        return workdir

    def _prepare_resume(self) -> None:
        """metrics.jsonl cut back to the newest sealed checkpoint, the steps a killed save left
        (listed, not sealed) removed by their exact paths, arrays.npz removed."""
        self.truncate_metrics(verification.metrics_offset(self.path))
        leftovers = verification.unsealed_steps(self.path)
        for name in leftovers:
            cell, _, last = name.rpartition("/")
            remove_step(self.path / cell, int(last.removeprefix("host-").removesuffix(".npz")))
        if leftovers:
            self.seal(gone=leftovers)
        (self.path / "arrays.npz").unlink(missing_ok=True)

    def close(self) -> None:
        """Release the workdir's lock (taken by `open`; .lock goes); the records stay."""
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self) -> Workdir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_checkpoints_of(self, path: str | pathlib.Path) -> None:
        """Read (never write) the checkpoints of the workdir `path`, as its manifest seals them:
        a process other than 0 resuming a run over several processes."""
        path = pathlib.Path(path)
        self.checkpoints, self.writes_checkpoints, self.resuming = path / "checkpoints", False, True
        self._sealed_source = integrity.read_entries(path)

    # ------------------------------------------------------------------ records

    def write_config(self, config: Any, provenance: dict[str, Any] | None = None) -> None:
        """config.json: the resolved config, plus (under "provenance") what ran it. A config.json
        is itself a config: `--config=<workdir>/config.json` reruns it (`load_config_json`)."""
        data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        self.config_sha256 = verification.config_digest(json.loads(json.dumps(_jsonable(data))))
        provenance = provenance or self.provenance
        if provenance and self.resuming and not self._started:  # every start's, in order
            first = _stored_provenance(self.path / "config.json")
            if first:
                provenance = dict(first, resumes=[*first.get("resumes", []), provenance])
            self.provenance, self._started = provenance, True
        if provenance:
            data = dict(data, provenance=provenance)
        self._write_json("config.json", data)

    def append_metrics(self, rows: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(_jsonable(row)) + "\n" for row in rows).encode()
        self.metrics_sha256()  # the hash of what is there before this chunk
        file = self.file("metrics.jsonl")
        with writes_to(file), open(file, "ab") as f:  # one write per chunk of rows (a resume
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
            self.file("metrics.jsonl")  # no longer sealed: it grows again
            with writes_to(file), open(file, "r+") as f:
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
        self.seal_all()  # first: a kill before summary.json says "complete" leaves "running"
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
        with writes_to(self.path / "figures"):
            (self.path / "figures").mkdir(exist_ok=True)
        return self.file(f"figures/{name}.png")

    def file(self, name: str) -> pathlib.Path:
        """The path of the record `name` (relative to the workdir), entered in manifest.json
        before anything writes it (and no longer sealed, if it was: it is written again):
        `overwrite` removes the files the manifest lists, no other. A file there that the
        manifest does not list is someone else's: WorkdirError (one sentence), never replaced."""
        target = self.path / name
        folder = target.is_dir() and not target.is_symlink()  # what it holds is checked apart
        if name not in self._entries and os.path.lexists(target) and not folder:
            raise WorkdirError(
                integrity.foreign_sentence(self.path, name, "continue the run with --resume")
            )
        if self._entries.get(name, "absent") is not None:
            self._entries[name] = None
            self._write_manifest()
        return self.path / name

    def seal(self, *names: str, gone: Sequence[str] = ()) -> None:
        """Enter the size and sha256 of the records `names`, now written whole, in manifest.json
        (metrics.jsonl with its rows), and drop the entries `gone` (and those under them)."""
        for name in [n for n in self._entries if any(_under(n, g) for g in gone)]:
            del self._entries[name]
        for name in names:
            file = self.path / name
            entry = {"size": file.stat().st_size, "sha256": sha256_of(file).hexdigest()}
            if name == "metrics.jsonl":
                entry["rows"] = file.read_bytes().count(b"\n")
            self._entries[name] = entry
        self._write_manifest()

    def seal_all(self) -> None:
        """Seal every file entered and not sealed yet (metrics.jsonl, the figures): the end of a
        complete run, whose manifest then holds every file's size and sha256."""
        names = [
            n
            for n, entry in self._entries.items()
            if entry is None and not n.startswith("checkpoints/") and (self.path / n).is_file()
        ]
        if names:
            self.seal(*names)

    def _write_manifest(self) -> None:
        files = dict(sorted(self._entries.items()))
        data = {"format": 2, "run": self.run_id, "code": self.code, "files": files}
        with atomic(self.path / MANIFEST, "w") as f:
            json.dump(data, f, indent=0)
            f.write("\n")

    def next_checkpoint(self) -> Checkpoint:
        """The checkpoint of the next training program of this run (cell0, cell1, ... in the
        order the experiment trains them, which a resumed run repeats): on resume, with the
        steps the manifest seals; its saves entered and sealed in this workdir's manifest."""
        index, self._checkpoints_opened = self._checkpoints_opened, self._checkpoints_opened + 1
        cell = f"checkpoints/cell{index}"
        sealed = integrity.sealed_steps(self._sealed_source, cell) if self.resuming else []
        ledger = None
        if self.writes_checkpoints and self.checkpoints.parent == self.path:
            self.file(cell)  # the folder: steps and host records entered by name, by the ledger
            ledger = _Ledger(self)
        stamp = {"run_id": self.run_id, "config_sha256": self.config_sha256}
        return Checkpoint(
            self.checkpoints / f"cell{index}",
            writable=self.writes_checkpoints,
            ledger=ledger,
            sealed=sealed[-1:],
            stamp=stamp,
        )

    def _write_json(self, name: str, data: Any) -> None:
        with atomic(self.file(name), "w") as f:
            json.dump(_jsonable(data), f, indent=2)
            f.write("\n")
        self.seal(name)


class _Ledger:
    """A checkpoint's saves in its workdir's manifest: entered by exact path before they are
    written, sealed once written whole, dropped once removed."""

    def __init__(self, workdir: Workdir) -> None:
        self.workdir = workdir

    def _name(self, path: pathlib.Path) -> str:
        return path.relative_to(self.workdir.path).as_posix()

    def owns(self, path: pathlib.Path) -> bool:
        return self._name(path) in self.workdir._entries

    def enter(self, paths: Sequence[pathlib.Path]) -> None:
        for path in paths:
            self.workdir._entries.setdefault(self._name(path), None)
        self.workdir._write_manifest()

    def seal(self, files: Sequence[pathlib.Path], drop: Sequence[pathlib.Path] = ()) -> None:
        self.workdir.seal(*map(self._name, files), gone=[self._name(p) for p in drop])


def _stored_provenance(file: pathlib.Path) -> dict[str, Any]:
    """The provenance config.json holds (the first start's, with "resumes"), {} without one."""
    with contextlib.suppress(OSError, ValueError):
        stored = json.loads(file.read_text()).get("provenance")
        return stored if isinstance(stored, dict) else {}
    return {}


def _under(name: str, folder: str) -> bool:
    return name == folder or name.startswith(folder + "/")


def check_checkpoint_seconds(value: Any, name: str = "checkpoint_seconds") -> None:
    """Raise WorkdirError (one sentence) unless `value` is a finite number of seconds >= 0: NaN
    compares false with every time, so a run given it never saved a checkpoint."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value >= 0):
        raise WorkdirError(
            f"{name}={value}: give a finite number of seconds >= 0 between checkpoints (0: at "
            "every chunk)."
        )


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
    force: bool = False,
) -> None:
    """Raise WorkdirError (one sentence) unless `path` can take this run's records, creating
    nothing: it must not be a file or a dangling link, its first existing ancestor must be
    writable, no folder may stand where a record goes, a folder with earlier records needs
    `overwrite` or `resume` (and `resume` needs such a folder), and `overwrite` needs a folder
    holding nothing but what earlier runs wrote (or `keep_others`, which still refuses
    checkpoints of another run where this one saves its own; `force`: the manifest unread)."""
    path = pathlib.Path(path)
    if overwrite and resume:
        raise WorkdirError("--overwrite and --resume exclude each other: pick one.")
    if force and not overwrite:
        raise WorkdirError("--force goes with --overwrite (it removes without a manifest).")
    integrity.check_name_lengths(path, "--workdir")
    integrity.check_place(path)
    if path.is_dir():
        check_free(path)
        if misplaced := integrity.misplaced(path):
            raise WorkdirError(
                f"{path / misplaced[0]} is {integrity.kind_of(path / misplaced[0])}, where a run "
                "writes the file of that name: move it out of the workdir, then run again."
            )
        if force:
            integrity.check_forcible(path)
    if resume and not has_records(path):
        raise WorkdirError(f"--resume: {path} holds no records of an earlier run to resume.")
    if has_records(path) and not (overwrite or resume):
        raise WorkdirError(
            f"--workdir={path} already holds the records of an earlier run: pass "
            "--resume to continue it or --overwrite to start over."
        )
    if path.is_dir() and not resume:  # a resume reads its manifest (`check_resumable`)
        entries = integrity.recognised(path) if force else None
        if foreign := integrity.in_the_way(path, entries):
            raise WorkdirError(integrity.foreign_sentence(path, foreign[0]))
    if overwrite and not force and has_records(path):
        _check_overwrite(path, keep_others)


def _check_overwrite(path: pathlib.Path, keep_others: bool) -> None:
    """`overwrite` removes only what runs wrote: refuse other files (unless `keep_others`),
    and checkpoints no run of this manifest wrote where the new run saves its own."""
    foreign = others(path)
    if foreign and not keep_others:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if foreign[5:] else "")
        raise WorkdirError(
            f"--overwrite: {path} also holds files no run wrote ({shown}); --overwrite removes "
            "only what runs wrote, so move those files or pass --keep_others to keep them there."
        )
    if steps := integrity.foreign_checkpoints(path):
        shown = ", ".join(steps[:3]) + (f" and {len(steps) - 3} more" if steps[3:] else "")
        raise WorkdirError(
            f"--overwrite: {path} holds checkpoints that no run of its manifest "
            f"wrote ({shown}), where the new run saves its own: move them out of the workdir "
            "first (they are never removed, nor restored)."
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
