"""What a workdir's records say against what its manifest sealed: `verify` (every sealed file's
size, sha256 and rows, the checkpoints' steps, run id and config, metrics.jsonl against the
newest checkpoint; `python -m experiments.records check`) and `check_resumable` (what a resume
reads, before it reads it). docs/guide/records.md."""

from __future__ import annotations

import hashlib
import json
import pathlib
import zipfile
from typing import Any

import numpy as np

from landscape.engine import integrity
from landscape.engine import lock as lock_lib
from landscape.engine.integrity import CHECKPOINT_FOLDER, MANIFEST, STEP_FOLDER, sealed_steps
from landscape.engine.writes import WorkdirError

Found = list[tuple[str, str | None]]


def verify(path: str | pathlib.Path, resume_only: bool = False) -> Found:
    """(file, what is wrong with it or None) for the files of a workdir: each sealed file's
    size, sha256 (and rows) against manifest.json, config.json, summary.json and .npz files
    readable, each checkpoint folder's latest sealed step (its host records, run id and config,
    orbax's files), metrics.jsonl up to the newest checkpoint against what that checkpoint
    recorded, and the files no run wrote (noted, not wrong). `resume_only`: what a resume reads
    (config.json, the checkpoints, metrics.jsonl up to the offset)."""
    path = pathlib.Path(path)
    entries, run = integrity.read_manifest_data(path)
    found: Found = []
    for name, entry in sorted(entries.items()):
        checkpoint = CHECKPOINT_FOLDER.fullmatch(name) or name.startswith("checkpoints/")
        if checkpoint or name == "metrics.jsonl" or (resume_only and name != "config.json"):
            continue
        if entry is None and not (path / name).exists() and name != "config.json":
            continue  # entered, not written yet (or the run stopped first): nothing to check
        found.append((name, _problem(path, name, entry)))
    found_checkpoints, offset = _checkpoints(path, entries, run)
    found += found_checkpoints
    sealed = entries.get("metrics.jsonl")
    if isinstance(sealed, dict) and not resume_only:
        found.append(("metrics.jsonl", _problem(path, "metrics.jsonl", sealed)))
    elif offset or not resume_only:
        found.append(("metrics.jsonl", _metrics_problem(path, offset)))
    if not resume_only and _says_complete(path) and _idle(path):  # a complete run sealed
        found = [(n, p or _unsealed(n, entries.get(n, {}))) for n, p in found]
    if not resume_only:
        found += [(f"{name} (no run wrote it)", None) for name in integrity.others(path)]
    return found


def _says_complete(path: pathlib.Path) -> bool:
    try:
        return read_summary_json(path / "summary.json").get("status") == "complete"
    except (OSError, WorkdirError):
        return False


def _idle(path: pathlib.Path) -> bool:
    """No process holds the workdir's lock (a writer unseals a record while it rewrites it)."""
    try:
        lock_lib.check_free(path)
    except WorkdirError:
        return False
    return True


def _unsealed(name: str, entry: dict[str, Any] | None) -> str | None:
    """Wrong in a complete run: a file its manifest does not seal (a kill while the run sealed
    its records, or the file written since). summary.json, written last, is read whole."""
    if entry is not None or name.startswith("checkpoints/") or name == "summary.json":
        return None
    return (
        "is not sealed in manifest.json, though summary.json says the run completed (a kill "
        "while it sealed its records, or written since)"
    )


def check_resumable(path: str | pathlib.Path) -> None:
    """Raise WorkdirError (one sentence: which file is wrong, what to do) unless what a resume
    reads is intact (`verify`) and tied to the records by a manifest."""
    path = pathlib.Path(path)
    if not (path / MANIFEST).exists():
        raise WorkdirError(
            f"--resume: {path} holds no {MANIFEST}, so its checkpoints cannot be tied to its "
            "records (nor its files to a run): start over in another --workdir."
        )
    for name, problem in verify(path, resume_only=True):
        if problem:
            raise WorkdirError(
                f"--resume: {path / name} {problem}, so the run cannot be continued from it: "
                "restore it from a copy, or start over with --overwrite."
            )


def _checkpoints(
    path: pathlib.Path, entries: dict[str, Any], run: str
) -> tuple[Found, tuple[int, str] | None]:
    """The lines of the checkpoint folders' latest sealed steps, and metrics.jsonl's offset
    (size, sha256) at the newest one."""
    found: Found = []
    offset = None
    cells = integrity.checkpoint_cells(entries)
    latest = {cell: sealed_steps(entries, cell) for cell in cells}
    last = max((i for i, cell in enumerate(cells) if latest[cell]), default=-1)
    for i, cell in enumerate(cells):
        if not latest[cell]:
            if i < last:  # rows of this program lie before the later one's offset
                found.append((cell, f"holds no sealed checkpoint, but {cells[last]} after it does"))
            continue
        step = latest[cell][-1]
        host_name = f"{cell}/host-{step}.npz"
        problem = _problem(path, host_name, entries.get(host_name))
        if problem is None:
            host = read_npz(path / host_name)
            problem = _stamp_problem(path, host, run)
            offset = int(host["metrics_bytes"]), str(host.get("metrics_sha256", ""))
        found.append((host_name, problem))
        found.append(_step_line(path, entries, f"{cell}/{step}"))
    return found, offset


def _step_line(path: pathlib.Path, entries: dict[str, Any], step: str) -> tuple[str, str | None]:
    """One line for a sealed step's orbax files: the first one wrong, or how many are intact."""
    if not (path / step).is_dir():
        return f"{step}/", "is missing"
    state = [(n, e) for n, e in sorted(entries.items()) if n.startswith(step + "/")]
    for name, entry in state:
        if problem := _problem(path, name, entry):
            return name, problem
    return f"{step}/ ({len(state)} files of orbax)", None


def _stamp_problem(path: pathlib.Path, host: dict[str, np.ndarray], run: str) -> str | None:
    """Whether a checkpoint belongs to these records: the run id and the config it was saved
    with (checkpoints written before they carried them are taken as they are)."""
    saved_run = str(host.get("run_id", ""))
    if run and saved_run and saved_run != run:
        return f"was saved by another run (run id {saved_run[:12]}, the manifest's is {run[:12]})"
    digest = str(host.get("config_sha256", ""))
    if digest and (path / "config.json").is_file():
        try:
            with_config = config_digest(load_config_json(path / "config.json"))
        except WorkdirError:  # config.json's own line names what is wrong with it
            return None
        if with_config != digest:
            return "was saved by a run of another config than config.json holds"
    return None


def config_digest(config: dict[str, Any]) -> str:
    """The sha256 of a config as JSON (sorted keys), without its provenance."""
    config = {k: v for k, v in config.items() if k != "provenance"}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _problem(path: pathlib.Path, name: str, entry: dict[str, Any] | None) -> str | None:
    """What is wrong with the record `name` (None: nothing found)."""
    file = path / name
    if file.is_symlink() or (file.exists() and not file.is_file()):  # never read through it
        return f"is {integrity.kind_of(file)}, where the run wrote a file"
    if not file.is_file():
        return "is missing"
    if entry is not None and entry.get("size") is not None:
        if (problem := _sealed_problem(file, entry)) is not None:
            return problem
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


def _sealed_problem(file: pathlib.Path, entry: dict[str, Any]) -> str | None:
    size = file.stat().st_size
    if "rows" in entry:
        rows = file.read_bytes().count(b"\n")
        if rows != entry["rows"]:
            return f"holds {rows} rows where manifest.json recorded {entry['rows']}"
    if size != entry["size"]:
        return f"holds {size} bytes where manifest.json recorded {entry['size']}"
    if sha256_of(file).hexdigest() != entry.get("sha256"):
        return "differs from the sha256 manifest.json recorded for it"
    return None


def _metrics_problem(path: pathlib.Path, offset: tuple[int, str] | None) -> str | None:
    """What is wrong with metrics.jsonl up to the newest checkpoint's offset (None: nothing)."""
    file = path / "metrics.jsonl"
    size, digest = offset or (0, "")
    if file.is_symlink() or (file.exists() and not file.is_file()):
        return f"is {integrity.kind_of(file)}, where the run wrote a file"
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


def metrics_offset(path: str | pathlib.Path) -> int:
    """Size of metrics.jsonl at the newest sealed checkpoint of a workdir (0 without one): rows
    past it belong to work a resumed run redoes."""
    path = pathlib.Path(path)
    entries = integrity.read_entries(path)
    for cell in reversed(integrity.checkpoint_cells(entries)):
        if steps := sealed_steps(entries, cell):
            return int(read_npz(path / cell / f"host-{steps[-1]}.npz")["metrics_bytes"])
    return 0


def unsealed_steps(path: pathlib.Path) -> list[str]:
    """The step folders and host records the manifest lists in its checkpoint folders but does
    not seal, or seals for a step older than the latest: what a killed save left, which a
    resume removes (by these exact paths)."""
    entries = integrity.read_entries(path)
    found = []
    for cell in integrity.checkpoint_cells(entries):
        keep = sealed_steps(entries, cell)[-1:]
        for name in entries:
            folder, _, last = name.rpartition("/")
            step = last.removeprefix("host-").removesuffix(".npz")
            if folder == cell and step.isdigit() and int(step) not in keep:
                if STEP_FOLDER.fullmatch(name) or integrity.HOST_FILE.fullmatch(last):
                    found.append(name)
    return sorted(found)


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
    other = paper_of(config)
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


def paper_of(config: dict[str, Any]) -> str | None:
    """The paper whose runs have the config's groups (None: no paper's)."""
    return next((p for p, group in PAPER_GROUPS.items() if group in config), None)


def _json_object(file: pathlib.Path, what: str) -> dict[str, Any]:
    """The JSON object in `file`; WorkdirError (one sentence naming the file) otherwise."""
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError) as error:
        raise WorkdirError(
            f"{file} is not valid JSON ({integrity._shown(str(error))}): the file is damaged."
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
                f"{integrity._shown(str(error))}): the file is damaged."
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
