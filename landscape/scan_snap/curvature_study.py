"""The WikiText model along training (Fig. 7's setting, one layer): λ_min and λ_max tracked
inside the compiled run on a fixed set of evaluation chunks (a dataset in batches, one chunk a
batch: memory holds one chunk), the top Ritz values and the
gradient per block at kept steps, and at the steps where layer 0's attention scans, snaps and
has frozen (the fall of its entropy) the top and bottom eigenpairs: their shares per block and
the negative curvature. docs/studies/wikitext_curvature.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.flatten_util import ravel_pytree

from landscape.engine import config as config_lib
from landscape.engine import records, sweeps
from landscape.engine import study as study_lib
from landscape.engine import track as track_lib
from landscape.engine.result import RunResult
from landscape.point import Point
from landscape.probes import eigen, gradient, lanczos
from landscape.scan_snap import curvature_figures, text, wikitext, wikitext_claims
from landscape.scan_snap import model as model_lib
from landscape.typing import Progress, PyTree, Row

BLOCKS = ("embedding", "attention Q/K", "attention V/O", "FFN", "LayerNorm", "decoder")
PHASES = ("scan", "snap", "frozen")  # the steps probed (step 0 is tracked)
TRACKED_RTOL = 0.1  # tracked λ_max (a few Lanczos steps, inside the spectrum) within 10% ...
# ... of the certified λ_1 at the probed steps (the CPU run's 10 steps: measured on the page)


def default_study() -> ml_collections.ConfigDict:
    """The `curvature` group of a wikitext config (read by experiment = 'curvature')."""
    return ml_collections.ConfigDict(
        dict(
            eval_chunks=2,  # the curvature loss: this many evaluation chunks, spread evenly
            top_k=4,  # the largest eigenpairs at the phase steps
            negative_k=4,  # the smallest eigenpairs at the phase steps
            tol=1e-3,  # eigenpairs' relative Ritz residual (a loose one is fast)
            max_restarts=6,  # eigenpairs' Lanczos runs at most, each way
            spectrum_every=300,  # the top Ritz values at the kept steps this far apart
            spectrum_lanczos=20,  # Lanczos steps for them
            scan_share=0.5,  # scan: the first kept step past this share of the entropy's fall
            snap_share=0.9,  # snap: the first kept step past this share of it
        )
    )


def validate(cfg: ml_collections.ConfigDict) -> None:
    """experiment = 'curvature': one run (no sweep, one seed), kept parameters and tracked
    curvature, its own claims, and the study's fields in range."""
    require, r, t = config_lib.require, config_lib.require_number, cfg.train
    study_lib.require_own_claims(cfg, "curvature")
    config_lib.require_empty_sweep(cfg, "experiment = 'curvature'")
    require(cfg.num_seeds == 1, "num_seeds", cfg.num_seeds, "1 (the study probes one run)")
    study_lib.require_every(cfg, "curvature", "it probes kept steps and tracks λ")
    s = cfg.curvature
    r(cfg, "curvature.eval_chunks", low=1, integer=True)
    r(cfg, "curvature.top_k", low=1, integer=True)
    r(cfg, "curvature.negative_k", low=1, integer=True)
    r(cfg, "curvature.tol", low=0, low_open=True)
    r(cfg, "curvature.max_restarts", low=1, integer=True)
    r(cfg, "curvature.spectrum_lanczos", low=2, integer=True)
    r(cfg, "curvature.scan_share", low=0, high=1, low_open=True, high_open=True)
    r(cfg, "curvature.snap_share", low=s.scan_share, high=1, high_open=True)
    r(cfg, "curvature.spectrum_every", low=t.params_every, integer=True)
    require(
        s.spectrum_every % t.params_every == 0,
        "curvature.spectrum_every",
        s.spectrum_every,
        f"a multiple of train.params_every = {t.params_every} (the spectra are taken at kept "
        "steps)",
    )


def cell_bytes(v: dict[str, Any]) -> tuple[float, str]:
    """(bytes, what) of the study: the training run's (`wikitext.cell_bytes`), the kept
    parameters, and the largest probe: eigenpairs' search (max(40, 4k) + 5k + 6 vectors of D,
    as `eigen.eigenpairs` plans it) or the tracked Lanczos basis, beside the linearisation of
    one evaluation chunk (the curvature loss is a dataset in batches, one chunk a batch: its
    logits, about 4 x B x bptt x V numbers)."""
    need, what = wikitext.cell_bytes(v)
    V = wikitext.corpus_of(v).vocab_size
    size, D = np.dtype(v["train.dtype"]).itemsize, wikitext.num_params(v, V)
    kept = (v["train.num_steps"] // max(v["train.params_every"], 1) + 1) * D
    k = max(v["curvature.top_k"], v["curvature.negative_k"])
    vectors = max(max(40, 4 * k) + 5 * k + 6, v["train.track_lanczos"] + 2)
    logits = 4 * v["text.eval_batch_size"] * v["text.bptt"] * V
    return need + size * (kept + vectors * D + logits), (
        f"{what}; the probes: {vectors} vectors of D = {D}, {kept // D} kept steps"
    )


MEMORY_FIELDS = (
    "curvature.eval_chunks",
    "curvature.top_k",
    "curvature.negative_k",
    *wikitext.MEMORY_FIELDS,
)


# ----------------------------------------------------------------------------- blocks


def block_labels(params: PyTree) -> np.ndarray:
    """The block (an index into BLOCKS) of every flat coordinate, in ravel_pytree's order: the
    embedding, the attention's query and key projections (the first 2d columns of qkv), its
    value and output projections, the FFN, the LayerNorms and the decoder."""

    def label(path: tuple, leaf: Any) -> np.ndarray:
        keys = [getattr(k, "key", str(k)) for k in path]
        shape = np.shape(leaf)
        if keys[0] == "embed":
            return np.full(shape, 0)
        if keys[0] == "decoder":
            return np.full(shape, 5)
        if "ffn" in keys:
            return np.full(shape, 3)
        if any(k.startswith("ln_") for k in keys):
            return np.full(shape, 4)
        if "out" in keys:
            return np.full(shape, 2)
        if "qkv" in keys:  # columns [q | k | v], each d wide
            d = shape[-1] // 3
            return np.broadcast_to(np.repeat([1, 1, 2], d), shape)
        raise ValueError(f"a parameter {'/'.join(keys)} in no block of {BLOCKS}")

    tree = jax.tree_util.tree_map_with_path(label, params)
    flat, _ = ravel_pytree(jax.tree.map(lambda a: np.asarray(a, np.float32), tree))
    return np.asarray(flat).astype(np.int8)


def block_sizes(labels: np.ndarray) -> dict[str, float]:
    """Each block's share of the D coordinates: the share a random direction has on average."""
    counts = np.bincount(labels, minlength=len(BLOCKS))
    return {name: float(c / labels.size) for name, c in zip(BLOCKS, counts, strict=True)}


def block_shares(vectors: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The mean over the rows of `vectors` (k x D) of each block's share of the row's squared
    norm: they sum to 1 (for orthonormal rows, the trace of the projector on the block over k)."""
    rows = np.atleast_2d(np.asarray(vectors, np.float64))
    shares = np.zeros(len(BLOCKS))
    for row in rows:
        shares += np.bincount(labels, weights=row * row, minlength=len(BLOCKS)) / (row @ row)
    return {name: float(v / rows.shape[0]) for name, v in zip(BLOCKS, shares, strict=True)}


def block_norms(vector: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The norm of `vector` on each block."""
    squares = np.bincount(labels, weights=np.square(vector, dtype=np.float64), minlength=6)
    return {name: float(np.sqrt(v)) for name, v in zip(BLOCKS, squares, strict=True)}


# ----------------------------------------------------------------------------- the loss, the phases


def curvature_loss(
    cfg: ml_collections.ConfigDict, corpus: text.Corpus
) -> tuple[Callable[[PyTree, Any], jax.Array], tuple[jax.Array, jax.Array]]:
    """(objective, batches): `curvature.eval_chunks` chunks of the evaluation split spread
    evenly, one chunk a batch (inputs and targets, each (C, B, bptt)), and the deterministic
    (eval-mode) mean cross-entropy of one chunk, objective(params, chunk). The curvature loss is
    its mean over the chunks, `Point(params, objective=..., batches=...)` (`point_at`): the mean
    over every evaluation position, with memory for one chunk."""
    net = wikitext.model_of(cfg, corpus.vocab_size)
    total = text.num_chunks(corpus.eval.shape[0], cfg.text.bptt)
    count = min(cfg.curvature.eval_chunks, total)
    chosen = np.unique(np.linspace(0, total - 1, count).round().astype(int))
    pairs = [text.chunk(corpus.eval, int(i), cfg.text.bptt) for i in chosen]
    batches = (jnp.stack([p[0].T for p in pairs]), jnp.stack([p[1].T for p in pairs]))

    def objective(params: PyTree, chunk: tuple[jax.Array, jax.Array]) -> jax.Array:
        value, _ = net.apply(
            {"params": params}, chunk[0], chunk[1], method=model_lib.TextTransformer.loss
        )
        return value

    return objective, batches


def point_at(result: RunResult, loss: tuple[Callable, Any], step: int) -> Point:
    """Run 0's kept parameters at `step` as a Point on the curvature loss: `loss` is
    curvature_loss's (objective, batches), the chunks a dataset in batches."""
    objective, batches = loss
    params = jax.tree.map(jnp.asarray, result.params_at(step, 0))
    name = f"run 0 (seed {int(result.seeds[0])}), step {step}"
    return Point(params, name=name, objective=objective, batches=batches)


def phase_steps(
    steps: Sequence[int],
    entropy: Sequence[float],
    kept: Sequence[int],
    scan_share: float,
    snap_share: float,
) -> dict[str, int | None]:
    """{phase: kept step}: scan and snap, the first kept steps at which the entropy (at
    `steps`) has fallen by `scan_share` and `snap_share` of its whole fall (None when it does
    not fall); frozen, the last kept step."""
    at = dict(zip((int(s) for s in steps), (float(e) for e in entropy), strict=True))
    kept = [int(s) for s in kept]
    start, end = at[kept[0]], at[kept[-1]]
    out: dict[str, int | None] = {"scan": None, "snap": None, "frozen": kept[-1]}
    if end >= start:
        return out
    for phase, share in (("scan", scan_share), ("snap", snap_share)):
        level = start - share * (start - end)
        out[phase] = next(s for s in kept if at[s] <= level)
    return out


# ----------------------------------------------------------------------------- along training


def along_rows(
    result: RunResult,
    loss: tuple[Callable, Any],
    labels: np.ndarray,
    cfg: ml_collections.ConfigDict,
    progress: Progress,
) -> list[Row]:
    """One row per kept step: the loss and gradient per block on the curvature loss, layer 0's
    entropy, the tracked λ there, and at every `spectrum_every` steps the top Ritz values of
    `spectrum_lanczos` Lanczos steps (lanczos_spectrum)."""
    s = cfg.curvature
    entropy = result.snapshots["entropy_layer0"][0]
    snaps = dict(zip(result.snapshot_steps.tolist(), entropy, strict=True))
    tracked = _tracked(result)
    rows = []
    for step in _kept(result):
        point = point_at(result, loss, step)
        row: Row = dict(step=step, entropy_layer0=float(snaps[step]), **tracked.get(step, {}))
        if step % s.spectrum_every == 0 or step == result.num_steps:
            spectrum = lanczos.lanczos_spectrum(point, s.spectrum_lanczos)
            grad = spectrum.gradient
            top = spectrum.ritz_values[::-1][: s.top_k]
            row.update({f"ritz_{i + 1}": float(v) for i, v in enumerate(top)})
            row["ritz_min"] = spectrum.lambda_min
        else:
            grad = gradient.gradient_at(point)
        row.update(loss=grad.loss, grad_norm=grad.norm)
        row.update({f"grad {b}": v for b, v in block_norms(grad.vector, labels).items()})
        rows.append(row)
        if progress:
            ritz = f", top Ritz {row['ritz_1']:.4g}" if "ritz_1" in row else ""
            progress(
                f"  step {step}: loss {grad.loss:.4f}, |g| {grad.norm:.4g}, entropy "
                f"{row['entropy_layer0']:.3f}{ritz}"
            )
    return rows


def _kept(result: RunResult) -> list[int]:
    """The kept steps (validate: train.params_every > 0)."""
    assert result.params_steps is not None
    return [int(step) for step in result.params_steps]


def _tracked(result: RunResult) -> dict[int, dict[str, float]]:
    """{tracked step: {tracked_lambda_max, tracked_lambda_min}} of run 0."""
    if result.tracked_steps is None:
        return {}
    return {
        int(step): {
            f"tracked_{name}": float(result.metrics[name][0, i])
            for name in ("lambda_max", "lambda_min")
        }
        for i, step in enumerate(result.tracked_steps.tolist())
    }


# ----------------------------------------------------------------------------- the phase steps


def probe_phase(
    point: Point,
    labels: np.ndarray,
    s: ml_collections.ConfigDict,
    progress: Progress,
) -> tuple[Row, str]:
    """The top and bottom eigenpairs at a point (eigenpairs, Lanczos at `s.tol`) and their
    shares per block: of the top `top_k`, of the first, of the certified negative ones."""
    options = dict(dense_below=0, rtol=s.tol, max_restarts=s.max_restarts, progress=progress)
    top = eigen.eigenpairs(point, s.top_k, which="largest", **options)
    bottom = eigen.eigenpairs(point, s.negative_k, which="smallest", **options)
    negative = bottom.values + bottom.residuals < 0  # below 0 by more than the residual
    row: Row = dict(
        top=[float(v) for v in top.values],
        top_residuals=[float(v) for v in top.residuals],
        top_converged=top.converged,
        top_hvps=top.num_hvps,
        top_scale=top.scale,
        bottom=[float(v) for v in bottom.values],
        bottom_residuals=[float(v) for v in bottom.residuals],
        bottom_converged=bottom.converged,
        bottom_hvps=bottom.num_hvps,
        bottom_scale=bottom.scale,
        lambda_max=float(top.values[0]),
        lambda_min=float(bottom.values[0]),
        negative_over_max=float(bottom.values[0] / top.values[0]),
        num_negative=int(negative.sum()),
    )
    shares = {
        "top": block_shares(top.flat_vectors, labels),
        "first": block_shares(top.flat_vectors[:1], labels),
    }
    if negative.any():
        shares["negative"] = block_shares(bottom.flat_vectors[negative], labels)
    for which, by_block in shares.items():
        row.update({f"{which} {b}": v for b, v in by_block.items()})
    return row, top.describe() + "\n\n" + bottom.describe()


def probe_phases(
    result: RunResult,
    loss: tuple[Callable, Any],
    labels: np.ndarray,
    along: Sequence[Row],
    phases: Mapping[str, int | None],
    s: ml_collections.ConfigDict,
    progress: Progress,
) -> tuple[list[Row], list[str]]:
    """Each phase step once (its phases joined by '+'): probe_phase's eigenpairs beside its row
    along training (without the Ritz values); (rows, texts)."""
    by_step = {r["step"]: r for r in along}
    named = {
        step: "+".join(p for p, v in phases.items() if v == step)
        for step in dict.fromkeys(v for v in phases.values() if v is not None)
    }

    def probe(step: int) -> tuple[Row, str]:
        row, described = probe_phase(point_at(result, loss, step), labels, s, progress)
        base = {k: v for k, v in by_step[step].items() if not k.startswith("ritz")}
        return dict(phase=named[step], **base, **row), f"{named[step]} (step {step})\n{described}"

    found = study_lib.probe_each(
        list(named),
        probe,
        progress,
        lambda step: f"{named[step]} (step {step}): the top and bottom eigenpairs",
    )
    return [row for row, _ in found], [text for _, text in found]


# ----------------------------------------------------------------------------- claims, findings


def theory_claims(along: Sequence[Row], phases: Mapping[str, int | None]) -> list[records.Claim]:
    """Where the paper's theory predicts: after the snap the attention's drive slows (Thm 4,
    B_n grows like ln ln t past t_0), so the query/key gradient at the frozen step is below its
    value at the scan step, at the same constant lr."""
    by_step = {r["step"]: r for r in along}
    scan, frozen = phases.get("scan"), phases.get("frozen")
    if scan is None or frozen is None or scan == frozen:
        return [
            records.claim(
                "the attention's query/key gradient shrinks from the scan to the frozen step",
                dict(phases),
                "a scan step before the frozen one (the entropy must fall)",
                False,
                "Thm 4, notes/scan_snap.md §4.3",
            )
        ]
    at_scan, at_frozen = by_step[scan]["grad attention Q/K"], by_step[frozen]["grad attention Q/K"]
    return [
        records.claim(
            "after the snap the attention's drive slows: the query/key gradient (on the "
            "evaluation chunks) is smaller at the frozen step than at the scan step",
            {f"step {scan} (scan)": at_scan, f"step {frozen} (frozen)": at_frozen},
            "frozen < scan at a constant lr",
            at_frozen < at_scan,
            "Thm 4, notes/scan_snap.md §4.3, §5.7",
        )
    ]


def sanity_claims(probed: Sequence[Row], tol: float) -> list[records.Claim]:
    """The tracked λ_max (Lanczos inside the run) against the certified λ_1 at the probed
    steps; every top and bottom eigenpair certified at its residual, relative to the spectral
    scale max|λ| its eigenpairs call accepted it at (rtol = tol)."""
    pairs = {
        r["step"]: [r["tracked_lambda_max"], r["lambda_max"]]
        for r in probed
        if "tracked_lambda_max" in r
    }
    close = all(abs(t - c) <= TRACKED_RTOL * abs(c) for t, c in pairs.values())
    residual = max(
        (max(r[f"{w}_residuals"]) / r[f"{w}_scale"] for r in probed for w in ("top", "bottom")),
        default=np.nan,
    )
    return [
        records.sanity(
            "tracked λ_max (inside the run) = eigenpairs' certified λ_1 at the probed steps",
            pairs,
            f"within {TRACKED_RTOL:.0%} (Ritz values lie inside the spectrum)",
            bool(pairs) and close,
        ),
        records.sanity(
            "the top and bottom eigenpairs are certified: residual ||Hv - λv|| <= tol x max|λ|",
            residual,
            f"<= {tol:g}",
            residual <= tol,
        ),
    ]


def findings(along: Sequence[Row], probed: Sequence[Row], sizes: Mapping[str, float]) -> Row:
    """What the theory does not predict: λ_max along training, the top eigenvalues and their
    blocks at each phase, the negative curvature, the gradient per block."""
    tracked = [r for r in along if "tracked_lambda_max" in r]
    out: Row = {
        "lambda_max along training (kept steps: tracked)": {
            r["step"]: round(r["tracked_lambda_max"], 5) for r in tracked
        },
        "top Ritz values along training": {
            r["step"]: [round(r[k], 5) for k in r if k.startswith("ritz_") and k != "ritz_min"]
            for r in along
            if "ritz_1" in r
        },
        "blocks' share of the parameters (a random direction's shares)": sizes,
    }
    for r in probed:
        where = f"{r['phase']} (step {r['step']})"
        out[f"{where}: top eigenvalues, λ_min, λ_min / λ_max, certified negatives"] = [
            [round(v, 5) for v in r["top"]],
            round(r["lambda_min"], 5),
            round(r["negative_over_max"], 4),
            r["num_negative"],
        ]
        for which in ("top", "negative"):
            if f"{which} decoder" in r:
                out[f"{where}: shares of the {which} eigenvectors"] = {
                    b: round(r[f"{which} {b}"], 4) for b in BLOCKS
                }
    return out


# ----------------------------------------------------------------------------- the run


def run(
    cfg: ml_collections.ConfigDict, workdir: records.Workdir, progress: Progress = print
) -> dict[str, Any]:
    """Train the tracked, kept run; the rows along training (curvature_along.csv), the phase
    probes (curvature_phases.csv, curvature.txt), the figure, the claims and the findings."""
    start = time.perf_counter()
    corpus = wikitext.load(cfg)
    objective, batches = curvature_loss(cfg, corpus)
    track = track_lib.track_of(cfg, objective, batches=batches)
    grid = sweeps.Grid.make({}, np.arange(cfg.seed, cfg.seed + 1))
    if progress:
        progress(
            f"text: {corpus.path}: {corpus.train_split} ({corpus.train_tokens} tokens), "
            f"vocabulary {corpus.vocab_size}; curvature on {batches[0].shape[0]} "
            f"{corpus.eval_split} chunks of {batches[0].shape[1]} x {batches[0].shape[2]} tokens, "
            "one chunk a batch"
        )
    problem = wikitext.make_problem(cfg, corpus)
    ((_, result),) = study_lib.programs(
        [{}],
        lambda fields: sweeps.run_cell(
            problem, cfg, wikitext.TRACED, grid, fields=fields, workdir=workdir,
            progress=progress, track=track,
        ),
        workdir,
        progress,
        result=lambda result: result,
    )  # fmt: skip
    trained = time.perf_counter()
    loss = (objective, batches)
    labels = block_labels(result.params("final", 0))
    if progress:
        progress("along training, at the kept steps:")
    along = along_rows(result, loss, labels, cfg, progress)
    study_lib.write(workdir, {"curvature_along": along})
    snaps = result.snapshots["entropy_layer0"][0]
    s = cfg.curvature
    steps = result.snapshot_steps.tolist()
    phases = phase_steps(steps, snaps, _kept(result), s.scan_share, s.snap_share)
    probed, texts = probe_phases(result, loss, labels, along, phases, s, progress)
    study_lib.write(workdir, {"curvature_phases": probed}, texts)
    unigram = text.unigram_cross_entropy(corpus)
    claims = records.evaluated(
        "fig7", lambda: wikitext_claims.claims_fig7(cfg, [({}, result)], unigram)
    )
    claims += theory_claims(along, phases) + sanity_claims(probed, s.tol)
    sizes = block_sizes(labels)
    figure = curvature_figures.draw(along, probed, phases, sizes, BLOCKS)
    path = curvature_figures.save(figure, workdir.figure_path("curvature_study"))
    return workdir.finish(
        claims if cfg.claims == "curvature" else [],
        progress,
        figures=[str(path)],
        phases=phases,
        findings=findings(along, probed, sizes),
        seconds={"train": trained - start, "total": time.perf_counter() - start},
        data=dict(wikitext.describe_data(cfg, corpus), curvature_chunks=int(batches[0].shape[0])),
    )
