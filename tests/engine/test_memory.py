"""Memory estimates (shape arithmetic, before compiling) and the chunked n-gram snapshot."""

import importlib
import time

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from landscape.core import memory as core_memory
from landscape.engine import config as config_lib
from landscape.engine import memory
from landscape.markov import experiment as markov
from landscape.ngrams import estimators
from landscape.ngrams import experiment as ngrams
from landscape.ngrams import model as ngram_model
from landscape.recall import experiment as recall
from landscape.scan_snap import experiment as scan_snap

LIMIT = 4e9  # every shipped config runs in at most 4 GB resident memory
CONFIGS = {  # config file -> (package, variants)
    "ngrams": (ngrams, None),
    "markov": (markov, None),
    "recall": (recall, None),
    "syn_small": (scan_snap, ("fig4", "fig4_left", "fig4_right", "fig5_adam")),
    "syn_medium": (scan_snap, ("paper", "quick")),
    "scan_snap_theory": (scan_snap, (None,)),
}


def shipped():
    for name, (package, variants) in CONFIGS.items():
        module = importlib.import_module(f"configs.{name}")
        for variant in variants or module.VARIANTS:
            yield (
                name,
                variant,
                package,
                (module.get_config(variant) if variant else module.get_config()),
            )


@pytest.mark.parametrize(
    "name, variant, package, cfg", [pytest.param(*c, id=f"{c[0]}:{c[1]}") for c in shipped()]
)
def test_shipped_configs_fit_in_4gb(name, variant, package, cfg):
    start = time.perf_counter()
    estimate = package.memory_estimate(cfg)
    assert time.perf_counter() - start < 0.05  # shape arithmetic: ~1 ms (loaded CI: slack)
    assert 0 < estimate.bytes <= LIMIT, (estimate.bytes, estimate.what)
    assert estimate.what and config_lib.get(cfg, estimate.field) is not None
    package.validate(cfg)  # the check at the end of validate passes


def _absurd(name, variant, fields):
    module = importlib.import_module(f"configs.{name}")
    return config_lib.with_fields(module.get_config(variant), fields)


@pytest.mark.parametrize(
    "package, cfg, field",
    [
        (ngrams, _absurd("ngrams", "smoke", {"task.seq_len": 10_000_000}), "task.seq_len"),
        (ngrams, _absurd("ngrams", "fig4", {"task.seq_len": 100_000}), "task.seq_len"),
        (
            ngrams,
            _absurd("ngrams", "smoke", {"train.test_sequences": 10**10}),
            "train.test_sequences",
        ),
        (ngrams, _absurd("ngrams", "smoke", {"train.batch_size": 10**9}), "train.batch_size"),
        (markov, _absurd("markov", "fig3", {"model.seq_len": 10**6}), "model.seq_len"),
        (markov, _absurd("markov", "fig3", {"train.batch_size": 10**9}), "train.batch_size"),
        (scan_snap, _absurd("syn_small", "fig4", {"train.batch_size": 10**9}), "train.batch_size"),
        (scan_snap, _absurd("syn_small", "fig4", {"train.num_steps": 10**12}), "train.num_steps"),
        (markov, _absurd("markov", "fig3", {"train.num_steps": 10**14}), "train.num_steps"),
        (recall, _absurd("recall", "fig1", {"train.batch_size": 10**12}), "train.batch_size"),
        (recall, _absurd("recall", "first_jump", {"flow.num_saves": 10**10}), "flow.num_saves"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_absurd_sizes_are_refused_before_allocating(package, cfg, field):
    start = time.perf_counter()
    with pytest.raises(config_lib.ConfigError, match="needs about") as error:
        package.validate(cfg)
    assert f"lower config.{field}." in str(error.value)
    assert time.perf_counter() - start < 1.0  # no compiling, no allocation


def test_check_memory_against_a_given_budget():
    estimate = memory.MemoryEstimate(3e9, "the test set", "train.test_sequences")
    memory.check_memory(estimate, available=4e9)
    memory.check_memory(None, available=1.0)
    with pytest.raises(config_lib.ConfigError) as error:
        memory.check_memory(estimate, available=2e9)
    message = str(error.value)
    assert "needs about 3 GB" in message and "(the test set)" in message
    assert "2 GB of memory is available" in message
    assert message.endswith("lower config.train.test_sequences.")


def test_chunked_ngram_snapshot_matches_the_whole_test_set():
    """The snapshot's loss and two-half gradient over chunks (the last one padded) = the
    one-batch formula. Random sequences and targets: no sampler to compile."""
    module = importlib.import_module("configs.ngrams")
    cfg = config_lib.with_fields(module.get_config("smoke"), {"task.seq_len": 12})
    model, floor = ngrams.model_of(cfg), cfg.train.floor
    params = ngrams.model_lib.init_params(jax.random.key(3), model)
    key_x, key_y = jax.random.split(jax.random.key(4))
    x = jax.random.randint(key_x, (50, 12), 0, cfg.task.num_states)
    y = jax.nn.softmax(jax.random.normal(key_y, (50, cfg.task.num_states)))

    def half_loss(p, x, y):
        return jnp.mean(estimators.cross_entropy(ngram_model.probs(p, x, model), y, floor))

    @jax.jit
    def both(params):
        whole = [
            jax.value_and_grad(half_loss)(params, x[s], y[s]) for s in (slice(0, 25), slice(25, 50))
        ]
        chunked = [
            ngrams._mean_loss_and_grad(params, model, floor, *ngrams._chunked(x[s], y[s], 7))
            for s in (slice(0, 25), slice(25, 50))
        ]  # 4 chunks, 3 padded rows
        return whole, chunked

    def loss_and_norm(halves):
        (loss_a, g_a), (loss_b, g_b) = halves
        dot = sum(
            jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(g_a), jax.tree.leaves(g_b), strict=True)
        )
        return (loss_a + loss_b) / 2, jnp.sign(dot) * jnp.sqrt(jnp.abs(dot))

    whole, chunked = both(params)
    np.testing.assert_allclose(loss_and_norm(chunked), loss_and_norm(whole), rtol=1e-4)
    chex.assert_trees_all_close(chunked[0][1], whole[0][1], rtol=1e-4, atol=1e-7)


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_memory_available_is_the_least_room_under_every_cgroup_limit(tmp_path):
    """A fake /proc and /sys/fs/cgroup: the process's own v2 cgroup (a Slurm step) sets no limit,
    its parent (the job) 8 GB holding 5 GB of which 1 GB page cache it can drop: 4 GB of room,
    less than MemAvailable (16 GB); a v1 memory cgroup of 3 GB holding 1 GB gives 2 GB."""
    proc, sys_cgroup = tmp_path / "proc", tmp_path / "cgroup"
    _write(proc / "meminfo", "MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\n")
    _write(proc / "self/cgroup", "0::/slurm/job_7/step_0\n")
    _write(sys_cgroup / "cgroup.controllers", "cpu memory\n")
    _write(sys_cgroup / "memory.stat", "anon 1\n")  # the root: no memory.max
    job = sys_cgroup / "slurm/job_7"
    _write(job / "memory.max", f"{8 * 2**30}\n")
    _write(job / "memory.current", f"{5 * 2**30}\n")
    _write(job / "memory.stat", f"anon {4 * 2**30}\ninactive_file {2**30}\nactive_file 0\n")
    _write(job / "step_0/memory.max", "max\n")
    _write(job / "step_0/memory.current", f"{2**30}\n")
    assert core_memory._available(proc, sys_cgroup) == 4 * 2**30
    _write(job / "memory.max", "max\n")
    assert core_memory._available(proc, sys_cgroup) == 16 * 2**30  # no limit: MemAvailable
    # cgroup v1 (and a v2 line on a hybrid mount without a limit)
    _write(proc / "self/cgroup", "4:memory:/batch/1\n0::/\n")
    _write(sys_cgroup / "memory/batch/1/memory.limit_in_bytes", f"{3 * 2**30}\n")
    _write(sys_cgroup / "memory/batch/1/memory.usage_in_bytes", f"{2**30}\n")
    _write(sys_cgroup / "memory/memory.limit_in_bytes", "9223372036854771712\n")  # v1's none
    assert core_memory._available(proc, sys_cgroup) == 2 * 2**30
    assert core_memory._available(tmp_path / "none", tmp_path / "none") == float("inf")


def test_the_memory_available_respects_the_address_space_limit():
    """A process under `ulimit -v` (RLIMIT_AS) 1 GB above the address space it has: about 1 GB
    is available, whatever the machine's free memory."""
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from landscape.engine import memory\n"
        "status = open('/proc/self/status').read().split('VmSize:')[1].split()[0]\n"
        "resource.setrlimit(resource.RLIMIT_AS, (int(status) * 1024 + 2**30, "
        "resource.RLIM_INFINITY))\n"
        "print(memory.available_memory_bytes())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    available = float(out.stdout.strip())
    assert 0.9 * 2**30 < available <= 2**30


def test_memory_mappings_are_counted_against_the_kernels_limit(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "maps").write_text("00400000-00452000 r-xp 0 08:02 1 /bin/x\n" * 7)
    assert memory.memory_mappings(tmp_path) is None  # no limit to compare with
    (tmp_path / "sys" / "vm").mkdir(parents=True)
    (tmp_path / "sys" / "vm" / "max_map_count").write_text("65530\n")
    assert memory.memory_mappings(tmp_path) == (7, 65530)
    here = memory.memory_mappings()
    assert here is None or 0 < here[0] < here[1]


@pytest.mark.parametrize("held, dropped", [(40, False), (60, True)])
def test_compiled_programs_are_dropped_past_a_share_of_the_map_limit(monkeypatch, held, dropped):
    """Past `share` of vm.max_map_count the compiled programs go (each keeps its code in
    mappings, and at the limit XLA's next compile dies); below it they stay."""
    f = jax.jit(lambda x: x * 3.0)
    assert float(f(jnp.float32(2.0))) == 6.0 and f._cache_size() == 1
    monkeypatch.setattr(memory, "memory_mappings", lambda: (held, 100))
    assert memory.free_programs_near_the_map_limit(share=0.5) is dropped
    assert f._cache_size() == (0 if dropped else 1)
    assert float(f(jnp.float32(2.0))) == 6.0  # compiled again where it was dropped
