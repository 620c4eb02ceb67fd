"""The flags of a run's command line (`python -m experiments.<paper>`, `experiments.run`): its
config, its workdir and how to treat one that holds records; the process's own flags (devices,
compilation cache, several processes) are experiments/host.py's."""

from absl import flags

CONFIG = flags.DEFINE_string(
    "config", None, "configs/<file>.py[:variant], or a workdir's config.json to rerun it."
)
WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (default runs/<name>/<UTC time>/).")
OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Remove the files earlier runs wrote in the workdir first (and no other)."
)
KEEP_OTHERS = flags.DEFINE_bool(
    "keep_others",
    False,
    "With --overwrite: keep files in the workdir that no run wrote, instead of refusing.",
)
FORCE = flags.DEFINE_bool(
    "force",
    False,
    "With --overwrite, for a workdir whose manifest.json cannot be read: remove the files a run "
    "writes, recognised by their names, and keep the rest.",
)
RESUME = flags.DEFINE_bool(
    "resume",
    False,
    "Continue the run recorded in --workdir from its "
    "latest checkpoint (--config may then be left out).",
)
OTHER_CODE = flags.DEFINE_bool(
    "other_code",
    False,
    "With --resume: continue a run that other code wrote (the library's sources changed since); "
    "config.json's provenance and manifest.json record it.",
)
CHECKPOINT_SECONDS = flags.DEFINE_float(
    "checkpoint_seconds",
    60.0,
    "Save the training state at least this often (at chunk "
    "boundaries; also when a program ends or is stopped).",
    lower_bound=0.0,
)


def parse(argv: list[str]) -> None:
    """Read `argv` (argv[0] the program) into the flags, every flag first reset to its default;
    a mistake is one sentence (`UsageError`)."""
    from landscape.engine.overrides import UsageError

    flags.FLAGS.unparse_flags()
    try:
        extra = flags.FLAGS(argv)
    except flags.Error as error:
        message = str(error).replace(" ?", "?")  # absl: "Did you mean: x ?"
        raise UsageError(message if message.endswith((".", "?")) else message + ".") from None
    if len(extra) > 1:
        raise UsageError(f"unexpected argument {extra[1]!r}: flags are --name=value.")
