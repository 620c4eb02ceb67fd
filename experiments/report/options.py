"""The report's flags (`python -m experiments.report`, experiments/report/command.py): which
configs at which scale, where their records and the report go, and what it also writes."""

from absl import flags

from experiments.report import catalog

SCALE = flags.DEFINE_enum(
    "scale",
    "cpu",
    ["cpu", "paper"],
    "Which configs: the CPU-sized ones or the paper-scale ones (hours on a CPU).",
)
QUICK = flags.DEFINE_bool(
    "quick",
    False,
    "Every cpu config at its smallest size: checks that "
    "every claim is evaluated and every figure drawn, not the claims.",
)
ONLY = flags.DEFINE_list(
    "only", [], f"Papers to include (default all): {', '.join(catalog.PAPERS)}."
)
REUSE = flags.DEFINE_bool(
    "reuse",
    False,
    "Reuse complete records of the same config, code and JAX version instead of running again.",
)
OUT = flags.DEFINE_string("out", "report", "Folder of REPORT.md, index.html, SUMMARY.md.")
RUNS = flags.DEFINE_string(
    "runs",
    "runs/report",
    "Folder of the configs' records (<runs>/<scale or quick>/<config name>/).",
)
SET = flags.DEFINE_multi_string(
    "set",
    [],
    "FIELD=VALUE for every config that has the field, "
    "e.g. --set=text.path=/data/wikitext-2 (repeatable).",
)
JOBS = flags.DEFINE_integer(
    "jobs",
    None,
    "Configs run at once, each in its own process "
    "(default: 2 with --quick, whose small programs are mostly "
    "single-threaded tracing; else 1).",
    lower_bound=1,
)
LIST = flags.DEFINE_bool("list", False, "Print the plan and exit.")
README = flags.DEFINE_bool(
    "readme",
    False,
    "Also put the summary table into README.md (between its report markers) and, linked, "
    "into docs/index.md.",
)
DOCS_FIGURES = flags.DEFINE_bool(
    "docs_figures",
    False,
    "Run nothing: copy each figure's chosen PNGs from the records (--runs; CPU scale, else "
    "--quick) into docs/figures/<paper>/, and README's summary table into docs/index.md.",
)
