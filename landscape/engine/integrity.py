"""A workdir's manifest and what it owns: every file the runs wrote there, by its exact path
inside the workdir (with its size and sha256 once written whole), the run's id, and the removal
`--overwrite` does (those paths and nothing else; `--overwrite --force` without a readable
manifest: the files a run writes, recognised by their names), where a workdir may be
(`check_place`) and the code that wrote it (`code_sha256`). `verification` checks them, `lock`
keeps one writer; `records` re-exports what its callers use. docs/guide/records.md."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
from typing import Any

from landscape.engine.checkpoints import ITEM, ORBAX_TMP
from landscape.engine.lock import LOCK
from landscape.engine.writes import WorkdirError

RECORD_FILES = ("config.json", "metrics.jsonl", "arrays.npz", "summary.json")
MANIFEST = "manifest.json"
CHECKPOINTS = "checkpoints"
# A checkpoint folder (checkpoints/cell<i>) holds the library's step folders (<step>/, orbax's
# state in <step>/default) and host records (host-<step>.npz), each listed in the manifest before
# it is written; what a killed write left (.host-<step>.npz.tmp, orbax's temporary folders) is
# recognised by its name.
CHECKPOINT_FOLDER = re.compile(r"checkpoints/cell\d+")
STEP_FOLDER = re.compile(r"checkpoints/cell\d+/\d+")
HOST_FILE = re.compile(r"host-(\d+)\.npz")
KILLED_WRITE = re.compile(r"\.host-\d+\.npz\.tmp")
FORCE = (
    "--overwrite --force removes the files a run writes, recognised by their names, and keeps "
    "the rest"
)
# the start of a manifest `Workdir` writes, recognisable in one a kill or a user garbled
OUR_MANIFEST = re.compile(rb"\s*(\{\s*\"format\"\s*:\s*2\b|\[\s*(\]|\"))")


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


def check_place(path: pathlib.Path, flag: str = "--workdir") -> None:
    """The workdir's place (or the report's, `flag`): a folder (or none yet) under a writable
    folder, no dangling link, and not a folder that holds far more (`_check_not_shared`)."""
    if path.exists() and not path.is_dir():
        raise WorkdirError(f"{flag}={path} is a file, not a folder: give a folder path.")
    _check_not_shared(path, flag)
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise WorkdirError(
                f"{flag}={path}: {existing} is a link to {os.readlink(existing)}, which does "
                "not exist: create that folder, or give another folder."
            )
        existing = existing.parent
    if not existing.is_dir():
        raise WorkdirError(f"{flag}={path} lies under the file {existing}: give a folder path.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise WorkdirError(f"{flag}={path} cannot be written ({existing} is not writable).")


SOURCE_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", "__init__.py")


def _check_not_shared(path: pathlib.Path, flag: str) -> None:
    """Refuse the filesystem's root, a folder right under it (/etc, /home, ...), the home folder
    or one above it, and a source tree (a folder holding .git, pyproject.toml, setup.py or
    __init__.py): records and checkpoints/ would land among files that are not a run's."""
    where = path.resolve()
    home = pathlib.Path.home().resolve()
    if len(where.parts) <= 2 or where == home or where in home.parents:
        what = "the home folder" if where == home else f"{where}, a system folder"
        raise WorkdirError(
            f"{flag}={path} is {what}: records go in a folder of their own, e.g. "
            f"{flag}={where / 'runs' / 'my_run' if where == home else 'runs/my_run'}."
        )
    if where.is_dir() and (marker := next((m for m in SOURCE_MARKERS if (where / m).exists()), "")):
        raise WorkdirError(
            f"{flag}={path} is a source tree (it holds {marker}): records go in a folder of "
            f"their own, e.g. {flag}={path / 'runs' / 'my_run'}."
        )


def has_records(path: str | pathlib.Path) -> bool:
    """Whether `path` holds what a run writes and owns: a manifest, or checkpoints (a record
    file without a manifest listing it is someone else's, e.g. a model folder's config.json)."""
    path = pathlib.Path(path)
    return path.is_dir() and any(os.path.lexists(path / n) for n in (MANIFEST, CHECKPOINTS))


def read_manifest(path: str | pathlib.Path) -> list[str]:
    """The files (and checkpoint folders) the runs in `path` wrote, relative to it; without a
    manifest, none."""
    return list(read_entries(path))


def in_the_way(path: str | pathlib.Path, entries: dict[str, Any] | None = None) -> list[str]:
    """The files at the paths every run writes (its four records) that no run of `path`'s
    manifest (or `entries`) wrote: a run never replaces them. Reading the manifest refuses one
    that is not a run's."""
    path = pathlib.Path(path)
    entries = read_entries(path) if entries is None else entries
    return [n for n in RECORD_FILES if os.path.lexists(path / n) and n not in entries]


def foreign_sentence(path: pathlib.Path, name: str, then: str = "run again") -> str:
    """The one sentence for a file no run wrote where one writes `name`: it is never removed or
    replaced, so it must move (no flag would write over it)."""
    return (
        f"{path / name} was not written by a run of this workdir (its manifest.json does not "
        f"list it), and a run writes its own {name} there: move that file out of {path} (it is "
        f"never removed or replaced), then {then}."
    )


def _ours(path: pathlib.Path) -> bool:
    """Whether manifest.json in `path` is one a run wrote (read whole, or recognisable)."""
    try:
        with open(path / MANIFEST, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return OUR_MANIFEST.match(head) is not None


def check_forcible(path: pathlib.Path) -> None:
    """`--overwrite --force` (files recognised by their names) only where a manifest a run
    wrote stands, unreadable: elsewhere those names may be someone else's files."""
    if not _ours(path):
        raise WorkdirError(
            f"--force: {path} holds no manifest a run wrote, so its config.json and the like may "
            "be someone else's files: nothing was removed; give another --workdir."
        )


def read_entries(path: str | pathlib.Path) -> dict[str, dict[str, Any] | None]:
    """manifest.json's entries: name -> {"size", "sha256"} of a file written whole, or None
    (a file still growing, a folder). Raises WorkdirError (one sentence) for a manifest that is
    not ours or names a path outside the workdir."""
    return read_manifest_data(path)[0]


def read_manifest_data(path: str | pathlib.Path) -> tuple[dict[str, dict[str, Any] | None], str]:
    """(manifest.json's entries, the id of the run that wrote them, "" if it names none)."""
    path = pathlib.Path(path)
    try:
        with open(path / MANIFEST) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}, ""  # nothing there is a run's: not even a config.json
    except (OSError, ValueError):
        raise WorkdirError(
            f"{path / MANIFEST} cannot be read: it is not a landscape manifest ({FORCE})."
            if _ours(path)
            else f"{path / MANIFEST} is not a landscape manifest (someone else's file, or "
            "damaged past recognising): move it out of the folder, or give another --workdir."
        ) from None
    if isinstance(data, dict) and data.get("format") == 2 and isinstance(data.get("files"), dict):
        entries, run = data["files"], data.get("run", "")
    elif isinstance(data, list):  # the first format: the names alone
        entries, run = dict.fromkeys(data), ""
    else:
        raise WorkdirError(_not_ours(path))
    for name, entry in entries.items():
        if not (isinstance(name, str) and (entry is None or isinstance(entry, dict))):
            raise WorkdirError(_not_ours(path))
        _check_inside(path, name)
    return entries, str(run) if isinstance(run, str) else ""


def _not_ours(path: pathlib.Path) -> str:
    if _ours(path):
        return f"{path / MANIFEST} is not a landscape manifest ({FORCE})."
    return (
        f"{path / MANIFEST} is not a landscape manifest (someone else's file): move it out of "
        "the folder, or give another --workdir."
    )


@functools.cache
def code_sha256() -> str:
    """The sha256 of the library's sources (landscape/**/*.py, their paths and bytes), once a
    process: the code that writes a record, kept in its manifest and its provenance."""
    root = pathlib.Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        digest.update(file.relative_to(root.parent).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def read_code(path: str | pathlib.Path) -> list[str]:
    """The code versions (`code_sha256`) that wrote the records in `path`, oldest first; [] for
    a manifest from before records kept them (or none)."""
    try:
        data = json.loads((pathlib.Path(path) / MANIFEST).read_text())
    except (OSError, ValueError):
        return []
    code = data.get("code") if isinstance(data, dict) else None
    return [c for c in code if isinstance(c, str)] if isinstance(code, list) else []


def check_code(path: pathlib.Path, other_code: bool = False) -> None:
    """Raise WorkdirError (one sentence) when the records in `path` were written by code other
    than this process's, unless `other_code` (a resume under other code, which the records then
    show): one record never mixes two code versions unsaid."""
    code, now = read_code(path), code_sha256()
    if other_code or (code and code[-1] == now):
        return
    git = ""
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        commit = json.loads((path / "config.json").read_text())["provenance"]["git"]["commit"]
        git = f", at git commit {commit[:12]}"
    known = code and code[-1] != "unknown"
    wrote = f"code {code[-1][:12]}" if known else "code from before records kept its version"
    raise WorkdirError(
        f"--resume: the run in {path} was written by other code ({wrote}{git}; the library's "
        f"sources are now {now[:12]}), so continuing would mix two code versions in one "
        "record: resume under the code that wrote it, or pass --other_code to continue under "
        "this code (its records then say so)."
    )


def _check_inside(path: pathlib.Path, name: str) -> None:
    """Refuse a manifest entry that could reach outside the workdir (absolute, `..`, through a
    link): overwrite removes the files the manifest names, so it must name ours only."""
    parts = pathlib.PurePosixPath(name).parts
    inside = bool(parts) and not name.startswith(("/", "\\")) and "\\" not in name
    inside = inside and ".." not in parts and not pathlib.PureWindowsPath(name).drive
    if inside:  # a file's folder inside (a link in the file's place is that file's problem,
        # `misplaced`: never followed); a checkpoint folder itself inside, as it is walked
        folder = CHECKPOINT_FOLDER.fullmatch(name) or STEP_FOLDER.fullmatch(name)
        with contextlib.suppress(OSError):
            target = path / name if folder else (path / name).parent
            inside = target.resolve().is_relative_to(path.resolve())
    if not inside:
        raise WorkdirError(
            f"{path / MANIFEST} names {_shown(name)}, a path outside the workdir: it is not a "
            f"landscape manifest, so nothing was removed ({FORCE})."
        )


def sealed_steps(entries: dict[str, Any], cell: str) -> list[int]:
    """The steps of the checkpoint folder `cell` whose save the manifest seals (its host
    records entered with their size and sha256, which happens once the whole step is written)."""
    steps = []
    for name, entry in entries.items():
        folder, _, file = name.rpartition("/")
        if folder == cell and (match := HOST_FILE.fullmatch(file)) and isinstance(entry, dict):
            steps.append(int(match.group(1)))
    return sorted(steps)


def checkpoint_cells(entries: dict[str, Any]) -> list[str]:
    """The checkpoint folders the manifest lists, in the order of their programs."""
    cells = [n for n in entries if CHECKPOINT_FOLDER.fullmatch(n)]
    return sorted(cells, key=lambda n: int(n.rpartition("cell")[2]))


def _owned(path: pathlib.Path, entries: dict[str, Any]) -> tuple[set[str], set[str], set[str]]:
    """(the files the runs in `path` wrote, by exact relative path; the folders wholly theirs
    (orbax's inside a step folder they listed, a killed save's temporary ones); the folders they
    made, removed once empty)."""
    folders = {n for n in entries if CHECKPOINT_FOLDER.fullmatch(n) or STEP_FOLDER.fullmatch(n)}
    owned = {n for n in entries if n not in folders} | {MANIFEST, LOCK}
    owned |= {
        str(pathlib.PurePosixPath(n).with_name(f".{pathlib.PurePosixPath(n).name}.tmp"))
        for n in owned
    }  # what a killed atomic write left
    trees = set()
    for folder in folders:
        children = sorted((path / folder).iterdir()) if (path / folder).is_dir() else []
        for child in children:
            if child.is_symlink():
                continue
            name, step = child.name, STEP_FOLDER.fullmatch(folder) is not None
            if child.is_dir() and (ORBAX_TMP.fullmatch(name) or (step and name == ITEM)):
                trees.add(f"{folder}/{name}")
            elif child.is_file() and (
                KILLED_WRITE.fullmatch(name) or (step and name == "_CHECKPOINT_METADATA")
            ):
                owned.add(f"{folder}/{name}")
    return owned, trees, folders


def others(path: str | pathlib.Path) -> list[str]:
    """The files (and links) in `path` (relative names) that no run recorded in its manifest
    wrote."""
    path = pathlib.Path(path)
    owned, trees, _ = _owned(path, read_entries(path))
    return _walk_others(path, owned, trees)


def _walk_others(path: pathlib.Path, owned: set[str], trees: set[str]) -> list[str]:
    found = []
    for root, dirs, files in os.walk(path):
        relative = pathlib.Path(root).relative_to(path)
        links = [d for d in dirs if (pathlib.Path(root) / d).is_symlink()]
        dirs[:] = sorted(
            d for d in dirs if d not in links and (relative / d).as_posix() not in trees | owned
        )
        found += [(relative / name).as_posix() for name in sorted(files + links)]
    return [name for name in found if name not in owned]


def remove_records(path: str | pathlib.Path, force: bool = False) -> None:
    """Remove what the runs in `path` wrote (the files its manifest lists, by exact path, and
    orbax's folders inside the step folders it lists), with their folders once empty, and
    nothing else: never a path outside `path`, never a link, never a file the library did not
    write. `force`: the manifest is not read; the files a run writes are recognised by name."""
    path = pathlib.Path(path)
    if not path.is_dir():
        return
    entries = recognised(path) if force else read_entries(path)  # refuses a manifest naming
    owned, trees, folders = _owned(path, entries)  # a path outside, removing nothing
    for name in sorted(trees):
        shutil.rmtree(path / name)
    for name in sorted(owned - {LOCK}, key=lambda n: n == MANIFEST):  # the manifest last
        target = path / name
        if target.is_symlink() or not target.exists() or target.is_dir():
            continue  # a link or a folder where a file of ours was: not ours to remove
        target.unlink()
    candidates: set[pathlib.PurePosixPath] = set()
    for name in owned | folders | trees:
        candidates |= {*pathlib.PurePosixPath(name).parents[:-1]}
        if name in folders:
            candidates.add(pathlib.PurePosixPath(name))
    for folder in sorted(candidates, key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):  # their folders once empty: figures/, cell0/ ...
            (path / folder).rmdir()


def recognised(path: pathlib.Path) -> dict[str, None]:
    """What a run writes, recognised by name where no manifest says (`--overwrite --force`):
    the four records, the manifest, and in checkpoints/cell<i>/ the host records and the step
    folders that hold orbax's state. Figures, tables and anything else are left alone."""
    entries: dict[str, None] = {n: None for n in (*RECORD_FILES, MANIFEST) if (path / n).exists()}
    root = path / CHECKPOINTS
    cells = sorted(root.iterdir()) if root.is_dir() and not root.is_symlink() else []
    for cell in cells:
        if not (cell.is_dir() and not cell.is_symlink() and re.fullmatch(r"cell\d+", cell.name)):
            continue
        entries[f"{CHECKPOINTS}/{cell.name}"] = None
        for child in sorted(cell.iterdir()):
            if child.is_symlink():
                continue
            name = f"{CHECKPOINTS}/{cell.name}/{child.name}"
            if child.is_file() and HOST_FILE.fullmatch(child.name):
                entries[name] = None
            elif child.is_dir() and child.name.isdigit() and (child / ITEM).is_dir():
                entries[name] = None
    return entries


def foreign_checkpoints(path: pathlib.Path) -> list[str]:
    """The checkpoints in the workdir's checkpoint folders that the manifest does not list
    (host records, step folders holding orbax's state, recognised by name): a new run saves its
    own steps beside them. A user's folder or file that only looks like a step is not one."""
    entries = read_entries(path)
    found = [
        name
        for name in recognised(path)
        if name not in entries and not any(n.startswith(name + "/") for n in entries)
    ]  # a step folder whose files it lists is listed (the layout before step folders were)
    return [n for n in found if n.count("/") == 2 and not CHECKPOINT_FOLDER.fullmatch(n)]


def kind_of(target: pathlib.Path) -> str:
    """What stands at `target` where a record (a plain file) goes, in words."""
    if target.is_symlink():
        return f"a link to {os.readlink(target)}"
    return "a folder" if target.is_dir() else "not a plain file (a device, a pipe or a socket)"


def misplaced(path: pathlib.Path) -> list[str]:
    """The records (listed, or the four a run writes) where a folder, a link (a run never
    writes through one) or anything but a plain file stands in place of the file."""
    try:
        entries = read_entries(path)
    except WorkdirError:
        entries = {}
    names = {n for n in entries if not (CHECKPOINT_FOLDER.fullmatch(n) or STEP_FOLDER.fullmatch(n))}
    found = []
    for name in sorted(names | {*RECORD_FILES, MANIFEST}):
        target = path / name
        if os.path.lexists(target) and (target.is_symlink() or not target.is_file()):
            found.append(name)
    return found


def _shown(text: str, limit: int = 80) -> str:
    """`text` cut to about `limit` characters for a sentence (an error never echoes 100 KB)."""
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"
