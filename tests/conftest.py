"""Tests run in float64: landscape and theory checks compare against closed forms.

Library code is dtype-explicit (training casts to its config's dtype), so enabling x64 here does not
change what a float32 training run computes.

One persistent compilation cache serves the whole session: the CLI subprocesses some tests start
(they inherit the environment) write it, and they and pytest-xdist's workers read it; they
compile many identical programs. From an empty cache, tests/engine/test_resume.py, test_cli.py and
markov/test_points.py took 2:57 instead of 4:05 on 2 cores. A cache hit is the same executable
(the key covers the program, the compile options and the JAX version), so no number changes.
"""

import atexit
import os
import shutil
import tempfile

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # set before jax reads its environment
    _cache = tempfile.mkdtemp(prefix="landscape-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

# The suite compiles many small programs and runs them briefly: LLVM's -O0 cuts its CPU time by
# about a quarter (tests/recall, test_wikitext and test_trap_study: 283 s -> 209 s). XLA's HLO
# passes and fusions are unchanged; only the machine code is less optimised.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()
# On a GPU each pytest-xdist worker would preallocate 75% of the device's memory, so a second
# worker ran out of it (CUDA_ERROR_OUT_OF_MEMORY in 33 of 39 probe tests with 4 workers): every
# worker allocates what it uses instead. No effect on CPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

from landscape.engine import memory  # noqa: E402

jax.config.update("jax_enable_x64", True)
# The workers read the shared cache but do not write it (the CLI subprocesses, which compile
# most of the long programs, still do). Twice a worker's write aborted inside XLA's executable
# serialisation; those workers were most likely at their limit on memory mappings (below).
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)


@pytest.fixture(autouse=True)
def _restore_matmul_precision():
    """The CLIs set float32 dots for their process (`backend.use_float32_matmuls`); a test that
    runs one in-process must not hand that setting to the tests after it in its worker."""
    before = jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_default_matmul_precision", before)


# The longest tests first, in this order, so that neither pytest-xdist worker is left with a
# long one at the end (the rest run in name order). With -m slow, the full quick report (~6 min,
# its own two worker processes) leads; by default the 8-device subprocess (~110 s, the setup of
# the first sharded test) and the golden answers (~60 s, both tests, so that their module's
# fixture is computed once). The streamed list's every probe and the stream's eigenpairs follow
# the golden answers in their worker: the same model, data, chunk and sizes, so most of their
# programs are compiled already; so does the README's tour (the same Markov points' escape).
LONGEST_FIRST = (
    "tests/experiments/test_report.py::test_quick_report_evaluates_every_claim_and_draws_every_figure",
    "tests/ngrams/test_experiment.py::test_smoke_fig3_first_transition",
    "tests/markov/test_experiment.py::test_fig3_theory_model_tied_trap_and_untied_bigram",
    "tests/experiments/test_report.py::test_quick_report_of_one_paper_runs_its_configs_and_writes_the_pages",
    "tests/probes/test_sharded.py::test_the_probes_on_a_split_model_give_one_devices_numbers",
    "tests/probes/test_golden.py::test_the_same_answers_are_computed",
    "tests/probes/test_golden.py::test_every_answer_equals_the_golden_file",
    "tests/core/test_stream.py::test_a_stream_is_its_stacked_form[a list, the last chunk padded]",
    "tests/core/test_stream.py::test_eigenpairs_and_the_dense_probes_over_a_stream_are_the_stacked_forms[hessian]",
    "tests/core/test_stream.py::test_eigenpairs_and_the_dense_probes_over_a_stream_are_the_stacked_forms[ggn]",
    "tests/docs/test_doc_blocks.py::test_the_blocks_of_a_page_run[README.md]",
)


_STARTED: list[str] = []  # this worker's tests, in the order they started


def pytest_runtest_logstart(nodeid, location):
    _STARTED.append(nodeid)


@pytest.fixture
def tests_before() -> list[str]:
    """The five tests that ran before this one in this worker process, the last one last: what
    a test that fails only in some orders reports (xdist hands out tests in no fixed order)."""
    return _STARTED[-6:-1]


_MODULE: list[str] = [""]  # the test file this worker runs now


def pytest_runtest_setup(item):
    """At each new test file, drop JAX's compiled programs once this worker holds a quarter of
    its limit on memory mappings: XLA:CPU keeps each executable's code in mappings, and at the
    limit the next compile dies in a segfault (in about one full run in two before; the core of
    one held 65,378 of the 65,530 mappings: docs/architecture.md, "Long-lived processes")."""
    if item.nodeid.split("::")[0] != _MODULE[0]:
        _MODULE[0] = item.nodeid.split("::")[0]
        memory.free_programs_near_the_map_limit(share=0.25)


# A test whose worker dies of a fatal signal runs once more in a fresh worker; a second crash
# fails it. Each rerun is listed at the end of the output, and a failing assertion is never
# rerun.
_RERUN_AFTER_CRASH: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    if crashitem not in _RERUN_AFTER_CRASH:
        _RERUN_AFTER_CRASH.append(crashitem)
        sched.mark_test_pending(crashitem)
        report.outcome = "rerun"


def pytest_report_teststatus(report):
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter):
    if _RERUN_AFTER_CRASH:
        terminalreporter.section("run again after their worker crashed", yellow=True)
        for nodeid in _RERUN_AFTER_CRASH:
            terminalreporter.line(nodeid)


def pytest_collection_modifyitems(config, items):
    rank = {nodeid: i for i, nodeid in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))  # a stable sort


@pytest.fixture(autouse=True)
def _fresh_losses_counted_per_test():
    """The warning for a loss_fn made afresh per point counts within one test, as within one
    user's loop: the helpers of many tests making a point each are not one loop."""
    from landscape import _checks

    _checks._FRESH.clear()
    _checks._WARNED.clear()
    yield
