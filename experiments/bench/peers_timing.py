"""Our probes against PyHessian and curvlinops on the same model and data, each probe in a
fresh process: `python -m experiments.benchmark --only=peers [--peers.sizes=1e4,1e5]`.

Data: peers_data.py, written once per size to a file every process reads; models: peers.py (JAX)
and peers_torch.py. A child (`--peers.one=framework:size:probe:threads:device`) imports its own
framework alone (a peer's child never imports JAX), then times the first call (compile
included), a warm one, its memory after the imports and its peak RSS; the parent
(`bench_peers`) compares the answers. The `eigsh` rows are scipy's ARPACK over our `hvp_flat`
(the standard our search's product count is held to). PyHessian's density() needs torch.eig
(gone in torch 2): the child patches it in.
"""

from __future__ import annotations

from absl import app, flags

from experiments.bench.peers_timing_rows import child

_ONE = flags.DEFINE_string("peers.one", None, "Child: framework:size:probe:threads:device.")
flags.DEFINE_list(
    "peers.sizes", ["1e4", "1e5"], "Of 1e3, 1e4, 1e5, 1e6, 1e7, wikitext, wikitext_paper."
)
flags.DEFINE_list(
    "peers.probes",
    ["hvp", "top1", "top5", "top1_rtol", "top5_rtol", "trace", "slq"],
    "Probes; also ggn_top5, ggn_trace (the Gauss-Newton matrix), stream_trace and stream_top5 "
    "(4 batches, streamed).",
)
flags.DEFINE_list(
    "peers.frameworks",
    ["ours", "eigsh", "pyhessian", "curvlinops"],
    "Frameworks (eigsh: scipy's ARPACK over our hvp_flat).",
)
flags.DEFINE_list("peers.threads", ["1", "all"], "torch threads (all: every core).")
flags.DEFINE_string("peers.data", None, "Child: the folder of peers_data.save's files.")
flags.DEFINE_integer("peers.timeout", 600, "Seconds a child process may take.")
flags.DEFINE_float("peers.rtol", 1e-3, "Our eigenpairs' rtol in the *_rtol probes.")
flags.DEFINE_float(
    "peers.warm_below", 300.0, "Skip the warm call when the first took longer (seconds)."
)


def main(argv: list[str]) -> None:
    del argv
    if not _ONE.value:
        raise app.UsageError("run it as python -m experiments.benchmark --only=peers")
    child(_ONE.value)


if __name__ == "__main__":
    app.run(main)
