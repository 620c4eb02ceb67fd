"""A tutorial run as a notebook in a fresh kernel and stored with its outputs (tools/tutorials.py
is the command): PNG outputs recompressed, and an output that shows a path of this machine
refused."""

from __future__ import annotations

import base64
import io
import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "docs" / "tutorials"
MACHINE_PATHS = (str(ROOT), "/home/", "/tmp/", "/work/")


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
