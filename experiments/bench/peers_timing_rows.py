"""The peers benchmark's rows: a child's measurement (, ), the parent's plan, its
comparison of the answers and its table (). They read the peers.* flags, which
experiments/bench/peers_timing.py (the child's command line) defines."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from absl import app, flags

from experiments.bench import peers_data
from experiments.bench.peers_torch import Curvlinops, PyHessian

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEERS = {  # the modules each framework's rows need beside numpy
    "pyhessian": ("torch", "pyhessian"),
    "curvlinops": ("torch", "curvlinops"),
    "check": ("torch",),
}
STACKS = {  # what each framework's process imports before its data: its memory after imports
    "ours": ("jax", "landscape"),
    "eigsh": ("jax", "landscape", "scipy.sparse.linalg"),
    "pyhessian": ("torch", "pyhessian"),
    "curvlinops": ("torch", "curvlinops", "scipy.sparse.linalg"),
}
OURS_ONLY = ("top1_rtol", "top5_rtol")
NOT_IN = {  # probes a peer is not asked for (PyHessian has no Gauss-Newton matrix)
    "curvlinops": ("slq",),
    "pyhessian": ("ggn_top5", "ggn_trace"),
}
ONLY_IN = {"eigsh": ("top1", "top5")}  # ARPACK's top-k over our products, nothing else
WIKITEXT_PROBES = ("top5", "top5_rtol", "trace")
# the CPU variant (the valid split's 12,000 types, D = 5.05e6) and the paper's (WikiText-2's
# train split, 33,278 types, D = 1.36e7); one batch of 20 x 35 targets, as the paper trains
WIKITEXT_SIZES: dict[str, dict[str, Any]] = {
    "wikitext": {"vocab": 12_000, "batch": 20},
    "wikitext_paper": {"vocab": 33_278, "batch": 20, "real": False},
}


def _flag(name: str) -> Any:
    """The value of --peers.<name> (defined in peers_timing.py)."""
    return getattr(flags.FLAGS, f"peers.{name}")


def _data_folder() -> str | None:
    """The folder of the arrays the parent wrote (--peers.data); None in-process (drawn here)."""
    return _flag("data") if flags.FLAGS.is_parsed() else None


def _mb(kilobytes: float) -> float:
    return round(kilobytes / 1024, 1)


def _rss_mb(field: str = "VmHWM") -> float:
    """The process's peak resident memory so far ("VmHWM"), or its resident memory now
    ("VmRSS"), from /proc/self/status in kB: ru_maxrss (elsewhere) carries the parent's
    resident memory at the fork over an exec into the child, so a child lighter than the
    benchmark's parent would read the parent's."""
    status = pathlib.Path("/proc/self/status")
    lines = status.read_text().splitlines() if status.exists() else []
    found = [line.split()[1] for line in lines if line.startswith(field + ":")]
    return _mb(float(found[0]) if found else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class Ours:
    """Our probes at the MLP's (or the WikiText model's) Point."""

    def __init__(self, size: str, device: str, data: str | None = None) -> None:
        import jax

        from experiments.bench import peers
        from landscape.engine import backend

        backend.use_float32_matmuls()  # as torch's float32 (no TF32 on a GPU)
        self.jax = jax
        if size in WIKITEXT_SIZES:
            self.point, self.corpus = peers.wikitext_point(**WIKITEXT_SIZES[size])
            leaves, self.treedef = jax.tree.flatten(self.point.params)
            rng = np.random.default_rng(1)
            self.directions = [
                jax.tree.unflatten(self.treedef, [rng.standard_normal(x.shape) for x in leaves])
                for _ in range(6)
            ]
        else:
            arrays = peers_data.load(size, data)
            self.point = peers.mlp_point(arrays)
            self.directions = [peers_data.direction(arrays, seed) for seed in range(1, 7)]
        self.dim = self.point.num_params

    def setup(self) -> None:
        import landscape

        self.hvp = landscape.hvp(self.point)

    def run(self, probe: str, i: int = 0) -> dict[str, Any]:
        import landscape

        if probe == "hvp":
            v = self.jax.tree.map(
                lambda a, p: np.asarray(a, p.dtype), self.directions[i], self.point.params
            )  # numpy: an eager jnp conversion would compile a program of its own
            hv = self.hvp(v)
            pairs = zip(self.jax.tree.leaves(v), self.jax.tree.leaves(hv), strict=True)
            return {"vHv": sum(float(np.sum(a * np.asarray(b))) for a, b in pairs)}
        if probe.startswith("top"):
            k = int(probe[3])
            tol = _flag("rtol") if probe.endswith("_rtol") else None  # None: the certified default
            found = landscape.eigenpairs(
                self.point, k, "largest", dense_below=0, progress=None, rtol=tol
            )
            more = _counts(found)
            return peers_data.eigen_answer(found.values, found.residuals, **more)
        if probe == "trace":
            t = landscape.trace(self.point, num_probes=100, method="hutchinson")
            return {"trace": t.value, "stderr": t.stderr}
        if probe == "slq":
            d = landscape.spectral_density(self.point, num_probes=8, num_iters=30)
            return peers_data.slq_answer(self.dim, d.nodes, d.weights)
        if probe == "ggn_top5":
            found = landscape.eigenpairs(
                self.point, 5, "largest", dense_below=0, progress=None, matrix="ggn"
            )
            more = _counts(found)
            return peers_data.eigen_answer(found.values, found.residuals, **more)
        if probe == "ggn_trace":
            t = landscape.trace(self.point, num_probes=100, method="hutchinson", matrix="ggn")
            return {"trace": t.value, "stderr": t.stderr}
        if probe == "stream_trace":
            t = landscape.trace(
                self._streamed(), num_probes=100, method="hutchinson", progress=None
            )
            return {"trace": t.value, "stderr": t.stderr}
        if probe == "stream_top5":
            found = landscape.eigenpairs(
                self._streamed(), 5, "largest", dense_below=0, progress=None
            )
            more = _counts(found)
            return peers_data.eigen_answer(found.values, found.residuals, **more)
        raise ValueError(f"unknown probe {probe}")

    def _streamed(self) -> Any:
        """The point over its 512 examples as STREAMED_BATCHES batches, streamed."""
        import landscape
        from experiments.bench import peers

        x, y = (np.asarray(a) for a in self.point.inputs)
        parts = zip(
            np.split(x, peers_data.STREAMED_BATCHES),
            np.split(y, peers_data.STREAMED_BATCHES),
            strict=True,
        )
        return landscape.Point(
            self.point.params, objective=peers.mlp_objective,
            batches=landscape.stream(list(parts), chunk=peers_data.STREAMED_BATCHES),
        )  # fmt: skip

    def check(self, probe: str, answer: dict[str, Any]) -> dict[str, Any]:
        return {}

    def device_peak_mb(self) -> float | None:
        stats = self.jax.devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else round(peak / 2**20, 1)


class Eigsh(Ours):
    """scipy's eigsh (ARPACK: which="LA", tol=1e-5, ncv=20) over our `hvp_flat`, products
    counted: the standard a certified top-k's product count is held to."""

    def setup(self) -> None:
        import landscape

        self.x0, self.matvec = landscape.hvp_flat(self.point)
        self.products = 0

    def _counted(self, v: np.ndarray) -> np.ndarray:
        self.products += 1
        return np.asarray(self.matvec(v), np.float64)

    def run(self, probe: str, i: int = 0) -> dict[str, Any]:
        from scipy.sparse.linalg import LinearOperator, eigsh  # type: ignore[import-untyped]  # no stubs

        dim, start = self.x0.size, self.products
        operator = LinearOperator((dim, dim), matvec=self._counted, dtype=np.float64)
        v0 = np.random.default_rng(0).standard_normal(dim)
        values, vectors = eigsh(operator, k=int(probe[3]), which="LA", tol=1e-5, ncv=20, v0=v0)
        order = np.argsort(values)[::-1]
        self.values, self.vectors = values[order], vectors[:, order]
        return {"values": self.values.tolist(), "num_hvps": self.products - start}

    def check(self, probe: str, answer: dict[str, Any]) -> dict[str, Any]:
        """The residuals ||H v - λ v|| of ARPACK's pairs by a fresh product each (not counted)."""
        residuals = [
            float(np.linalg.norm(np.asarray(self.matvec(v), np.float64) - value * v))
            for value, v in zip(self.values, self.vectors.T, strict=True)
        ]
        return peers_data.eigen_answer(self.values, residuals, num_hvps=answer["num_hvps"])


FRAMEWORKS: dict[str, Callable[..., Any]] = {
    "ours": Ours,
    "eigsh": Eigsh,
    "pyhessian": PyHessian,
    "curvlinops": Curvlinops,
}


def _counts(found: Any) -> dict[str, Any]:
    """An Eigenpairs' products (those of the multiplicity check apart, within them), runs and
    convergence, for its row."""
    return dict(
        num_hvps=found.num_hvps,
        num_hvps_check=found.num_hvps_check,
        runs=found.runs,
        converged=found.converged,
    )


def _compile_listener() -> dict[str, float]:
    """Seconds JAX spends tracing, lowering and compiling, summed by stage as they happen."""
    import jax

    spent = {"trace_lower_seconds": 0.0, "compile_seconds": 0.0}

    def listen(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event.endswith("backend_compile_duration"):
            spent["compile_seconds"] += duration_secs
        elif event.endswith(("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration")):
            spent["trace_lower_seconds"] += duration_secs

    jax.monitoring.register_event_duration_secs_listener(listen)
    return spent


def measure(
    framework: str, size: str, probe: str, threads: str, device: str, warm_below: float
) -> dict[str, Any]:
    """One row: the first call (setup included) and a warm one (a second call, unless the first
    took over `warm_below` seconds; for one HVP the median of 5 more), the peak RSS, the answer
    and its check."""
    if framework not in ("ours", "eigsh"):
        import torch

        torch.set_num_threads(int(threads))
    for module in STACKS[framework]:
        importlib.import_module(module)
    rss_imports_mb = _rss_mb("VmRSS")
    spent = _compile_listener() if framework in ("ours", "eigsh") else None
    runner = FRAMEWORKS[framework](size, device, _data_folder())
    row: dict[str, Any] = {
        "D": runner.dim,
        "rss_imports_mb": rss_imports_mb,
        "rss_ready_mb": _rss_mb("VmRSS"),
    }
    t0 = time.perf_counter()
    runner.setup()
    answer = runner.run(probe)
    row["first_s"] = round(time.perf_counter() - t0, 3)
    if spent is not None:
        row.update({k: round(v, 3) for k, v in spent.items()})
    if row["first_s"] <= warm_below:
        times = []
        for i in range(1, 6 if probe == "hvp" else 2):
            t0 = time.perf_counter()
            answer = runner.run(probe, i if probe == "hvp" else 0)
            times.append(time.perf_counter() - t0)
        row["warm_s"] = round(statistics.median(times), 4)
        if probe == "hvp":
            answer = runner.run(probe, 0)  # the first direction's vHv, compared across frameworks
    else:
        row["warm_s"] = None
        row["note"] = f"no warm call: the first took over {warm_below:g} s"
    row["peak_mb"] = _rss_mb()
    row["device_peak_mb"] = runner.device_peak_mb()
    row.update(answer)
    row.update(runner.check(probe, answer))
    if size in WIKITEXT_SIZES:
        row["corpus"] = runner.corpus
    return row


def dense_reference(size: str) -> dict[str, Any]:
    """The MLP's exact Hessian in float64 (x64): its top 5 eigenvalues (numpy eigvalsh) and
    trace, the reference the probes are judged by."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import landscape
    from experiments.bench import peers

    point = peers.mlp_point(peers_data.load(size, _data_folder()), jax.numpy.float64)
    t0 = time.perf_counter()
    matrix = np.asarray(
        landscape.hessian_at(point, max_dense_dim=point.num_params, progress=None).matrix
    )
    values = np.linalg.eigvalsh(matrix)
    return {
        "D": point.num_params,
        "seconds": round(time.perf_counter() - t0, 2),
        "values": values[::-1][:5].tolist(),
        "trace": float(np.trace(matrix)),
        "lambda_min": float(values[0]),
        "peak_mb": _rss_mb(),
    }


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def child(spec: str) -> None:
    """Run one measurement and print it as one line 'ROW {json}'."""
    framework, size, probe, threads, device = spec.split(":")
    missing = [m for m in PEERS.get(framework, ()) if not _installed(m)]
    row: dict[str, Any]
    if missing:
        row = {"error": f"{', '.join(missing)} not installed (pip install -e '.[peers]')"}
    elif framework == "dense":
        row = dense_reference(size)
    elif framework == "check":
        from experiments.bench import peers

        row = peers.agreement(peers_data.load(size, _data_folder()))
    else:
        row = measure(framework, size, probe, threads, device, _flag("warm_below"))
    print("ROW " + json.dumps(row, default=float), flush=True)


def _child_env() -> dict[str, str]:
    """The parent's environment without a persistent compilation cache (every first call
    compiles), the repository on the path, and no GPU memory preallocated."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def run_child(spec: str, timeout: int, data: pathlib.Path | None = None) -> dict[str, Any]:
    """One child process's row, or a row saying why there is none (timeout, crash); `data`:
    the folder of the arrays every child reads."""
    t0 = time.perf_counter()
    command = [
        sys.executable,
        "-m",
        "experiments.bench.peers_timing",
        f"--peers.one={spec}",
        *([f"--peers.data={data}"] if data else []),
        f"--peers.warm_below={_flag('warm_below')}",
        f"--peers.rtol={_flag('rtol')}",
    ]
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=_child_env(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    wall = round(time.perf_counter() - t0, 2)
    for line in done.stdout.splitlines():
        if line.startswith("ROW "):
            return {**json.loads(line[4:]), "process_wall_s": wall}
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {done.returncode}: {tail[:300]}", "process_wall_s": wall}


def torch_device() -> str:
    """cuda when JAX runs on a GPU and torch sees one, else cpu."""
    import jax

    if jax.default_backend() != "gpu" or not importlib.util.find_spec("torch"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def plan(size: str, probes: list[str], frameworks: list[str], threads: list[str]) -> list[str]:
    """The child specs of one size, framework:size:probe:threads:device without the device:
    the agreement check and (D <= 1e4) the dense reference first, then probe by probe."""
    specs = []
    if size not in WIKITEXT_SIZES and {"pyhessian", "curvlinops"} & set(frameworks):
        specs.append(f"check:{size}:-:all")
    if size in ("1e3", "1e4"):
        specs.append(f"dense:{size}:-:all")
    for probe in probes:
        if size in WIKITEXT_SIZES and probe not in WIKITEXT_PROBES:
            continue
        for framework in frameworks:
            if framework != "ours" and (
                size in WIKITEXT_SIZES or probe in OURS_ONLY or probe in NOT_IN.get(framework, ())
            ):
                continue
            if probe not in ONLY_IN.get(framework, (probe,)):
                continue
            counts = dict.fromkeys(str(os.cpu_count() or 1) if t == "all" else t for t in threads)
            for t in ["all"] if framework in ("ours", "eigsh") else counts:
                specs.append(f"{framework}:{size}:{probe}:{t}")
    return specs


def row_name(spec: str) -> str:
    framework, size, probe, threads = spec.split(":")
    if framework in ("check", "dense"):
        return f"{size}:{framework}"
    label = framework if framework == "ours" else f"{framework}_{threads}t"
    return f"{size}:{probe}:{label}"


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else float("inf")


def _max_rel(values: list[float], reference: list[float]) -> float:
    """The largest relative difference of sorted values against sorted reference values."""
    a, b = sorted(values, reverse=True), sorted(reference, reverse=True)[: len(values)]
    return max(_rel(x, y) for x, y in zip(a, b, strict=True))


def compare(rows: dict[str, dict[str, Any]], size: str) -> dict[str, dict[str, float]]:
    """Each row's answer against ours (the same probe) and the dense Hessian where it exists (not
    for G's rows): relative differences of the sorted eigenvalues, the traces, vHv, the SLQ's
    trace estimate and largest node."""
    hessians = rows.get(f"{size}:dense", {})
    out: dict[str, dict[str, float]] = {}
    for name, row in rows.items():
        parts = name.split(":")
        if len(parts) != 3 or "error" in row:
            continue
        dense = {} if parts[1].startswith("ggn") else hessians  # the reference is H's, not G's
        reference = f"{size}:{parts[1].removesuffix('_rtol')}:ours"
        ours = rows.get(reference, {}) if reference != name else {}
        found: dict[str, float] = {}
        if "values" in row and ours.get("values"):
            found["vs_ours"] = _max_rel(row["values"], ours["values"])
        if "values" in row and dense.get("values"):
            found["vs_dense"] = _max_rel(row["values"], dense["values"])
        for key in ("trace", "vHv", "trace_estimate", "max_node"):
            if key in row and key in ours:
                found[f"{key}_vs_ours"] = _rel(row[key], ours[key])
        if "trace" in row and "trace" in dense:
            found["trace_vs_dense"] = _rel(row["trace"], dense["trace"])
        if "trace_estimate" in row and "trace" in dense:
            found["trace_estimate_vs_dense"] = _rel(row["trace_estimate"], dense["trace"])
        out[name] = found
    return out


def bench_peers(repeats: int, one_by_one: int) -> dict[str, Any]:
    """The peers group of experiments.benchmark: every planned child, row by row, then each
    size's agreement row and the table."""
    del repeats, one_by_one
    from experiments.bench.timing import Rows

    device = torch_device()
    rows = Rows()
    rows["machine"] = {
        "torch_device": device,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    data = pathlib.Path(tempfile.mkdtemp(prefix="peers_data_"))
    for size in _flag("sizes"):
        if size not in (*peers_data.SIZES, *WIKITEXT_SIZES):
            known = ", ".join((*peers_data.SIZES, *WIKITEXT_SIZES))
            raise app.UsageError(f"--peers.sizes={size}: one of {known}")
        if size in peers_data.SIZES:
            peers_data.save(size, data)
        measured: dict[str, dict[str, Any]] = {}
        for spec in plan(size, _flag("probes"), _flag("frameworks"), _flag("threads")):
            missing = [m for m in PEERS.get(spec.split(":")[0], ()) if not _installed(m)]
            measured[row_name(spec)] = rows[row_name(spec)] = (
                {"error": f"{', '.join(missing)} not installed (pip install -e '.[peers]')"}
                if missing
                else run_child(f"{spec}:{device}", _flag("timeout"), data)
            )
        rows[f"{size}:agreement"] = compare(measured, size)
    shutil.rmtree(data)  # the arrays this call wrote, in a folder of its own
    print(table(rows), flush=True)
    return dict(rows)


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def table(rows: dict[str, Any]) -> str:
    """A readable table: per size and probe, each framework's first and warm seconds and peak
    memory, ours over the peer's (x), and the agreement of the answers; the products (ours:
    with those of the multiplicity check apart)."""
    lines = [
        f"{'row':<30} {'first s':>8} {'warm s':>8} {'peak MB':>8} "
        f"{'first x':>7} {'warm x':>7} {'mem x':>6}  agreement, notes"
    ]
    for name, row in rows.items():
        parts = name.split(":")
        if len(parts) != 3 or not isinstance(row, dict):
            continue
        if "error" in row:
            lines.append(f"{name:<30} {row['error']}")
            continue
        ours = rows.get(f"{parts[0]}:{parts[1]}:ours", {}) if parts[2] != "ours" else {}
        ratios = [
            ours[key] / row[key] if ours.get(key) and row.get(key) else None
            for key in ("first_s", "warm_s", "peak_mb")
        ]
        agree = rows.get(f"{parts[0]}:agreement", {}).get(name, {})
        notes = [f"{k} {v:.1e}" for k, v in agree.items()]
        if "max_rel_residual" in row:
            notes.insert(0, f"rel residual {row['max_rel_residual']:.1e}")
        if "num_hvps" in row:  # ours: those of the multiplicity check within them
            check = row.get("num_hvps_check")
            notes.append(f"{row['num_hvps']} HVPs" + (f" ({check} check)" if check else ""))
        if "compile_seconds" in row:
            notes.append(f"compile {row['compile_seconds']:.1f} s")
        lines.append(
            f"{name:<30} {_fmt(row.get('first_s')):>8} {_fmt(row.get('warm_s')):>8} "
            f"{_fmt(row.get('peak_mb'), '.0f'):>8} "
            + " ".join(f"{_fmt(r, '.2f'):>{w}}" for r, w in zip(ratios, (7, 7, 6), strict=True))
            + "  "
            + ", ".join(notes)
        )
    return "\n".join(lines)
