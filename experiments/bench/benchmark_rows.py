"""The benchmark groups' measurements, one function a group (rows and targets:
docs/design/experiments.md); the command line, its flags and main: bench/benchmark.py."""

import functools
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
import ml_collections
import numpy as np

from configs import syn_medium, syn_small
from experiments.bench import (
    peers_timing_rows,
    sharded_timing,
    track_timing,
    tracker_timing,
    wikitext_timing,
)
from experiments.bench.timing import Rows, best_run_seconds
from landscape.engine import config as config_lib
from landscape.engine import training
from landscape.scan_snap import experiment
from landscape.typing import PyTree

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository


def _train(cfg, seeds, lr_z=None, ratio=None, chunk_steps=None):
    """Train cfg's problem for the given seeds (and optional per-run learning rates)."""
    task = experiment.make_task(cfg)
    R = len(seeds)
    hparams = {
        "optim.lr_z": np.full(R, cfg.optim.lr_z if lr_z is None else lr_z, np.float32),
        "optim.lr_y_over_lr_z": np.full(
            R, cfg.optim.lr_y_over_lr_z if ratio is None else ratio, np.float32
        ),
    }
    return training.train(
        experiment.make_problem(cfg, task),
        cfg.optim,
        hparams,
        seeds,
        num_steps=cfg.train.num_steps,
        log_every=cfg.train.log_every,
        chunk_steps=chunk_steps or cfg.train.num_steps,
        progress=None,
    )


def bench_scan_snap(repeats: int, one_by_one: int) -> dict[str, Any]:
    out = Rows()
    cfg = syn_small.get_config("fig4_left")
    single, compile_s = best_run_seconds(lambda: _train(cfg, [2]), repeats)
    out["syn_small_single_run"] = dict(
        run_seconds=single,
        ms_per_step=1e3 * single / cfg.train.num_steps,
        compile_seconds=compile_s,
        target_seconds=0.3,
        pytorch_seconds=3.5,
        note="100 steps with c_n snapshots every 2 steps, one compiled chunk",
    )

    ten, _ = best_run_seconds(lambda: _train(cfg, list(range(10))), repeats)
    out["seeds_vmap"] = dict(
        ten_seeds_vmapped_seconds=ten,
        ten_single_runs_seconds=10 * single,
        speedup=10 * single / ten,
        note="ratio of 10 single runs to one vmapped program of 10 seeds (run time only)",
    )

    medium = syn_medium.get_config()
    t0 = time.perf_counter()
    per_k = {}
    for fields in experiment.structural_cells(medium):
        _, _, result = experiment.train_group(medium, fields, progress=None)
        per_k[fields["data.num_last"]] = dict(
            compile_seconds=result.compile_seconds,
            run_seconds=result.run_seconds,
            runs=result.num_runs,
        )
    sweep_wall = time.perf_counter() - t0

    one_by_one_total = 0.0
    for num_last, info in per_k.items():
        cell = config_lib.with_fields(medium, {"data.num_last": num_last})
        # Single runs over the grid; only their run time counts (a loop over one cached
        # executable would pay one compilation per K, added once below).
        singles = [
            _train(
                cell,
                [1 + i],
                lr_z=[0.5, 1.0, 2.0, 3.0][i % 4],
                ratio=[1.0, 2.0, 5.0, 10.0][i // 4 % 4],
            )
            for i in range(one_by_one)
        ]
        info["single_run_seconds"] = float(np.median([r.run_seconds for r in singles]))
        info["one_by_one_estimate_seconds"] = (
            singles[0].compile_seconds + info["runs"] * info["single_run_seconds"]
        )
        one_by_one_total += info["one_by_one_estimate_seconds"]
    out["syn_medium_sweep"] = dict(
        wall_seconds_with_compilation=sweep_wall,
        runs=sum(v["runs"] for v in per_k.values()),
        programs=len(per_k),
        per_num_last=per_k,
        target_seconds=60,
        pytorch_seconds=25 * 60,
        one_by_one_estimate_seconds=one_by_one_total,
        speedup_vs_one_by_one=one_by_one_total / sweep_wall,
        note="one-by-one = one compile per K + 160 x the median single-run time "
        f"(measured on {one_by_one} runs per K)",
    )
    return out


def bench_recall(repeats: int, one_by_one: int) -> dict[str, Any]:
    """Gradient flow on the recall model (k = 4, 20 parameters) and the E3 grid as one program."""
    jax.config.update("jax_enable_x64", True)
    from configs import recall
    from landscape.recall import experiment as recall_experiment
    from landscape.recall import flow
    from landscape.recall import model as recall_model

    model = recall_model.from_config(recall.get_config("fig1"))
    params0 = jax.tree.map(
        lambda x: x[None], flow.init_shape(model, 0.02, np.array([1, 0.5, 0.25, 0.1]))
    )
    ts = np.linspace(0.0, 250.0 / 0.02, 4000)[None]
    t0 = time.perf_counter()
    flow.population_flow(model, params0, ts)
    first = time.perf_counter() - t0
    runs = []
    for _ in range(max(repeats, 3)):
        t0 = time.perf_counter()
        flow.population_flow(model, params0, ts)
        runs.append(time.perf_counter() - t0)
    out = Rows()
    out["gradient_flow_single_run"] = dict(
        seconds_after_compilation=min(runs),
        first_call_seconds=first,
        note="eps = 0.02, beta(0) shape (1, .5, .25, .1): all three jumps, tau in [0, 250], "
        "4000 saves, Dopri8 rtol 1e-10",
    )
    cfg = recall.get_config("stages")
    t0 = time.perf_counter()
    recall_experiment.run_flow(cfg, progress=None)
    grid_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    recall_experiment.run_flow(cfg, progress=None)
    out["gradient_flow_stages_grid"] = dict(
        runs=20,
        wall_seconds_with_compilation=grid_wall,
        wall_seconds_cached=time.perf_counter() - t0,
        note="E3: 5 beta shapes x 4 eps as one vmapped program, 8000 saves per run",
    )
    fig1 = recall.get_config("fig1")
    single, compile_s = best_run_seconds(
        lambda: recall_experiment.run_sgd(fig1, {}, None, progress=None)["result"], repeats
    )
    out["sgd_fig1"] = dict(
        run_seconds=single,
        compile_seconds=compile_s,
        seeds=fig1.num_seeds,
        steps=fig1.train.num_steps,
        ms_per_step=1e3 * single / fig1.train.num_steps,
        note="5 seeds vmapped, batch 64 collision vectors, float64",
    )
    return out


def bench_markov(repeats: int, one_by_one: int) -> dict[str, Any]:
    """Attention with Markov: training steps at the authors' default and the small size, and the
    exact Hessian at theta_pi (issue targets: <= 20 ms; <= 0.5 ms per step per run vmapped;
    seconds)."""
    from configs import markov
    from landscape.engine import training
    from landscape.markov import experiment as markov_experiment

    out = Rows()

    def step_time(cfg: ml_collections.ConfigDict, runs: int, steps: int) -> tuple[float, float]:
        cfg.train.update(num_steps=steps, log_every=steps)
        cfg.num_seeds = runs
        timings = [
            markov_experiment.train_group(cfg, {}, progress=None)["result"] for _ in range(repeats)
        ]
        best = min(t.run_seconds for t in timings)
        return 1e3 * best / steps, timings[0].compile_seconds

    gpt = markov.get_config("fig3_gpt")
    gpt.sweep, gpt.variants = {}, []
    gpt.model.update(d=8, seq_len=1024)
    ms, compile_s = step_time(gpt, 1, 200)  # one 64-sequence test snapshot in 200 steps
    out["authors_default_step"] = dict(
        ms_per_step=ms,
        compile_seconds=compile_s,
        target_ms=20,
        pytorch_ms=82,
        batch_devices=len(
            training.batch_devices(markov_experiment.make_problem(gpt), jax.devices())
        ),
        note="GPT-2 blocks with LN + GELU, 1 layer, d = 8, N = 1024, batch 16, AdamW, sampling "
        "included, one run (its batch split over the host devices), one snapshot per 200 "
        "steps",
    )
    small = markov.get_config("fig3")
    small.sweep, small.variants = {}, []
    for runs in (1, 40):
        ms, compile_s = step_time(small, runs, 200)
        out[f"small_size_{runs}_runs"] = dict(
            ms_per_step=ms,
            ms_per_step_per_run=ms / runs,
            compile_seconds=compile_s,
            target_ms_per_step_per_run=0.5,
            pytorch_ms=6.8,
            note="theory model, d = 4, N = 128, batch 16, sampling included",
        )
    per_run = out["small_size_40_runs"]["ms_per_step_per_run"]
    out["fig4_grid_estimate"] = dict(
        runs=49 * 5 * 2,
        steps=8000,
        minutes=49 * 5 * 2 * 8000 * per_run / 1e3 / 60,
        target_minutes=30,
        note="7 x 7 cells x 5 seeds x tied/untied at the 40-run rate",
    )
    jax.config.update("jax_enable_x64", True)
    import landscape

    t0 = time.perf_counter()
    landscape.hessian_at(landscape.markov.theta_pi(p=0.5, q=0.8))
    out["hessian_at_theta_pi"] = dict(
        seconds=time.perf_counter() - t0,
        note="exact, d = 4, N = 10 (1024 sequences), D = 237, compilation included",
    )
    return out


def bench_ngrams(repeats: int, one_by_one: int) -> dict[str, Any]:
    """In-context n-grams, Fig. 3 setting (S = 5, n = 3, T = 32, batch 128, simplified model,
    Adam): ms per training step with sampling, one seed vs 5 seeds vmapped (issue target <= 3 ms
    per step; the authors' JAX code: 19.4 ms, of which 15.4 ms sampling, jitted step 2.6 ms)."""
    from configs import ngrams
    from landscape.ngrams import experiment as ngrams_experiment
    from landscape.ngrams import task as ngrams_task

    out = Rows()
    steps = 512
    for runs, metrics_at in ((1, "current"), (5, "current"), (1, "ema")):
        cfg = ngrams.get_config("fig3")
        cfg.num_seeds = runs
        cfg.train.update(
            num_steps=steps, log_every=steps, test_sequences=128, metrics_at=metrics_at
        )
        timings = [
            ngrams_experiment.train_group(cfg, {}, progress=None)["result"] for _ in range(repeats)
        ]
        ms = 1e3 * min(t.run_seconds for t in timings) / steps
        ema = metrics_at == "ema"
        out[f"fig3_{runs}_seeds" + ("_ema" if ema else "")] = dict(
            ms_per_step=ms,
            ms_per_step_per_run=ms / runs,
            compile_seconds=timings[0].compile_seconds,
            target_ms=3.0,
            authors_ms=19.4,
            note=f"{runs} seed(s) in one program, sampling included, {steps} steps"
            + (
                ", a parameter EMA updated every step (train.metrics_at='ema'; issue target: "
                "at most 15% over the row without)"
                if ema
                else ""
            ),
        )
    sample = jax.jit(lambda key: ngrams_task.sample(key, 5, 3, 32, 0.5, 128)[:2])
    jax.block_until_ready(sample(jax.random.key(0)))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(200):
            batch = sample(jax.random.key(i))
        jax.block_until_ready(batch)
        best = min(best, (time.perf_counter() - t0) / 200)
    out["sampler"] = dict(
        ms_per_batch=1e3 * best,
        authors_ms=15.4,
        note="128 sequences: Dirichlet tasks + rollout + soft targets",
    )
    return out


def bench_cache(repeats: int, one_by_one: int) -> dict[str, Any]:
    """The CLI's persistent compilation cache: each command twice in fresh processes, the first
    filling an empty cache folder, the second reading it (wall time from the shell's view)."""
    del one_by_one
    root = ROOT
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["PYTHONPATH"] = str(root)
    out = Rows()
    for name, config, times, target in (
        ("main_job", "configs/syn_small.py", repeats, 1.5),
        ("syn_medium", "configs/syn_medium.py", 1, None),
    ):
        with tempfile.TemporaryDirectory() as folder:
            cold = _cli_seconds(root, env, config, folder, 0)
            warm = min(_cli_seconds(root, env, config, folder, i + 1) for i in range(times))
        out[name] = dict(
            cold_wall_seconds=cold[0],
            cold_compile_seconds=cold[1],
            warm_wall_seconds=warm[0],
            warm_compile_seconds=warm[1],
            note=f"python -m experiments.scan_snap --config={config}, the second "
            "run with the first run's compilation cache",
            **({"target_warm_wall_seconds": target} if target else {}),
        )
    return out


def _cli_seconds(
    root: pathlib.Path, env: dict[str, str], config: str, folder: str, i: int
) -> tuple[float, float]:
    """(wall seconds, compile seconds) of the scan_snap CLI on `config` in a fresh process, with
    the compilation cache `<folder>/cache` and the workdir `<folder>/w<i>`."""
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.scan_snap",
            f"--config={config}",
            f"--compilation_cache={folder}/cache",
            f"--workdir={folder}/w{i}",
        ],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    timing = json.loads((pathlib.Path(folder) / f"w{i}" / "summary.json").read_text())["timing"]
    return time.perf_counter() - t0, timing["compile_seconds"]


def bench_curvature(repeats: int, one_by_one: int) -> dict[str, Any]:
    """The probes' first call, the same point again and a new (p, q) at theta_pi (D = 237), and a
    10 x 10 grid of Hessians in one call: `experiments.bench.probe_timing` in a fresh process."""
    del repeats, one_by_one
    return _child_rows("probe_timing")


def bench_paper_sizes(repeats: int, one_by_one: int) -> dict[str, Any]:
    """The probes at the papers' sizes (dense Hessian of n-gram Fig. 3, the GGNs, eigenpairs):
    every row of `experiments/bench/paper_size_probes.py`, in a fresh process."""
    del repeats, one_by_one
    return _child_rows("paper_size_probes")


def bench_finite_differences(repeats: int, one_by_one: int) -> dict[str, Any]:
    """Exact products against central differences on the peers MLP, float32 and bfloat16: the
    markdown table of `experiments/bench/finite_differences.py`, in a fresh process."""
    del repeats, one_by_one
    table = _child("finite_differences")
    print(table, flush=True)
    return {"markdown": table.strip()}


def bench_bfloat16_storage(repeats: int, one_by_one: int) -> dict[str, Any]:
    """What bfloat16 vectors cost against float32 on the peers MLP at D = 1e5: the markdown
    table of `experiments/bench/bfloat16_storage.py`, in a fresh process."""
    del repeats, one_by_one
    table = _child("bfloat16_storage")
    print(table, flush=True)
    return {"markdown": table.strip()}


def bench_product_cost(repeats: int, one_by_one: int) -> dict[str, Any]:
    """A Hessian-vector product against an Adam training step of the peers MLP at D = 1e4-1e6:
    the markdown table of `experiments/bench/product_cost.py`, in a fresh process."""
    del repeats, one_by_one
    table = _child("product_cost")
    print(table, flush=True)
    return {"markdown": table.strip()}


def _child(module: str) -> str:
    """What `python -m experiments.bench.<module>` prints, run in a fresh process."""
    command = [sys.executable, "-m", f"experiments.bench.{module}"]
    return subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout


def _child_rows(module: str) -> dict[str, Any]:
    """The JSON rows a child benchmark prints (one object a line, its name under "row")."""
    rows = Rows()
    for line in _child(module).splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row.pop("row")] = row
    return dict(rows)


def bench_compile(repeats: int, one_by_one: int) -> dict[str, Any]:
    """Trace, lower and XLA compile seconds of each program of the main job, the Fig. 6 grid
    (one program per K), a Markov Fig. 4 program, n-grams Fig. 3, WikiText Fig. 7 and recall
    Fig. 1, the persistent cache off, medians of `repeats`; and the floor: the bare loss
    gradient of the main job's model (the targets on 2 CPU cores: the main job's
    programs <= 0.8 s together, the Fig. 6 grid's <= 4 s)."""
    del one_by_one
    from experiments.bench import compile_timing

    jax.config.update("jax_enable_compilation_cache", False)
    out = Rows()
    for name, start in _compile_entry_points():
        rows = compile_timing.median_rows(
            [compile_timing.programs_of(start) for _ in range(repeats)]
        )
        out[name] = dict(total=compile_timing.total(rows), **rows)
    out["main_job_floor"] = _gradient_floor(compile_timing, repeats, syn_small.get_config())
    medium = syn_medium.get_config()
    floors = {
        f"K{2 * fields['data.num_last']}": _gradient_floor(
            compile_timing, repeats, config_lib.with_fields(medium, fields), on_a_batch=False
        )["grad_with_sampling"]
        for fields in experiment.structural_cells(medium)
    }
    out["fig6_grid_floor"] = dict(
        compile_seconds=sum(f["compile_seconds"] for f in floors.values()),
        compile_cpu_seconds=sum(f["compile_cpu_seconds"] for f in floors.values()),
        **floors,
        note="jax.jit(jax.grad(loss)) with task.sample inside, one per K: four programs' floor",
    )
    return out


def _compile_entry_points() -> list[tuple[str, Callable[[], object]]]:
    """(row name, a call that would train that program) for the compile group."""
    from configs import markov, ngrams, recall
    from configs import wikitext as wikitext_configs
    from landscape.markov import experiment as markov_experiment
    from landscape.ngrams import experiment as ngrams_experiment
    from landscape.recall import experiment as recall_experiment
    from landscape.scan_snap import text, wikitext

    main, medium = syn_small.get_config(), syn_medium.get_config()
    entries: list[tuple[str, Callable[[], object]]] = [
        ("main_job", lambda: experiment.train_group(main, {}, progress=None))
    ]
    for fields in experiment.structural_cells(medium):
        entries.append(
            (
                f"fig6_grid_K{2 * fields['data.num_last']}",
                functools.partial(experiment.train_group, medium, fields, progress=None),
            )
        )
    fig4 = markov.get_config("fig4")
    cell = config_lib.structural_cells(fig4, markov_experiment.TRACED)[0]
    entries.append(
        ("markov_fig4", functools.partial(markov_experiment.train_group, fig4, cell, progress=None))
    )
    fig3 = ngrams.get_config("fig3")
    entries.append(
        ("ngrams_fig3", functools.partial(ngrams_experiment.train_group, fig3, {}, progress=None))
    )
    fig7 = wikitext_configs.get_config("fig7")
    if not text.missing_splits_message(fig7.text.path, (fig7.text.train_split,)):
        cell7 = config_lib.with_fields(fig7, {"transformer.num_layers": 1})
        hp = {"optim.lr_z": np.full(1, 5.0), "optim.lr_y_over_lr_z": np.full(1, 2.0)}
        entries.append(
            (
                "wikitext_fig7",
                lambda: wikitext_timing.train_wikitext(cell7, wikitext.load(cell7), hp, 1, 50),
            )
        )

    def recall_fig1() -> object:  # float64, as its experiment runs it; left on for the rest
        jax.config.update("jax_enable_x64", True)
        return recall_experiment.run_sgd(recall.get_config("fig1"), {}, None, progress=None)

    entries.append(("recall_fig1", recall_fig1))
    return entries


def _gradient_floor(
    compile_timing: Any, repeats: int, cfg: ml_collections.ConfigDict, on_a_batch: bool = True
) -> dict[str, Any]:
    """XLA's compile of the bare loss gradient of `cfg`'s Y/Z model, with the batch sampled
    inside (and, if `on_a_batch`, on a fixed batch): below these no training program of that
    model compiles."""
    from landscape.scan_snap import model as model_lib

    task = experiment.make_task(cfg)
    model, problem = experiment.model_of(cfg, task), experiment.make_problem(cfg, task)
    params = experiment.init_params(cfg, task, jax.random.key(0))
    context, query, label, _ = task.sample(jax.random.key(0), cfg.train.batch_size)

    def on_batch(p: PyTree) -> jax.Array:
        loss = model.apply({"params": p}, context, query, label, method=model_lib.YZModel.loss)
        return loss  # type: ignore[return-value]  # flax types apply for mutable too

    def sampled(p: PyTree, key: jax.Array) -> jax.Array:
        return problem.loss(p, key, {})[0]

    programs: list[tuple[str, Callable, tuple]] = [
        ("grad_with_sampling", jax.grad(sampled), (params, jax.random.key(0)))
    ]
    if on_a_batch:
        programs.insert(0, ("grad_on_a_batch", jax.grad(on_batch), (params,)))
    rows = {}
    for name, f, args in programs:
        runs = [compile_timing.stage_seconds(jax.jit(f), *args) for _ in range(repeats)]
        rows[name] = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    return dict(
        **rows,
        note=f"jax.jit(jax.grad(loss)) of the Y/Z model (M = {task.num_tokens}, batch "
        f"{cfg.train.batch_size} x L = {cfg.data.seq_len}): on one fixed batch, and with "
        "task.sample inside (the chunk's sampler)",
    )


BENCHMARKS = {
    "scan_snap": bench_scan_snap,
    "wikitext": wikitext_timing.bench_wikitext,
    "recall": bench_recall,
    "markov": bench_markov,
    "ngrams": bench_ngrams,
    "cache": bench_cache,
    "curvature": bench_curvature,
    "compile": bench_compile,
    "track": track_timing.bench_track,
    "tracker": tracker_timing.bench_tracker,
    "peers": peers_timing_rows.bench_peers,
    "sharded": sharded_timing.bench_sharded,
    "paper_sizes": bench_paper_sizes,
    "finite_differences": bench_finite_differences,
    "bfloat16_storage": bench_bfloat16_storage,
    "product_cost": bench_product_cost,
}
