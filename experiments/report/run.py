"""Plan and run the report's configs: one job per distinct resolved config, each run in this
process through the experiment CLI (`experiments.cli.main`), its records in
`<runs>/<scale>/<config name>/` beside a `report.json` (the config's hash, the code version, the
wall time) that `--reuse` reads back."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import pathlib
import shlex
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterable
from typing import Any, cast

import ml_collections

from experiments import cli
from experiments import workers as worker_pool
from experiments.report import catalog
from landscape.engine import config as config_lib
from landscape.engine import overrides as overrides_lib
from landscape.engine import provenance, records

ROOT = pathlib.Path(__file__).resolve().parents[2]
CODE_DIRS = ("landscape",)  # what computes the numbers (configs are in the config hash)
# --quick's programs run a few steps: compiling them is most of their cost, and LLVM's -O0 takes
# about half the time of its default (the same HLO and fusions; only the machine code differs)
QUICK_XLA_FLAGS = "--xla_backend_optimization_level=0"


@dataclasses.dataclass
class Job:
    """One config to run (or reuse) and what became of it."""

    spec: str
    paper: str
    overrides: list[str]  # FIELD=VALUE, applied to the config file's config
    workdir: pathlib.Path
    cfg: ml_collections.ConfigDict | None = None
    config_hash: str = ""
    error: str = ""  # why it cannot run (e.g. its data is missing)
    status: str = "pending"  # pending, reused, complete, failed, not run
    seconds: float | None = None
    message: str = ""
    estimate: float | None = None  # seconds expected (the catalog's, at full size)

    @property
    def command(self) -> str:
        words = [f"--config={self.spec}"] + [f"--config.{o}" for o in self.overrides]
        return f"python -m experiments.{self.paper} " + " ".join(
            shlex.quote(w) if any(c in w for c in " []'\"") else w for w in words
        )

    def summary(self) -> dict[str, Any] | None:
        path = self.workdir / "summary.json"
        return json.loads(path.read_text()) if path.is_file() else None


def experiment_module(paper: str) -> types.ModuleType:
    return importlib.import_module(f"landscape.{paper}.experiment")


def code_version() -> dict[str, Any]:
    """The git commit (and whether the tree differs from it) and a hash of the library's sources:
    records of the same config are reused only under the same `code_hash`."""
    digest = hashlib.sha256()
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    git = provenance.git_commit(ROOT) or {}
    import jax

    return {
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "code_hash": digest.hexdigest()[:12],
        "jax": jax.__version__,
    }


def config_hash(cfg: ml_collections.ConfigDict) -> str:
    """sha256 of the resolved config without its name (two specs that resolve to the same config,
    e.g. a figure and its paper variant at --quick sizes, run once)."""
    data = records._jsonable(cfg.to_dict())
    data.pop("name", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def plan(
    figures: Iterable[catalog.Figure],
    scale: str,
    quick: bool,
    sets: list[str],
    runs_root: pathlib.Path,
) -> dict[str, Job]:
    """The job of every run of `figures` at `scale` (quick: the cpu set, shrunk), keyed by
    `job_key`, each config resolved and validated before anything runs. Runs whose configs
    resolve to the same config share one job."""
    jobs: dict[str, Job] = {}
    by_hash: dict[str, Job] = {}
    folder = runs_root / ("quick" if quick else scale)
    for figure in figures:
        for run in figure.runs_at("cpu" if quick else scale):
            key = job_key(run, quick)
            if key in jobs:
                continue
            overrides = list(catalog.QUICK[run.paper] + run.quick) if quick else []
            job = resolve(run, overrides + list(sets), folder)
            job.estimate = None if quick or run.minutes is None else 60 * run.minutes
            if job.cfg is not None:
                job = by_hash.setdefault(job.config_hash, job)
            jobs[key] = job
    return jobs


def unique(jobs: dict[str, Job]) -> list[Job]:
    return list({id(j): j for j in jobs.values()}.values())


def job_key(run: catalog.Run, quick: bool) -> str:
    return run.spec + (" quick" if quick else "")


def resolve(run: catalog.Run, overrides: list[str], folder: pathlib.Path) -> Job:
    """The run's config with those overrides that name one of its fields (one list serves every
    experiment of a paper), validated; a config that cannot run keeps its reason in `error`."""
    experiment = experiment_module(run.paper)
    schema = config_lib.flatten(experiment.default_config())
    kept = [o for o in overrides if o.partition("=")[0] in schema or o.startswith("sweep.")]
    try:
        data = overrides_lib.load_config(run.spec)
        # an override without "=" is a 1-tuple: apply_overrides' unpacking raises ValueError
        pairs = cast(list[tuple[str, str]], [tuple(o.split("=", 1)) for o in kept])
        cfg, _ = overrides_lib.configured(experiment, data, pairs)
    except (config_lib.ConfigError, ValueError) as error:  # UsageError among them
        name = run.spec.split("/")[-1].replace(".py", "").replace(":", "_")
        return Job(run.spec, run.paper, kept, folder / name, error=" ".join(str(error).split()))
    return Job(run.spec, run.paper, kept, folder / cfg.name, cfg=cfg, config_hash=config_hash(cfg))


def reusable(job: Job, version: dict[str, Any]) -> bool:
    """Complete records of the same config under the same code (and JAX) version."""
    stamp = _read_json(job.workdir / "report.json")
    summary = job.summary()
    return bool(
        stamp
        and summary
        and summary.get("status") == "complete"
        and stamp.get("config_hash") == job.config_hash
        and stamp.get("code_hash") == version["code_hash"]
        and stamp.get("jax") == version["jax"]
    )


def previous_seconds(job: Job) -> float | None:
    """The wall time of this config's last report run, if any (for the time-left estimate)."""
    stamp = _read_json(job.workdir / "report.json")
    if stamp and stamp.get("config_hash") == job.config_hash:
        return stamp.get("seconds")
    return None


def execute(job: Job, version: dict[str, Any]) -> int:
    """Run the job's config through the experiment CLI in this process, its output in
    `<workdir>.log`; returns the CLI's exit status (130: interrupted)."""
    argv = [
        f"python -m experiments.{job.paper}",
        f"--config={job.spec}",
        *[f"--config.{o}" for o in job.overrides],
        f"--workdir={job.workdir}",
        "--overwrite",
    ]
    log = job.workdir.with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    if not ours(log):  # a file of the user's: never replaced
        job.status, job.message = (
            "failed",
            (
                f"{log} was not written by the report (it does not begin with {LOG_HEADER!r}), and "
                "the report writes this run's log there: move that file, then run the report again."
            ),
        )
        return cli.EXIT_USAGE
    started = time.perf_counter()
    with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        print(f"{LOG_HEADER}{job.command}", flush=True)
        try:
            status = cli.main(experiment_module(job.paper), argv)
        except Exception as error:  # noqa: BLE001 -- reported, not raised
            traceback.print_exc()
            status, job.message = cli.EXIT_FAILED, f"{type(error).__name__}: {error}"
    job.seconds = time.perf_counter() - started
    summary = job.summary() or {}
    if status == 0 and summary.get("status") == "complete":
        job.status = "complete"
        stamp = dict(
            version,
            config_hash=job.config_hash,
            seconds=job.seconds,
            command=job.command,
            spec=job.spec,
        )
        try:  # written under the workdir's lock, like the run's records, and sealed
            descriptor = records.lock(job.workdir)
        except records.WorkdirError as error:  # another process took the workdir meanwhile
            job.status, job.message = "failed", str(error)
            return cli.EXIT_USAGE
        try:
            records.Workdir(job.workdir).write_text("report.json", json.dumps(stamp, indent=1))
        finally:
            records.unlock(job.workdir, descriptor)
    else:
        job.status = "failed"
        job.message = job.message or summary.get("message") or _last_line(log)
    return status


LOG_HEADER = "# the report's log of: "  # a run's log begins so: what the report may replace


def ours(log: pathlib.Path) -> bool:
    """Whether the report may write `log`: none there, or a plain file the report wrote."""
    if not os.path.lexists(log):
        return True
    if log.is_symlink() or not log.is_file():
        return False
    with open(log, "rb") as f:
        return f.read(len(LOG_HEADER)) == LOG_HEADER.encode()


def _last_line(path: pathlib.Path) -> str:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _read_json(path: pathlib.Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def backend_of(jobs: list[Job]) -> str:
    """The backends and devices the jobs' records name (their config.json provenance)."""
    seen = []
    for job in jobs:
        config = _read_json(job.workdir / "config.json") if job.status != "not run" else None
        p = (config or {}).get("provenance") or {}
        if p.get("backend"):
            seen.append(f"{p['backend']} ({p['device_count']} devices: {', '.join(p['devices'])})")
    return "; ".join(dict.fromkeys(seen)) or "none ran"


def format_minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def run_all(
    jobs: list[Job],
    reuse: bool,
    version: dict[str, Any],
    workers: int = 1,
    progress: Callable[[str], object] = print,
    xla_flags: str = "",
) -> int:
    """Run (or reuse) every job with one progress line each and the time left. `workers` > 1
    runs that many configs at once, each in its own process (tracing and compiling small
    programs is single-threaded Python), with `xla_flags` added to their XLA_FLAGS. Stops at an
    interruption (status 130) with the jobs
    finished so far."""
    todo = [j for j in jobs if not j.error]
    for job in jobs:
        if job.error:
            job.status, job.message = "not run", job.error
    estimates = {id(j): previous_seconds(j) or j.estimate for j in todo}
    measured: list[tuple[float, float | None]] = []  # (seconds, its earlier estimate)
    width = len(str(len(todo)))
    heads = {id(j): f"[{i:>{width}}/{len(todo)}] {j.paper} {j.spec}" for i, j in enumerate(todo, 1)}
    if reuse:
        for job in todo:
            if reusable(job, version):
                job.status = "reused"
                job.seconds = (_read_json(job.workdir / "report.json") or {}).get("seconds")
                progress(f"{heads[id(job)]}: reused {job.workdir}")
    pending = [j for j in todo if j.status == "pending"]

    def done(job: Job, head: str) -> None:
        assert job.seconds is not None  # set by execute
        measured.append((job.seconds, estimates[id(job)]))
        summary = job.summary() or {}
        outcome = (
            f"{summary.get('reproduced')}/{summary.get('total')} claims reproduced"
            if job.status == "complete"
            else f"FAILED: {job.message}"
        )
        rest = [j for j in pending if j.status == "pending"]
        left = time_left(rest, estimates, measured) / workers
        progress(
            f"{head}{format_minutes(job.seconds)}, {outcome}"
            + (f"; about {format_minutes(left)} left" if rest else "")
        )

    if workers > 1:
        return _run_parallel(
            pending, version, workers, xla_flags, lambda job: done(job, f"{heads[id(job)]}: ")
        )
    for job in pending:
        head = f"{heads[id(job)]} ... "
        if progress is print:  # a terminal: the line starts before the run
            sys.stdout.write(head)
            sys.stdout.flush()
            head = ""
        status = execute(job, version)
        done(job, head)
        if status == cli.EXIT_INTERRUPTED:
            return status
    return 0


def _run_parallel(
    pending: list[Job],
    version: dict[str, Any],
    workers: int,
    xla_flags: str,
    done: Callable[[Job], None],
) -> int:
    """The jobs in `workers` processes, which end with this one (experiments/workers.py): a
    Ctrl-C or SIGTERM here stops them and returns 130 with the jobs finished so far."""
    interrupted = 0
    try:
        with worker_pool.pool(workers, _add_xla_flags, (xla_flags,)) as pool:
            futures = {
                pool.submit(_execute_elsewhere, dataclasses.replace(j, cfg=None), version): j
                for j in pending
            }
            for future in concurrent.futures.as_completed(futures):
                job = futures[future]
                status, job.status, job.seconds, job.message = future.result()
                done(job)
                if status == cli.EXIT_INTERRUPTED:
                    interrupted = status
    except KeyboardInterrupt:  # the workers were stopped on the way out of the pool
        interrupted = cli.EXIT_INTERRUPTED
    return interrupted


def _add_xla_flags(flags: str) -> None:
    """In a worker, before its backend starts (XLA reads XLA_FLAGS then)."""
    if flags:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()


def _execute_elsewhere(job: Job, version: dict[str, Any]) -> tuple[int, str, float | None, str]:
    """`execute` in a worker process: what the parent's Job needs back."""
    status = execute(job, version)
    return status, job.status, job.seconds, job.message


def time_left(
    rest: list[Job], estimates: dict[int, float | None], measured: list[tuple[float, float | None]]
) -> float:
    """The remaining jobs' earlier wall times (or the catalog's), scaled by how this run compares
    with them so far; a job with neither counts as the mean of those measured now."""
    pairs = [(s, e) for s, e in measured if e]
    speed = sum(s for s, _ in pairs) / sum(e for _, e in pairs) if pairs else 1.0
    mean = sum(s for s, _ in measured) / len(measured)
    return sum(speed * e if e else mean for e in (estimates[id(j)] for j in rest))
