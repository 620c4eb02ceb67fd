"""The device check's rows and the check itself: each row runs in a fresh process within a budget;
the command line, its flags and main: experiments/bench/device_check.py."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import app, flags

from configs import markov as markov_configs
from configs import wikitext as wikitext_configs
from experiments.bench import compile_settings, peers_data
from landscape.engine import backend
from landscape.engine import config as config_lib
from landscape.engine import host as landscape_host
from landscape.markov import experiment as markov
from landscape.scan_snap import text

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROBE_TESTS = (
    "tests/probes/test_curvature.py",
    "tests/core/test_compiled.py",
    "tests/probes/test_spectra.py",
    "tests/probes/test_eigen.py",
    "tests/probes/test_geometry.py",
    "tests/probes/test_gauss_newton.py",
    "tests/probes/test_restrict.py",
)


@dataclasses.dataclass
class Check:
    """A check under way: its deadline, scratch folder, the environment its processes get and
    the rows so far (each printed as it is added)."""

    deadline: float
    scratch: pathlib.Path
    env: dict[str, str]
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def add(self, name: str, **fields: Any) -> None:
        row = {"row": name, **fields}
        self.rows.append(row)
        print(json.dumps(row, default=_plain), flush=True)


@dataclasses.dataclass(frozen=True)
class Row:
    """One row: its name, what it measures, its estimated seconds per backend ("gpu": from the
    issue's H100 and the H200 session; "cpu": 2 cores) and the function that measures it."""

    name: str
    what: str
    estimate: dict[str, float]
    measure: Callable[[Check], None]


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else str(x)


def _run(check: Check, args: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """(wall seconds, output) of `python args` in the repository, stopped at the deadline
    (subprocess.TimeoutExpired); a failure raises RuntimeError with the output's tail."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env or check.env,
        capture_output=True,
        text=True,
        timeout=max(1.0, check.left()),
    )
    output = done.stdout + done.stderr
    if done.returncode:
        raise RuntimeError(f"exit status {done.returncode}: ...{output[-1500:]}")
    return time.perf_counter() - start, output


def _cli(check: Check, module: str, config: str, name: str, *extra: str, cache: str = "") -> dict:
    """Wall, compile and run seconds and the claims' verdicts of one experiment CLI run, with a
    compilation cache of its own (`cache`: a folder name under the scratch folder)."""
    workdir = check.scratch / name
    wall, _ = _run(
        check,
        [
            "-m",
            f"experiments.{module}",
            f"--config={config}",
            f"--workdir={workdir}",
            f"--compilation_cache={check.scratch / (cache or name + '_cache')}",
            *extra,
        ],
    )
    return dict(wall_seconds=round(wall, 2), **_summary_fields(workdir / "summary.json"))


def _summary_fields(path: pathlib.Path) -> dict[str, Any]:
    """Compile and run seconds (summary.json's timing or seconds) and the claims' verdicts."""
    summary = json.loads(path.read_text())
    timing, seconds = summary.get("timing") or {}, summary.get("seconds") or {}
    verdicts = [c.get("verdict") for c in summary.get("claims", [])]
    compile_s = timing.get("compile_seconds", seconds.get("compile"))
    run_s = timing.get("run_seconds", seconds.get("run"))
    return dict(
        compile_seconds=None if compile_s is None else round(compile_s, 3),
        run_seconds=None if run_s is None else round(run_s, 3),
        claims=f"{verdicts.count('reproduced')}/{len(verdicts)} reproduced",
    )


def main_job(check: Check) -> None:
    """configs/syn_small.py cold, then again in a fresh process from the first run's cache."""
    check.add("main_job_cold", **_cli(check, "scan_snap", "configs/syn_small.py", "main_cold"))
    warm = _cli(check, "scan_snap", "configs/syn_small.py", "main_warm", cache="main_cold_cache")
    check.add("main_job_warm", **warm)


def fig6(formulations: str) -> Callable[[Check], None]:
    """Fig. 6's grid (configs/syn_medium.py, 640 runs), cold: `plain` is one padded program for
    the four K (an accelerator's default), `cpu` one program per K."""

    def measure(check: Check) -> None:
        name = f"fig6_grid_{'padded' if formulations == 'plain' else 'per_k'}"
        config = "configs/syn_medium.py"
        check.add(name, **_cli(check, "scan_snap", config, name, f"--formulations={formulations}"))

    return measure


def markov_fig4(check: Check) -> None:
    """The Markov Fig. 4 paper grid (2 programs of 245 runs, N = 128) at 2000 of 8000 steps."""
    steps = 2000
    extra = [f"--config.train.num_steps={steps}", f"--config.train.log_every={steps // 4}"]
    name = f"markov_fig4_{steps}_steps"
    row = _cli(check, "markov", "configs/markov.py:fig4_paper", name, *extra)
    row["ms_per_step"] = round(1e3 * row["run_seconds"] / steps / 2, 2)
    row["grid_minutes_estimate"] = round(2 * 8000 * row["ms_per_step"] / 6e4, 2)
    check.add(name, **row)


def markov_fig4_in_pairs(check: Check) -> None:
    """The issue's baseline: the tied Fig. 4 program in the plain formulations but the CPU's
    groups of 2 runs (a lax.map over 123 groups), 200 steps, in a fresh process."""
    code = "from experiments.bench import device_check as d; d.groups_of_two(200)"
    _, output = _run(check, ["-c", code])
    row = json.loads(next(line for line in output.splitlines() if line.startswith("{")))
    check.add("markov_fig4_200_steps_groups_of_2", **row)


def groups_of_two(steps: int) -> None:
    """Train the tied Fig. 4 program for `steps` steps, plain, as if the device held 2.5 runs
    (groups of 2), the compilation cache off; print its seconds as one JSON line."""
    landscape_host.setup(compilation_cache="", progress=None)
    cfg = markov_configs.get_config("fig4_paper")
    cfg.train.update(num_steps=steps, log_every=steps // 4)
    tied = config_lib.structural_cells(cfg, markov.TRACED)[0]
    per_run = markov.run_bytes(config_lib.with_fields(cfg, tied))
    with backend.tuning("plain", device_bytes=2.5 * per_run / backend.USABLE):
        result = markov.train_group(cfg, tied, progress=None)["result"]
    run = result.run_seconds
    print(
        json.dumps(
            dict(
                runs=result.num_runs,
                cell=str(tied),
                compile_seconds=round(result.compile_seconds, 3),
                run_seconds=round(run, 3),
                ms_per_step=round(1e3 * run / steps, 2),
                grid_minutes_estimate=round(2 * 8000 * run / steps / 60, 2),
            )
        ),
        flush=True,
    )


def ngrams_fig3(check: Check) -> None:
    check.add("ngrams_fig3_paper", **_cli(check, "ngrams", "configs/ngrams.py:fig3_paper", "ng3"))


def wikitext_fig7(check: Check) -> None:
    """Fig. 7 (both depths, 1500 steps) on WikiText-2, or on a synthetic corpus of its size
    where the data is absent (the timings hold, the claims need not)."""
    path = wikitext_configs.get_config("fig7").text.path
    synthetic = bool(text.missing_splits_message(ROOT / path, ("valid", "test")))
    if synthetic:
        path = str(synthetic_corpus(check.scratch / "wikitext"))
    row = _cli(check, "scan_snap", "configs/wikitext.py:fig7", "fig7", f"--config.text.path={path}")
    check.add("wikitext_fig7", corpus="synthetic" if synthetic else "WikiText-2", **row)


def synthetic_corpus(folder: pathlib.Path, vocabulary: int = 12000, seed: int = 0) -> pathlib.Path:
    """valid.txt (217k words) and test.txt (245k) of Zipf-distributed words over `vocabulary`
    types, lines of 60: WikiText-2's valid and test splits' sizes, for timings."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    for split, words in (("valid", 217_000), ("test", 245_000)):
        ids = rng.choice(vocabulary, size=words, p=weights / weights.sum())
        lines = [" ".join(f"w{i}" for i in ids[j : j + 60]) for j in range(0, words, 60)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def streamed(prefix: str, args: list[str], parse: Callable[[str], Any]) -> Callable[[Check], None]:
    """A script whose output lines are rows: parse(line) -> (name, fields) or None, each added
    as `prefix:name` when the script ends (its own timings; the script may take minutes)."""

    def measure(check: Check) -> None:
        wall, output = _run(check, args)
        for line in output.splitlines():
            parsed = parse(line)
            if parsed:
                check.add(f"{prefix}:{parsed[0]}", **parsed[1])
        check.add(f"{prefix}_wall", wall_seconds=round(wall, 2))

    return measure


def _probe_line(line: str) -> tuple[str, dict] | None:
    if not line.startswith("{"):
        return None
    row = json.loads(line)
    return row.pop("row"), row


def _compile_line(line: str) -> tuple[str, dict] | None:
    """A benchmark row ("  name: {json}") of the compile group: its total seconds."""
    name, _, rest = line.strip().partition(": ")
    if not rest.startswith("{"):
        return None
    row = json.loads(rest)
    total = row.get("total") or {}
    return name, dict(seconds=total.get("seconds", row.get("compile_seconds")))


def probe_tests(check: Check) -> None:
    """The probes' tests (pytest, 4 workers), the accelerator's memory allocated as needed."""
    env = dict(check.env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    args = ["-m", "pytest", "-q", "-n", "4", "-p", "no:cacheprovider", *PROBE_TESTS]
    start = time.perf_counter()
    try:
        _, output = _run(check, args, env)
    except RuntimeError as failed:
        output = str(failed)
    check.add(
        "probe_tests",
        wall_seconds=round(time.perf_counter() - start, 2),
        result=output.strip().splitlines()[-1][-200:],
    )


def compile_settings_row(check: Check) -> None:
    """One HVP and one top-5 search at D = 1e6 under each XLA setting (compile_settings.py), or
    those of --compile_settings."""
    parsed = flags.FLAGS.is_parsed() and "compile_settings" in flags.FLAGS
    names = flags.FLAGS["compile_settings"].value if parsed else None
    compile_settings.measure(
        check, peers_data.SIZES["1e6"], settings=compile_settings.chosen(names)
    )


def trap_study(check: Check) -> None:
    """configs/markov.py:trap_gpu: the trap at depth 1 and 2 x three precisions, 50 seeds."""
    row = _cli(check, "markov", "configs/markov.py:trap_gpu", "trap")
    cells = (check.scratch / "trap" / "trap_cells.csv").read_text()
    check.add("markov_trap_gpu", **row, cells=cells)


def rows(trap: bool = False) -> list[Row]:
    """Every row with its estimated seconds (`Row`), the optional trap study last."""
    py = ["-m", "experiments.bench.probe_timing"]
    compile_args = ["-m", "experiments.benchmark", "--only=compile", "--repeats=1"]
    out = [
        Row("main_job", "main job cold / from the cache", {"gpu": 16, "cpu": 16}, main_job),
        Row(
            "fig6_grid_padded",
            "Fig. 6 grid, one padded program",
            {"gpu": 15, "cpu": 65},
            fig6("plain"),
        ),
        Row("fig6_grid_per_k", "Fig. 6 grid, a program per K", {"gpu": 25, "cpu": 40}, fig6("cpu")),
        Row(
            "markov_fig4_200_steps_groups_of_2",
            "Markov Fig. 4 tied program, 200 steps, plain in groups of 2 (the issue's baseline)",
            {"gpu": 20, "cpu": 70},
            markov_fig4_in_pairs,
        ),
        Row(
            "markov_fig4_2000_steps",
            "Markov Fig. 4 paper grid, 2000 of 8000 steps",
            {"gpu": 35, "cpu": 320},
            markov_fig4,
        ),
        Row("ngrams_fig3_paper", "n-grams fig3_paper", {"gpu": 70, "cpu": 720}, ngrams_fig3),
        Row(
            "probes",
            "the probes (probe_timing)",
            {"gpu": 70, "cpu": 260},
            streamed("probe", py, _probe_line),
        ),
        Row(
            "compile",
            "compile rows (benchmark --only=compile)",
            {"gpu": 100, "cpu": 60},
            streamed("compile", compile_args, _compile_line),
        ),
        Row("wikitext_fig7", "WikiText Fig. 7", {"gpu": 91, "cpu": 430}, wikitext_fig7),
        Row("probe_tests", "the probes' tests", {"gpu": 240, "cpu": 200}, probe_tests),
        Row(
            "compile_settings",
            "an HVP and a top-5 at D = 1e6 under each XLA compile setting",
            {"gpu": 420, "cpu": 160},
            compile_settings_row,
        ),
    ]
    if trap:
        out.append(
            Row(
                "markov_trap_gpu",
                "Markov trap_gpu (50 seeds a cell)",
                {"gpu": 190, "cpu": 1500},
                trap_study,
            )
        )
    return out


def device_line() -> tuple[str, str]:
    """(the device in words, "gpu" or "cpu": which estimates apply)."""
    device = jax.local_devices()[0]
    stats = getattr(device, "memory_stats", lambda: None)() or {}
    memory = f", {stats['bytes_limit'] / 1e9:.1f} GB" if "bytes_limit" in stats else ""
    kind = "cpu" if jax.default_backend() == "cpu" else "gpu"
    return (
        f"{device.device_kind} ({jax.default_backend()}, {jax.local_device_count()} "
        f"device(s){memory}), jax {jax.__version__}, {os.cpu_count()} CPU cores"
    ), kind


def check(
    budget: float, out: pathlib.Path, trap: bool = False, chosen: list[Row] | None = None
) -> list[dict[str, Any]]:
    """Run `chosen` (default: every row) fastest first within `budget` seconds; write
    out/rows.json and out/rows.md; return the rows (one per measurement, skip or stop)."""
    env = dict(os.environ)  # the rows' processes: the environment as given
    # this process only names the device: it takes the accelerator's memory as it needs it
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        device, kind = device_line()
    finally:
        os.environ.clear()
        os.environ.update(env)
    print(f"device check on {device}; budget {budget:.0f} s", flush=True)
    ordered = sorted(chosen if chosen is not None else rows(trap), key=lambda r: r.estimate[kind])
    if trap and chosen is None:  # the optional study stays last
        ordered.sort(key=lambda r: r.name == "markov_trap_gpu")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        state = Check(time.perf_counter() + budget, pathlib.Path(scratch), env)
        for row in ordered:
            _measure(state, row, row.estimate[kind])
    write(out, device, budget, state.rows)
    if any(row["row"].startswith("compile_settings:") for row in state.rows):
        (out / "compile_settings.md").write_text(compile_settings.table(state.rows))
    return state.rows


def _measure(state: Check, row: Row, estimate: float) -> None:
    """One row: skipped with a note when its estimate exceeds the time left, stopped at the
    deadline, or a failure noted; the check goes on either way."""
    left = state.left()
    if estimate > left:
        note = f"needs ~{estimate:.0f} s, {max(left, 0):.0f} s left"
        state.add(row.name, what=row.what, skipped=note)
        return
    start = time.perf_counter()
    try:
        row.measure(state)
    except subprocess.TimeoutExpired:
        note = f"at the budget, after {time.perf_counter() - start:.0f} s"
        state.add(row.name, what=row.what, stopped=note)
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        state.add(row.name, what=row.what, failed=str(error)[-600:])


def write(out: pathlib.Path, device: str, budget: float, measured: list[dict]) -> None:
    """rows.json ({device, budget, rows}) and rows.md (a markdown table, the device above)."""
    report = dict(device=device, budget_seconds=budget, rows=measured)
    (out / "rows.json").write_text(json.dumps(report, indent=2, default=_plain) + "\n")
    columns = ("wall_seconds", "compile_seconds", "run_seconds")
    lines = [
        f"Device check on {device} ({time.strftime('%Y-%m-%d')}, budget {budget:.0f} s):",
        "",
        "| row | wall s | compile s | run s | more |",
        "|---|---|---|---|---|",
    ]
    for row in measured:
        cells = [_cell(row.get(c)) for c in columns]
        more = "; ".join(
            f"{k} {_cell(v)}" for k, v in row.items() if k not in ("row", *columns, "cells")
        )
        lines.append(f"| {row['row']} | {' | '.join(cells)} | {more} |")
    (out / "rows.md").write_text("\n".join(lines) + "\n")
    print(f"rows: {out / 'rows.json'}, table: {out / 'rows.md'}", flush=True)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "/").replace("\n", " ")


def chosen_rows(names: list[str] | None) -> list[Row] | None:
    """The rows named (None: every row, the check's own order); an unknown name is refused."""
    if not names:
        return None
    every = rows(trap=True)
    known = [r.name for r in every]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise app.UsageError(
            f"--device_rows={','.join(unknown)}: must be among {', '.join(known)}."
        )
    return [r for r in every if r.name in names]
