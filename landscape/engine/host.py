"""Process-wide settings for scripts, notebooks and the CLIs alike: `setup()`.

The CLIs (experiments/cli.py) and a user's script call the same function, so a sweep computes the
same numbers from both: one CPU device per core (a sweep's runs are sharded over the devices, and
the device count changes float32 rounding), JAX's persistent compilation cache, float32 matmuls
in full float32 (landscape/engine/backend.py), and glibc's allocator kept from trimming XLA's heap.
`current()` is what the latest `setup()` set; records (records.provenance) include it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import logging
import os
import pathlib
import secrets
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import jax

from landscape import _checks
from landscape.engine import backend

DEFAULT_CACHE = "~/.cache/landscape/jax"
# XLA's own caches kept in the compilation cache's folder (jax_persistent_cache_enable_xla_caches:
# "all" adds XLA:GPU's kernel cache, which also changes how LLVM modules are split)
XLA_CACHES = "xla_gpu_per_fusion_autotune_cache_dir"


class BackendUnavailable(RuntimeError):
    """JAX cannot start the backend JAX_PLATFORMS names (one sentence; the CLIs exit 2)."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """What `setup()` set (or found), as recorded in config.json's provenance."""

    backend: str
    device_count: int
    host_devices: int | None  # the CPU device count asked for; None: left as it was
    compilation_cache: str | None
    matmul_precision: str | None
    allocator_tuned: bool
    x64: bool = False
    note: str = ""  # a sentence when something could not be set
    cache_note: str = dataclasses.field(default="", repr=False)  # the cache's part of `note`

    def __str__(self) -> str:
        line = (
            f"landscape.setup: backend {self.backend}, {self.device_count} device(s), "
            f"compilation cache {_home_as_tilde(self.compilation_cache) or 'off'}, float32 matmuls "
            f"{'in full float32' if self.matmul_precision == 'highest' else 'at JAX default'}"
            f"{', float64 allowed' if self.x64 else ''}"
        )
        return line + (f". {self.note}" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        """The fields as recorded (the cache's sentence is in `note`)."""
        fields = dataclasses.asdict(self)
        fields.pop("cache_note")
        return fields


def _home_as_tilde(path: str | None) -> str | None:
    """`path` with the user's home folder written ~ (a printed line shows no user's folder)."""
    home = str(pathlib.Path.home())
    if path and home != "/" and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


_current: Setup | None = None


def current() -> Setup | None:
    """What the latest `setup()` of this process set (None before any)."""
    return _current


def setup(
    host_devices: int | None = None,
    compilation_cache: str | None = DEFAULT_CACHE,
    *,
    float32_matmuls: bool = True,
    x64: bool = False,
    tune_allocator: bool = True,
    before_backend: Callable[[], object] | None = None,
    progress: Callable[[str], object] | None = print,
) -> Setup:
    """Set up this process as the CLIs do, and say what was set (through `progress`).

    host_devices: CPU devices (None: one per usable core, unless XLA_FLAGS or JAX_NUM_CPU_DEVICES
    chose a count). This must come before JAX starts its backend; if it has started already,
    the devices stay as they are and the returned `note` says so. compilation_cache: a folder
    ('' or None: off); a later call moves it, and one that cannot be made or written turns it
    off, said in `note`. before_backend: called after the device count and before the backend
    starts (the CLIs start jax.distributed there). x64: allow float64 arrays (landscape and
    theory checks; training stays in its config's dtype). A backend that JAX_PLATFORMS names
    and this machine lacks raises `BackendUnavailable`, one sentence.
    """
    global _current
    _check_setup(host_devices, compilation_cache, float32_matmuls, x64, tune_allocator)
    for name, function in (("before_backend", before_backend), ("progress", progress)):
        if function is not None and not callable(function):
            raise _checks.ArgumentTypeError(
                f"{name} = {function!r}: must be a function or None, not "
                f"{_checks.type_name(function)}."
            )
    note = ""
    try:
        asked = use_host_devices(host_devices)
    except RuntimeError:
        asked = None
        note = (
            "JAX had already started its backend, so the CPU device count stays as it was "
            "(call landscape.setup() before any JAX computation to get one device per core)."
        )
    if before_backend is not None:
        before_backend()
    _start_backend()
    tuned = tune_allocator and backend.cpu_tuned() and use_tuned_allocator()
    cache, cache_note = compilation_cache_in_use(compilation_cache, progress)
    note = " ".join(part for part in (note, cache_note) if part)
    if float32_matmuls:
        backend.use_float32_matmuls()
    if x64:
        jax.config.update("jax_enable_x64", True)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU" notice
    _current = Setup(
        backend=jax.default_backend(),
        device_count=jax.device_count(),
        host_devices=asked,
        compilation_cache=cache,
        matmul_precision=jax.config.jax_default_matmul_precision,  # type: ignore[attr-defined]  # a flag
        allocator_tuned=bool(tuned),
        x64=bool(jax.config.jax_enable_x64),  # type: ignore[attr-defined]  # a flag
        note=note,
        cache_note=cache_note,
    )
    if progress:
        progress(str(_current))
    return _current


def _start_backend() -> None:
    """JAX's backend started, or one sentence saying which JAX_PLATFORMS it cannot start (JAX
    itself ends in a bare AssertionError when every platform asked for is missing)."""
    try:
        jax.devices()
    except (AssertionError, RuntimeError) as error:
        platforms = jax.config.jax_platforms  # type: ignore[attr-defined]  # a flag
        reason = str(error).split(" (set JAX_PLATFORMS")[0].strip().rstrip(".")
        reason = reason or "no device of that platform is visible to this process"
        asked = f"JAX_PLATFORMS={platforms!r}" if platforms else "JAX's choice"
        raise BackendUnavailable(
            f"landscape.setup: JAX cannot start the backend of {asked} ({reason}): set "
            "JAX_PLATFORMS=cpu, or leave it unset to let JAX choose one this machine has."
        ) from None


def _check_setup(
    host_devices: object,
    compilation_cache: object,
    float32_matmuls: object,
    x64: object,
    tune_allocator: object,
) -> None:
    """setup()'s arguments, each refused with one sentence naming it."""
    if host_devices is not None:
        _checks.check_int("host_devices", host_devices, 1, "CPU devices; None: one per core")
    if compilation_cache is not None and not isinstance(compilation_cache, (str, os.PathLike)):
        raise _checks.ArgumentTypeError(
            f"compilation_cache = {compilation_cache!r}: must be a folder (a string or path), "
            f"or '' or None for no cache, not {_checks.type_name(compilation_cache)}."
        )
    _checks.check_bool("float32_matmuls", float32_matmuls)
    _checks.check_bool("x64", x64, "allow float64 arrays")
    _checks.check_bool("tune_allocator", tune_allocator)


def use_host_devices(count: int | None = None) -> int | None:
    """Give the CPU backend `count` devices (None: one per usable core) so that a sweep's runs,
    sharded over all devices (landscape.engine.sweeps), run on every core at once: XLA's CPU
    fusions use one thread each. Without an explicit count, a device count the user set (XLA_FLAGS'
    --xla_force_host_platform_device_count or JAX_NUM_CPU_DEVICES) is kept and None returned.
    Must run before any JAX computation initialises the backends (jax.config raises then).
    """
    if count is None:
        if (
            "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or "JAX_NUM_CPU_DEVICES" in os.environ
        ):
            return None
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    jax.config.update("jax_num_cpu_devices", count)
    return count


def use_compilation_cache(path: str | None) -> str | None:
    """`compilation_cache_in_use`'s folder (None: off), its sentence left out."""
    return compilation_cache_in_use(path)[0]


def compilation_cache_in_use(
    path: str | os.PathLike | None, progress: Callable[[str], object] | None = None
) -> tuple[str | None, str]:
    """Point JAX's persistent compilation cache at `path` (None or '': off), in this process
    from now on (a second call moves it); returns (the folder in use, a sentence when it is not
    `path`'s). Every program is written, eager operations included (no compile-time or size
    floor), so a second process with the same model compiles nothing; on a GPU, XLA's per-fusion
    autotune results are kept in the same folder (`XLA_CACHES`). A hit is the compiled executable
    itself, so no number changes. Entries are `CheckedCache`'s; a folder that cannot be made or
    written turns the cache off, said in the sentence. A folder set by JAX_COMPILATION_CACHE_DIR
    (e.g. the test suite's) is kept with JAX's own settings and entries."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"], ""
    if not path:
        return _kept_open(None, _turn_cache_off())
    folder = pathlib.Path(path).expanduser()
    unusable = _unusable(folder)
    if unusable:
        in_use, kept = _kept_open(None, _turn_cache_off())
        return in_use, f"No compilation cache: {unusable}." + (f" {kept}" if kept else "")
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no floor
    with contextlib.suppress(AttributeError):  # a JAX without the option keeps its own
        jax.config.update("jax_persistent_cache_enable_xla_caches", XLA_CACHES)
    say = progress or _line_on_stderr
    return _kept_open(str(folder), _install(CheckedCache(folder, say)))


def _kept_open(asked: str | None, installed: bool) -> tuple[str | None, str]:
    """(the folder in use, a sentence if it is not `asked`): where setup could not reopen JAX's
    cache (a JAX without the hooks `_install` uses), one opened already stays in use."""
    in_use = None if installed else _jax_cache_folder()
    if in_use is None or in_use == asked:
        return asked, ""
    return in_use, (
        f"This JAX keeps its compilation cache where it first opened it ({in_use}) for the rest "
        "of the process, so programs still go there."
    )


def _unusable(folder: pathlib.Path) -> str:
    """Why `folder` cannot hold the cache ('' if it can): made if missing, and written in."""
    shown = _home_as_tilde(str(folder))
    if folder.exists() and not folder.is_dir():
        return f"{shown} is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"cannot make the folder {shown} ({error.strerror or error})"
    try:  # a file of our own, removed at once: the folder takes writes
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".landscape-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        return f"cannot write in {shown} ({error.strerror or error})"
    return ""


def _line_on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _turn_cache_off() -> bool:
    """JAX's cache off from now on (False: this JAX keeps one it opened already)."""
    jax.config.update("jax_enable_compilation_cache", False)
    return _install(None)


def _jax_internals() -> Any:
    """JAX's compilation-cache module, or None where its internals are not as expected."""
    try:
        from jax._src import compilation_cache as internals
        from jax.experimental.compilation_cache import compilation_cache as public
    except ImportError:
        return None
    needed = ("_cache", "_cache_initialized", "_cache_initialized_mutex")
    if not all(hasattr(internals, name) for name in needed + ("CacheInterface",)):
        return None
    if not hasattr(public, "reset_cache"):
        return None
    return internals


def _install(cache: CheckedCache | None) -> bool:
    """JAX's cache reset (it is opened once per process) and `cache` put in its place, or left
    to open lazily from the config where `cache` is None; False where JAX has no such hooks."""
    internals = _jax_internals()
    if internals is None:
        return False
    from jax.experimental.compilation_cache import compilation_cache as public

    public.reset_cache()
    if cache is not None:
        with internals._cache_initialized_mutex:
            internals._cache = cache
            internals._cache_initialized = True
    return True


def _jax_cache_folder() -> str | None:
    """The folder JAX's opened cache writes to (None: not opened, or not known)."""
    try:
        from jax._src import compilation_cache as internals
    except ImportError:
        return None
    path = getattr(getattr(internals, "_cache", None), "_path", None)
    return None if path is None else str(path)


class CheckedCache:
    """JAX's persistent compilation cache as the library writes it: each entry a file
    `<key>-landscape` holding a tag, the SHA-256 of its key and bytes, and JAX's bytes, written
    to a temporary file and renamed (a full disk leaves no partial entry; the temporary file is
    removed and the process writes no more there, said in one line). An entry read back is used
    only if it checks out for its key: another program's bytes or a damaged entry are skipped
    (compiled again, the file left as it is), and an empty one, which only a write cut short
    leaves, is removed. Files of other names (JAX's own entries) are never read or touched."""

    TAG = b"landscape compilation cache 1\n"
    SUFFIX = "-landscape"

    def __init__(self, folder: pathlib.Path, say: Callable[[str], object]) -> None:
        self._path = folder
        self.say = say
        self.writes = True

    def entry(self, key: str) -> pathlib.Path:
        return self._path / f"{key}{self.SUFFIX}"

    def digest(self, key: str, value: bytes) -> bytes:
        return hashlib.sha256(key.encode() + b"\0" + value).digest()

    def get(self, key: str) -> bytes | None:
        """JAX's bytes of `key`'s entry, or None (a miss) where it is absent or does not check."""
        path = self.entry(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if not data:
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        head = len(self.TAG) + 32
        value = data[head:]
        if data[: len(self.TAG)] != self.TAG or data[len(self.TAG) : head] != self.digest(
            key, value
        ):
            return None
        return value

    def put(self, key: str, value: bytes) -> None:
        """`key`'s entry written whole (an entry already there is kept, as JAX does)."""
        path = self.entry(key)
        if not self.writes or path.exists():
            return
        temporary = None
        try:  # a name of its own, made here (the umask sets its mode, as for JAX's entries)
            name = self._path / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            temporary = name
            with os.fdopen(handle, "wb") as file:
                write_all(file, self.TAG + self.digest(key, value) + value)
            os.replace(temporary, path)
        except OSError as error:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            self.writes = False
            self.say(
                f"landscape: writing a program to the compilation cache "
                f"{_home_as_tilde(str(self._path))} failed ({error.strerror or error}): this "
                "process writes no more programs there."
            )


def write_all(file: Any, data: bytes) -> None:
    """`data` written to the open `file` (the fault tests replace it)."""
    file.write(data)


def use_tuned_allocator() -> bool:
    """Keep glibc from returning XLA's large temporaries to the OS after every step.

    By default each large buffer is a fresh mmap, so every training step page-faults its
    temporaries in again (~80k faults per GPT step at N = 1024); serving them from a heap that is
    never trimmed halves such steps on CPU. Process-wide, so only entry points call it.
    Returns False where glibc's mallopt is unavailable (nothing changes then).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
    return all(
        libc.mallopt(option, value) == 1
        for option, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**30), (M_ARENA_MAX, 1))
    )
