"""Command-line modules stay thin: a module of experiments/ or tools/ that runs as a program
(`if __name__ == "__main__":`) or defines flags holds at most 80 lines, what it runs living in a
module of its concern (the engine's config parsing, the report's making, the study pages)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_COMMAND_LINES = 80
# experiments/bench/: a group's flags and main in its command module, its rows in <name>_rows.py
FOLDERS = ("experiments", "experiments/report", "experiments/bench", "tools")


def _is_command(text: str) -> bool:
    return 'if __name__ == "__main__":' in text or "flags.DEFINE_" in text


def test_every_command_line_module_is_short():
    long = [
        f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines"
        for folder in FOLDERS
        for path in sorted((ROOT / folder).glob("*.py"))
        if _is_command(text := path.read_text()) and len(text.splitlines()) > MAX_COMMAND_LINES
    ]
    assert not long, f"command-line modules over {MAX_COMMAND_LINES} lines:\n" + "\n".join(long)


def test_a_command_is_told_by_its_main_guard_or_its_flags():
    assert _is_command('if __name__ == "__main__":\n    main()\n')
    assert _is_command('X = flags.DEFINE_bool("x", False, "X.")\n')
    assert not _is_command("def main() -> int:\n    return 0\n")
