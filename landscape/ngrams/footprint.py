"""The bytes an n-gram run holds (its memory estimate, checked before compiling) and the
snapshot's chunk of test sequences; docs/design/ngrams.md."""

from __future__ import annotations

import ml_collections
import numpy as np

from landscape.engine import backend, memory
from landscape.engine import config as config_lib
from landscape.engine.experiment import BASELINE_BYTES
from landscape.engine.memory import format_bytes
from landscape.ngrams.schema import TRACED, default_config

# Test-set sequences per chunk of the snapshot's loss and gradient: a chunk's forward and
# backward temporaries are about this many bytes (the whole test set at once does not fit).
_SNAPSHOT_CHUNK_BYTES = 2**27

_MEMORY_FIELDS = (
    "train.batch_size",
    "train.test_sequences",
    "lines.num_sequences",
    "num_seeds",
    "stationarity.num_sequences",
    "task.seq_len",
    "model.num_heads",
)


def _sequence_bytes(v: dict) -> float:
    """Bytes one sequence's forward and backward pass hold at once, from a flat config: its
    activations about four times over (forward values, the backward's temporaries and their
    gradients; calibrated on Fig. 4's 2^16 test sequences in one batch, 14 GB)."""
    T, S, h = v["task.seq_len"], v["task.num_states"], v["model.num_heads"]
    if v["model.kind"] == "simplified":
        width = (h + 1) * S
        floats = T * (S + 2 * h * S + width + (v["model.head_dim"] or width) + 2)
    else:
        d, floats = S + T, 0
        for heads in (h, 1):
            floats += 3 * heads * T * T + 2 * heads * T * d + (4 if v["model.mlp"] else 2) * T * d
            if v["model.kind"] == "disentangled":
                d *= 1 + heads
    return 4.0 * floats * np.dtype(v["train.dtype"]).itemsize


def _num_params(v: dict) -> int:
    T, S, h = v["task.seq_len"], v["task.num_states"], v["model.num_heads"]
    if v["model.kind"] == "simplified":
        width = (h + 1) * S
        return h * T * T + h * S * S + 2 * (v["model.head_dim"] or width) * width
    d, total = S + T, (S + T) * S
    for heads in (h, 1):
        total += heads * 3 * d * d + (2 * d * d if v["model.mlp"] else 0)
        d = d * (1 + heads) if v["model.kind"] == "disentangled" else d
    return total


def _sample_bytes(v: dict, count: int) -> float:
    """The sampler's arrays for `count` sequences: per-sequence tasks (S^(n-1) x S, with the
    Gamma draws' temporaries) and the tokens."""
    S = v["task.num_states"]
    return count * (8.0 * S ** (v["task.order_n"] - 1) * S + 3 * v["task.seq_len"]) * 4


def snapshot_chunk(cfg: ml_collections.ConfigDict) -> int:
    """Test sequences per chunk of the snapshot's loss and gradient (at most a half test set):
    _SNAPSHOT_CHUNK_BYTES of them on the CPU; off it, what fits in the device's memory for every
    run of the program at once (landscape/engine/backend.py)."""
    half = max(1, cfg.train.test_sequences // 2)
    flat = config_lib.flatten(cfg)
    per_sequence = _sequence_bytes(flat)
    runs = memory.traced_runs(flat, TRACED)
    return backend.per_batch(int(_SNAPSHOT_CHUNK_BYTES // per_sequence), runs * per_sequence, half)


def _stationarity_bytes(v: dict) -> tuple[float, str]:
    """The population set (N x T tokens), the estimators' one-hot counts (N x T x S, int64) and
    the gradient statistics in chunks of 2048 sequences (stationarity.study), at the largest T."""
    T, S, N = (
        max(v["stationarity.seq_lens"]),
        v["stationarity.num_states"],
        v["stationarity.num_sequences"],
    )
    model = {
        "task.seq_len": T,
        "task.num_states": S,
        "model.num_heads": v["stationarity.order_n"] - 1,
        "model.kind": "simplified",
        "model.head_dim": 0,
        "train.dtype": "float64",
    }
    need = N * T * (4 * S + 1) * 8 + min(N, 2048) * _sequence_bytes(model)
    return BASELINE_BYTES + need, (
        f"{N} sequences of up to {T} tokens, their estimators' counts and gradients"
    )


def _cell_bytes(v: dict) -> tuple[float, str]:
    """(bytes, what) of one program: the largest of a training step, the chunked test-set
    evaluation and the estimator lines, plus the test set, the records kept on the host and a
    baseline for JAX itself."""
    if v["experiment"] == "stationarity":
        return _stationarity_bytes(v)
    T, S, h = v["task.seq_len"], v["task.num_states"], v["model.num_heads"]
    B = v["train.batch_size"]
    size = np.dtype(v["train.dtype"]).itemsize
    E, lines = v["train.test_sequences"], v["lines.num_sequences"]
    runs = memory.traced_runs(v, TRACED)
    params, per_sequence = _num_params(v) * size, _sequence_bytes(v)
    chunk = int(max(1, min(max(1, E // 2), _SNAPSHOT_CHUNK_BYTES // per_sequence)))
    maps = 256 * h * T * T * size * 3 if v["model.kind"] != "simplified" else 0
    snapshots = v["train.num_steps"] // v["train.log_every"] + 1
    measures = 2 if v["train.metrics_at"] == "both" else 1  # snapshots at EMA and current
    kept = runs * (
        measures * snapshots * h * T * T * 4 * bool(v["train.attention_maps"])
        + 2 * v["train.num_steps"] * 4
    )
    held = E * (T * 4 + S * size) + kept
    terms = [
        (
            runs * (B * per_sequence + 8 * params),
            f"{runs} run(s) x a training step on {B} sequences of {T} tokens, "
            f"{format_bytes(per_sequence)} each, and {_num_params(v)} parameters with their "
            "optimizer state",
        ),
        (
            runs * (chunk * per_sequence + 4 * params + maps) + _sample_bytes(v, E),
            f"the test set: {E} sequences of {T} tokens, sampled, then evaluated {chunk} at a "
            f"time for {runs} run(s)",
        ),
        (
            _sample_bytes(v, lines) + 3 * lines * T * S * 4,
            f"the estimator lines' {lines} sequences of {T} tokens",
        ),
    ]
    need, what = max(terms)
    if kept > need:
        what = f"{runs} run(s) x {snapshots} snapshots of {h} attention maps of {T} x {T}"
    return BASELINE_BYTES + need + held, what


def memory_estimate(cfg: ml_collections.ConfigDict) -> memory.MemoryEstimate:
    """The largest program's peak resident memory, by shape arithmetic (no compiling, no
    allocation): the max over the config's structural cells of `_cell_bytes`."""
    return memory.estimate_memory(cfg, TRACED, _cell_bytes, _MEMORY_FIELDS, default_config)
