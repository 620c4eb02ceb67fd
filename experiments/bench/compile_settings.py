"""Compile and warm run seconds of one HVP and one eigenvalue search (the public probes at the
peers benchmark's MLP, D = 1e6 in the device check) under each XLA setting, every setting and
program in a fresh process: XLA's defaults, autotune level 0, the fusion autotuner off, Triton
GEMMs off, XLA's per-fusion autotune results warm, every program from a warm compilation cache.
The device check's `compile_settings` row; options that do not apply to the backend are skipped
with a note. What it decides: landscape.engine.backend.compiler_options (docs/performance.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any, Protocol

import jax

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = ("hvp", "top5")
CHILD_SECONDS = 240.0  # one process at most (a first top-5 on a GPU took over 45 s of compiling)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One XLA setting: its options (XLA_FLAGS of the process), whether only XLA:GPU reads them,
    and its cache: "" none, "autotune" (a first process leaves XLA's per-fusion autotune results
    in a fresh folder, executables not kept) or "programs" (it leaves every program)."""

    name: str
    what: str
    options: dict[str, bool | int] = dataclasses.field(default_factory=dict)
    gpu_only: bool = False
    cache: str = ""


SETTINGS = (
    Setting("default", "XLA's defaults"),
    Setting("autotune_level_0", "no autotuning", {"xla_gpu_autotune_level": 0}, True),
    Setting(
        "fusion_autotuner_off",
        "the fusion emitters' autotuner off",
        {"xla_gpu_experimental_enable_fusion_autotuner": False},
        True,
    ),
    Setting("triton_gemm_off", "Triton GEMMs off", {"xla_gpu_enable_triton_gemm": False}, True),
    Setting("autotune_cache", "XLA's per-fusion autotune results warm", {}, True, "autotune"),
    Setting("compilation_cache", "every program from the compilation cache", {}, False, "programs"),
)


def chosen(names: list[str] | None) -> tuple[Setting, ...]:
    """The settings named, in SETTINGS' order (None or empty: all); an unknown name is refused."""
    if not names:
        return SETTINGS
    known = [s.name for s in SETTINGS]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"compile settings {unknown}: must be among {', '.join(known)}.")
    return tuple(s for s in SETTINGS if s.name in names)


class Check(Protocol):
    """What the device check's state gives a row (device_check.Check)."""

    scratch: pathlib.Path
    env: dict[str, str]

    def left(self) -> float: ...

    def add(self, name: str, **fields: Any) -> None: ...


def xla_flags(options: dict[str, bool | int]) -> str:
    """The options as XLA_FLAGS words (`--name=value`, booleans as true/false)."""
    words = []
    for name, value in options.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        words.append(f"--{name}={text}")
    return " ".join(words)


def measure(
    check: Check,
    size: int,
    programs: tuple[str, ...] = PROGRAMS,
    settings: tuple[Setting, ...] = SETTINGS,
) -> None:
    """Every setting for each program (every HVP first), each in fresh processes; a setting that
    this backend does not read is skipped with a note, a process that fails or overruns noted."""
    platform = jax.default_backend()
    for setting in settings:
        if setting.gpu_only and platform != "gpu":
            note = f"an XLA:GPU setting; this backend is {platform}"
            check.add(f"compile_settings:{setting.name}", what=setting.what, skipped=note)
    for program in programs:
        for setting in settings:
            if not (setting.gpu_only and platform != "gpu"):
                _measure_setting(check, setting, program, size)


def _measure_setting(check: Check, setting: Setting, program: str, size: int) -> None:
    """One setting's rows for one program: with a cache, the first process (cold, filling a fresh
    folder) and the second (warm); otherwise one process."""
    folder = check.scratch / f"compile_settings_{setting.name}_{program}"
    runs = ["cold", "warm"] if setting.cache else [""]
    for suffix in runs:
        name = f"compile_settings:{setting.name}{'_' + suffix if suffix else ''}:{program}"
        if check.left() < 10:
            check.add(name, skipped=f"{max(check.left(), 0):.0f} s left")
            continue
        args = [program, str(size), setting.cache, str(folder)]
        code = f"from experiments.bench import compile_settings as c; c.child(*{args!r})"
        try:
            row = _run_child(check, code, setting.options)
        except subprocess.TimeoutExpired as stopped:
            row = dict(stopped=f"after {stopped.timeout:.0f} s")
        except (RuntimeError, ValueError, IndexError) as failed:  # a crash, or no JSON line
            row = dict(failed=f"{type(failed).__name__}: {str(failed)[-600:]}")
        check.add(name, setting=setting.name, program=program, **row)


def _run_child(check: Check, code: str, options: dict[str, bool | int]) -> dict[str, Any]:
    """`python -c code` in a fresh process with the options in XLA_FLAGS and no compilation cache
    of the environment's; its JSON line with the process's wall seconds."""
    env = {
        k: v
        for k, v in check.env.items()
        if k not in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    }
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags(options)}".strip()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=max(1.0, min(CHILD_SECONDS, check.left())),
    )
    if done.returncode:
        raise RuntimeError(
            f"exit status {done.returncode}: ...{(done.stdout + done.stderr)[-1500:]}"
        )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return dict(wall_seconds=round(time.perf_counter() - start, 2), **row)


# ----------------------------------------------------------------------------- the child


def child(program: str, size: str, cache: str, folder: str) -> None:
    """Time `program`'s first call (its XLA compiles and cache loads counted) and a call at a new
    point of the same model; print one JSON line. `cache`: as `Setting.cache`."""
    from experiments.bench import peers, peers_data
    from experiments.bench.timing import counting_compiles
    from landscape.engine import backend

    _use_cache(cache, folder)
    backend.use_float32_matmuls()  # as the peers benchmark
    hidden = peers_data.hidden_for(int(size))
    point = peers.mlp_point(peers_data.mlp_arrays(hidden))
    other = point.with_params(peers.mlp_point(peers_data.mlp_arrays(hidden, seed=1)).params)
    call = _program(program, point.num_params)
    with counting_compiles() as first:
        start = time.perf_counter()
        call(point)
        first_seconds = time.perf_counter() - start
    with counting_compiles() as warm:
        start = time.perf_counter()
        call(other)
        warm_seconds = time.perf_counter() - start
    row = dict(
        D=point.num_params,
        first_seconds=round(first_seconds, 3),
        compile_seconds=first.as_dict()["xla_seconds"],
        compiled=first.compiled,
        loaded=first.loaded,
        run_seconds=round(warm_seconds, 4),
        warm_compiled=warm.compiled,
    )
    accepted = per_program_options()
    print(json.dumps(dict(row, per_program=accepted) if accepted else row), flush=True)


def _program(program: str, dim: int) -> Any:
    """The public probe a program stands for, as a call on a point that waits for its answer."""
    import numpy as np

    import landscape

    if program == "hvp":
        v = np.random.default_rng(2).standard_normal(dim).astype(np.float32)
        return lambda point: landscape.hvp_flat(point)[1](v).block_until_ready()
    if program == "top5":
        return lambda point: (
            landscape.eigenpairs(point, 5, "largest", dense_below=0, progress=None).values
        )
    raise ValueError(f"program {program!r}: must be one of {PROGRAMS}.")


def _use_cache(cache: str, folder: str) -> None:
    """ "programs": the compilation cache as landscape.setup keeps it; "autotune": the same folder
    for XLA's per-fusion autotune results, no executable written (each process compiles)."""
    from landscape.engine import host

    if cache == "programs":
        host.use_compilation_cache(folder)
    elif cache == "autotune":
        host.use_compilation_cache(folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)


def per_program_options() -> str:
    """Whether this process's XLA_FLAGS options are accepted per program too, by
    `jax.jit(f).lower(...).compile(compiler_options=...)` ("" when it has none)."""
    options: dict[str, Any] = {}
    for word in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = word.removeprefix("--").partition("=")
        if name.startswith("xla_gpu_"):
            options[name] = {"true": True, "false": False}.get(value, value)
    if not options:
        return ""
    try:
        jax.jit(lambda x: 2 * x).lower(1.0).compile(compiler_options=options)
    except Exception as refused:  # any refusal, in its own words
        return f"refused: {str(refused)[:200]}"
    return "accepted"


# ----------------------------------------------------------------------------- the table


COLUMNS = (
    "setting",
    "program",
    "D",
    "first call s",
    "XLA s in it",
    "compiled / loaded",
    "warm call s (new point)",
    "note",
)


def table(rows: list[dict[str, Any]]) -> str:
    """The compile_settings rows of a device check as a markdown table for docs/performance.md."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        if not row["row"].startswith("compile_settings:"):
            continue
        _, setting, *program = row["row"].split(":")
        note = row.get("skipped") or row.get("stopped") or row.get("failed") or ""
        if row.get("per_program"):
            note = f"{note}; per program: {row['per_program']}".strip("; ")
        if row.get("warm_compiled"):
            note = f"{note}; {row['warm_compiled']} compiled at the new point".strip("; ")
        cells = [
            setting,
            program[0] if program else "",
            row.get("D", ""),
            row.get("first_seconds", ""),
            row.get("compile_seconds", ""),
            f"{row['compiled']} / {row['loaded']}" if "compiled" in row else "",
            row.get("run_seconds", ""),
            str(note).replace("|", "/").replace("\n", " "),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
