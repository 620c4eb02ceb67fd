"""A workdir's integrity: its manifest (every file the runs wrote there, by its exact path
inside the workdir, with its size and sha256 once written whole), the removal `--overwrite` does
(those files and nothing else), the lock of its one writer, and the verification of what a resume
reads (`check_resumable`) and of the whole workdir (`verify`, `python -m experiments.records
check`). `records` re-exports what its callers use. docs/guide/records.md."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import zipfile
from typing import Any

import numpy as np

from landscape.engine.checkpoints import committed_steps

RECORD_FILES = ("config.json", "metrics.jsonl", "arrays.npz", "summary.json")
MANIFEST = "manifest.json"
LOCK = ".lock"
# A checkpoint folder (checkpoints/cell<i>) holds what the library writes there and nothing else
# of ours: the host's records (host-<step>.npz, and what a killed write of one left) and orbax's
# step folders (<step>/, and <step>.orbax-checkpoint-tmp-<time>/ of a killed save).
CHECKPOINT_FOLDER = re.compile(r"checkpoints/cell\d+")
CHECKPOINT_FILE = re.compile(r"host-\d+\.npz|\.host-\d+\.npz\.tmp")
CHECKPOINT_STEP = re.compile(r"\d+|\d+\.orbax-checkpoint-tmp[-\w.]*")


class WorkdirError(ValueError):
    """A workdir cannot be used as asked (a file, not writable, or holding earlier records)."""


def check_name_lengths(path: str | pathlib.Path, argument: str) -> None:
    """Raise WorkdirError naming `argument` when a folder name in `path`, or the whole path, is
    longer than its filesystem takes (which would end in Errno 36 at the first write)."""
    path = pathlib.Path(path).absolute()
    name_max, path_max = 255, 4096
    for folder in path.parents:  # the nearest that exists says what its filesystem takes
        with contextlib.suppress(OSError):
            if folder.is_dir():
                name_max = os.pathconf(folder, "PC_NAME_MAX")
                path_max = os.pathconf(folder, "PC_PATH_MAX")
                break
    long = [part for part in path.parts if len(os.fsencode(part)) > name_max]
    if long:
        raise WorkdirError(
            f"{argument}: the name {long[0][:24]}... is {len(os.fsencode(long[0]))} bytes long, "
            f"more than the {name_max} a file or folder name may have here: choose a shorter one."
        )
    if len(os.fsencode(str(path))) >= path_max:
        raise WorkdirError(
            f"{argument}: the path {str(path)[:24]}... is longer than the {path_max} bytes a "
            "path may have here: choose a shorter one."
        )


def has_records(path: str | pathlib.Path) -> bool:
    path = pathlib.Path(path)
    return path.is_dir() and any((path / name).exists() for name in (*RECORD_FILES, MANIFEST))


def read_manifest(path: str | pathlib.Path) -> list[str]:
    """The files (and checkpoint folders) the runs in `path` wrote, relative to it; a folder
    written before manifests existed owns its four record files alone."""
    return list(read_entries(path))


def read_entries(path: str | pathlib.Path) -> dict[str, dict[str, Any] | None]:
    """manifest.json's entries: name -> {"size", "sha256"} of a file written whole, or None
    (a file still growing, a figure, a checkpoint folder). Raises WorkdirError (one sentence)
    for a manifest that is not ours or names a path outside the workdir."""
    path = pathlib.Path(path)
    try:
        with open(path / MANIFEST) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {name: None for name in RECORD_FILES if (path / name).exists()}
    except (OSError, ValueError):
        raise WorkdirError(
            f"{path / MANIFEST} cannot be read: it is not a landscape manifest."
        ) from None
    if isinstance(data, dict) and data.get("format") == 2 and isinstance(data.get("files"), dict):
        entries = data["files"]
    elif isinstance(data, list):  # the first format: the names alone
        entries = dict.fromkeys(data)
    else:
        raise WorkdirError(f"{path / MANIFEST} is not a landscape manifest (a list of names).")
    for name, entry in entries.items():
        if not (isinstance(name, str) and (entry is None or isinstance(entry, dict))):
            raise WorkdirError(f"{path / MANIFEST} is not a landscape manifest (a list of names).")
        _check_inside(path, name)
    return entries


def _check_inside(path: pathlib.Path, name: str) -> None:
    """Refuse a manifest entry that could reach outside the workdir (absolute, `..`, through a
    link): overwrite removes the files the manifest names, so it must name ours only."""
    parts = pathlib.PurePosixPath(name).parts
    inside = bool(parts) and not name.startswith(("/", "\\")) and "\\" not in name
    inside = inside and ".." not in parts and not pathlib.PureWindowsPath(name).drive
    if inside:
        with contextlib.suppress(OSError):
            inside = (path / name).resolve().is_relative_to(path.resolve())
    if not inside:
        raise WorkdirError(
            f"{path / MANIFEST} names {_shown(name)}, a path outside the workdir: it is not a "
            "landscape manifest, so nothing was removed; delete the workdir's files yourself."
        )


def _owned(path: pathlib.Path) -> tuple[set[str], set[str]]:
    """(the files the runs in `path` wrote, by exact relative path; their checkpoint folders)."""
    entries = read_entries(path)
    folders = {n for n in entries if CHECKPOINT_FOLDER.fullmatch(n)}
    owned = {n for n in entries if n not in folders} | {MANIFEST, LOCK}
    owned |= {
        str(pathlib.PurePosixPath(n).with_name(f".{pathlib.PurePosixPath(n).name}.tmp"))
        for n in owned
    }  # what a killed atomic write left
    for folder in folders:  # the host records and orbax's step folders found there
        children = sorted((path / folder).iterdir()) if (path / folder).is_dir() else []
        for child in children:
            if child.is_symlink():
                continue
            pattern = CHECKPOINT_STEP if child.is_dir() else CHECKPOINT_FILE
            if pattern.fullmatch(child.name):
                owned.add(f"{folder}/{child.name}")
    return owned, folders


def others(path: str | pathlib.Path) -> list[str]:
    """The files in `path` (relative names) that no run recorded in its manifest wrote."""
    path = pathlib.Path(path)
    owned, _ = _owned(path)
    found = []
    for root, dirs, files in os.walk(path):
        relative = pathlib.Path(root).relative_to(path)
        dirs[:] = sorted(d for d in dirs if (relative / d).as_posix() not in owned)
        found += [(relative / f).as_posix() for f in sorted(files)]
    return [name for name in found if name not in owned]


def remove_records(path: str | pathlib.Path) -> None:
    """Remove what the runs in `path` wrote (the files its manifest lists, by exact path, and
    the library's own files in its checkpoint folders), with their folders once empty, and
    nothing else: never a path outside `path`, never a file the library did not write."""
    path = pathlib.Path(path)
    if not path.is_dir():
        return
    owned, folders = _owned(path)  # refuses a manifest naming a path outside, removing nothing
    for name in sorted(owned - {LOCK}, key=lambda n: n == MANIFEST):  # the manifest last
        target = path / name
        if target.is_dir() and not target.is_symlink():
            if str(pathlib.PurePosixPath(name).parent) in folders:  # an orbax step folder
                shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    for name in owned | folders:  # their folders once empty: figures/, checkpoints/cell0/ ...
        for parent in pathlib.PurePosixPath(name).parents[:-1]:
            with contextlib.suppress(OSError):
                (path / parent).rmdir()
    for folder in folders:
        with contextlib.suppress(OSError):
            (path / folder).rmdir()
            (path / folder).parent.rmdir()


def lock(path: str | pathlib.Path) -> int:
    """Take the workdir's lock (fcntl.flock on <workdir>/.lock, which then holds this process's
    id) and return its descriptor, held until closed; the OS releases it when the process ends,
    however it ends. Raises WorkdirError naming the holder's pid if another process holds it."""
    descriptor = os.open(pathlib.Path(path) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise _in_use(path, descriptor) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor


def check_free(path: str | pathlib.Path) -> None:
    """Raise WorkdirError (naming the holder's pid) if a process holds the workdir's lock;
    takes nothing and creates nothing."""
    try:
        descriptor = os.open(pathlib.Path(path) / LOCK, os.O_RDONLY)
    except OSError:  # no lock file: no run has opened this workdir
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        raise _in_use(path, descriptor) from None
    os.close(descriptor)  # closing releases the probe's shared lock


def _in_use(path: str | pathlib.Path, descriptor: int) -> WorkdirError:
    """The sentence for a workdir whose lock another process holds (closes `descriptor`)."""
    holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
    os.close(descriptor)
    return WorkdirError(
        f"--workdir={path} is in use by process {holder} (it holds "
        f"{pathlib.Path(path) / LOCK}): one run writes a workdir at a time, so wait for that "
        "one to end or stop it (a stopped or killed run can then be continued with --resume)."
    )


def verify(path: str | pathlib.Path, resume_only: bool = False) -> list[tuple[str, str | None]]:
    """(file, what is wrong with it or None) for the files of a workdir: each one's size and
    sha256 against manifest.json, config.json, summary.json and .npz files readable, each
    checkpoint folder's latest host records, and metrics.jsonl up to the newest checkpoint's
    offset against the size and sha256 that checkpoint recorded. `resume_only`: what a resume
    reads (config.json, the checkpoints' host records, metrics.jsonl up to the offset)."""
    path = pathlib.Path(path)
    entries = read_entries(path)
    found: list[tuple[str, str | None]] = []
    for name, entry in sorted(entries.items()):
        skip = CHECKPOINT_FOLDER.fullmatch(name) or name.startswith("checkpoints/")
        if not skip and name != "metrics.jsonl" and (name == "config.json" or not resume_only):
            found.append((name, _problem(path, name, entry)))
    offset = None
    for cell in _checkpoint_folders(path):
        steps = committed_steps(cell)
        if not steps:
            continue
        name = cell.joinpath(f"host-{steps[-1]}.npz").relative_to(path).as_posix()
        problem = _problem(path, name, entries.get(name))
        if problem is None:
            host = read_npz(path / name)
            offset = int(host["metrics_bytes"]), str(host.get("metrics_sha256", ""))
        found.append((name, problem))
        step = f"{cell.relative_to(path).as_posix()}/{steps[-1]}/"  # orbax's files of that save
        state = [
            (n, _problem(path, n, e)) for n, e in sorted(entries.items()) if n.startswith(step)
        ]
        bad = [(n, problem) for n, problem in state if problem]
        if state:
            found.append(bad[0] if bad else (f"{step} ({len(state)} files of orbax)", None))
    if offset or not resume_only:
        found.append(("metrics.jsonl", _metrics_problem(path, offset)))
    return found


def check_resumable(path: str | pathlib.Path) -> None:
    """Raise WorkdirError (one sentence: which file is wrong, what to do) unless what a resume
    reads is intact (`verify`)."""
    for name, problem in verify(path, resume_only=True):
        if problem:
            raise WorkdirError(
                f"--resume: {pathlib.Path(path) / name} {problem}, so the run cannot be "
                "continued from it: restore the file from a copy, or start over with --overwrite."
            )


def _checkpoint_folders(path: pathlib.Path) -> list[pathlib.Path]:
    root = path / "checkpoints"
    cells = root.glob("cell*") if root.is_dir() else []
    return [c for _, c in sorted((int(c.name[4:]), c) for c in cells if c.name[4:].isdigit())]


def _problem(path: pathlib.Path, name: str, entry: dict[str, Any] | None) -> str | None:
    """What is wrong with the record `name` (None: nothing found)."""
    file = path / name
    if not file.is_file():
        return "is missing"
    if entry is not None and entry.get("size") is not None:
        size = file.stat().st_size
        if size != entry["size"]:
            return f"holds {size} bytes where manifest.json recorded {entry['size']}"
        if sha256_of(file).hexdigest() != entry.get("sha256"):
            return "differs from the sha256 manifest.json recorded for it"
    try:
        if name == "config.json":
            load_config_json(file)
        elif name.endswith(".json") and name != MANIFEST:
            read_summary_json(file)
        elif name.endswith(".npz"):
            read_npz(file)
    except WorkdirError as error:  # "<file> <what is wrong>: the file is damaged."
        return str(error).removeprefix(f"{file} ").removesuffix(": the file is damaged.")
    return None


def _metrics_problem(path: pathlib.Path, offset: tuple[int, str] | None) -> str | None:
    """What is wrong with metrics.jsonl up to the newest checkpoint's offset (None: nothing)."""
    file = path / "metrics.jsonl"
    size, digest = offset or (0, "")
    if not file.is_file():
        return f"is missing, but the checkpoint recorded its first {size} bytes" if size else None
    with open(file, "rb") as f:
        head = f.read(size)
    if len(head) < size:
        return f"holds {len(head)} bytes, fewer than the {size} the checkpoint recorded"
    if digest and hashlib.sha256(head).hexdigest() != digest:
        return f"differs in its first {size} bytes from what the checkpoint recorded"
    try:
        for line in head.decode().splitlines():
            json.loads(line)
    except ValueError:
        return f"holds bytes that are not UTF-8 JSON rows in its first {size} bytes"
    return None


def load_config_json(path: str | pathlib.Path) -> dict[str, Any]:
    """The config stored in a workdir's config.json, without its provenance."""
    if not pathlib.Path(path).exists():
        raise WorkdirError(f"{path} is missing: the run's config cannot be read.")
    data = _json_object(pathlib.Path(path), "a config")
    data.pop("provenance", None)
    return data


# the config group only each paper's runs have (config.json is the whole resolved config)
PAPER_GROUPS = dict(markov="chain", ngrams="stationarity", recall="flow", scan_snap="theory")


def paper_config(workdir: str | pathlib.Path, paper: str) -> dict[str, Any]:
    """The config.json of a run of `paper` (`python -m experiments.<paper>`); one sentence
    naming the workdir's paper and the function to give it to when it holds another's."""
    config = load_config_json(pathlib.Path(workdir) / "config.json")
    if PAPER_GROUPS[paper] in config:
        return config
    asked = f"landscape.{paper}.trained_point"
    other = next((p for p, group in PAPER_GROUPS.items() if group in config), None)
    if other is not None:
        raise WorkdirError(
            f"workdir {workdir} holds a {other} run: give it to landscape.{other}.trained_point, "
            f"not {asked}."
        )
    raise WorkdirError(
        f"workdir {workdir} holds no paper's run ({asked} reads the workdirs of python -m "
        f"experiments.{paper}): load a sweep's with landscape.records.load(workdir).point(run, "
        "loss)."
    )


def _json_object(file: pathlib.Path, what: str) -> dict[str, Any]:
    """The JSON object in `file`; WorkdirError (one sentence naming the file) otherwise."""
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError) as error:
        raise WorkdirError(
            f"{file} is not valid JSON ({_shown(str(error))}): the file is damaged."
        ) from None
    if not isinstance(data, dict):
        raise WorkdirError(f"{file} does not hold {what} (a JSON object).")
    return data


def read_npz(file: str | pathlib.Path) -> dict[str, np.ndarray]:
    """Every array of an .npz record, read whole; WorkdirError (one sentence naming the file)
    for one that is damaged (truncated, garbled, or holding pickled objects)."""
    with open(file, "rb") as f:  # closed here even when numpy cannot read it
        try:
            with np.load(f, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as error:
            raise WorkdirError(
                f"{file} cannot be read as arrays ({type(error).__name__}: "
                f"{_shown(str(error))}): the file is damaged."
            ) from None


def read_summary_json(file: pathlib.Path) -> dict[str, Any]:
    """A workdir's summary.json; WorkdirError (one sentence naming the file) when damaged."""
    return _json_object(file, "a run's summary")


def sha256_of(file: pathlib.Path) -> Any:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest


def _shown(text: str, limit: int = 80) -> str:
    """`text` cut to about `limit` characters for a sentence (an error never echoes 100 KB)."""
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"
