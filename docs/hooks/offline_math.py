"""A MkDocs hook: the site serves its own MathJax, so the maths renders offline (no CDN).

The docs extra installs MathJax 3 as a Python package (django-static-mathjax, Apache-2.0, no
dependencies); after each build this hook copies the one component the pages load
(tex-mml-chtml.js), its fonts and its TeX extensions into site/javascripts/mathjax/.
"""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
from typing import Any

from mkdocs.exceptions import PluginError

TARGET = "javascripts/mathjax"
PARTS = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions")


def mathjax_root() -> pathlib.Path:
    """The installed MathJax's es5 folder; a PluginError in one sentence if it is missing."""
    spec = importlib.util.find_spec("mathjax")
    folder = None
    if spec is not None and spec.submodule_search_locations:
        folder = pathlib.Path(next(iter(spec.submodule_search_locations))) / "static/mathjax/es5"
    if folder is None or not (folder / PARTS[0]).is_file():
        raise PluginError(
            "MathJax is not installed: pip install -e '.[docs]' (it brings "
            "django-static-mathjax, which the site serves its maths with)."
        )
    return folder


def on_config(config: Any) -> Any:
    mathjax_root()  # fail before building, not after
    return config


def on_post_build(config: Any) -> None:
    source, site = mathjax_root(), pathlib.Path(config["site_dir"]) / TARGET
    for part in PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, site / part, dirs_exist_ok=True)
        else:
            (site / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / part, site / part)
