"""Execute the tutorials and store them with their outputs, for the site to render unexecuted:

    python -m experiments.tutorials                    # every tutorial (5-10 min on 2 busy cores)
    python -m experiments.tutorials sweep own_task     # some of them

docs/tutorials/<name>.py (jupytext's percent format) is the source; each runs in a fresh
kernel from the repository root, and docs/tutorials/<name>.ipynb is written with its outputs,
PNG outputs recompressed (a palette of 256 colours) so that a notebook stays a few hundred KB.
An output that shows a path of this machine stops the command: tutorials print relative paths.
tests/docs/test_docs.py checks that each stored notebook's cells are the .py's.
"""

from __future__ import annotations

import base64
import io
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "docs" / "tutorials"
MACHINE_PATHS = (str(ROOT), "/home/", "/tmp/", "/work/")


def names() -> list[str]:
    """Every tutorial: the .py files of docs/tutorials/."""
    return sorted(p.stem for p in TUTORIALS.glob("*.py"))


def compress_png(data: str) -> str:
    """A base64 PNG as a 256-colour palette PNG (what matplotlib's line plots need)."""
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(data)))
    out = io.BytesIO()
    image.convert("RGB").quantize(256).save(out, format="PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode()


def execute(name: str, timeout: int = 1800) -> tuple[pathlib.Path, float]:
    """Run docs/tutorials/<name>.py as a notebook and write <name>.ipynb; returns the path and
    the seconds it took."""
    import jupytext
    import nbclient

    notebook = jupytext.read(TUTORIALS / f"{name}.py")
    notebook.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    started = time.perf_counter()
    client = nbclient.NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": ROOT}}
    )
    client.execute()
    seconds = time.perf_counter() - started
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                data["image/png"] = compress_png(data["image/png"])
            text = str(output)
            shown = [p for p in MACHINE_PATHS if p in text]
            if shown:
                raise SystemExit(f"{name}: an output shows the path {shown[0]}: {text[:300]}")
    path = TUTORIALS / f"{name}.ipynb"
    jupytext.write(notebook, path, fmt="ipynb")
    return path, seconds


def main(argv: list[str]) -> int:
    chosen = argv[1:] or names()
    unknown = sorted(set(chosen) - set(names()))
    if unknown:
        print(f"no tutorial {', '.join(unknown)}: the tutorials are {', '.join(names())}.")
        return 2
    for name in chosen:
        path, seconds = execute(name)
        size = path.stat().st_size / 1024
        print(f"{path.relative_to(ROOT)}: {seconds:.0f} s, {size:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
