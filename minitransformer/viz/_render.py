"""What every picture of ``viz`` needs: matplotlib without a window, saving a figure, and
Graphviz, whose missing parts are named with the way to install them.

Matplotlib and Graphviz are imported here, inside the functions, the first time a picture is
drawn: importing ``viz`` costs nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..files import written_whole

INSTALL_DOT = ("`apt-get install graphviz` on Debian or Ubuntu, `brew install graphviz` on macOS, "
               "`conda install -c conda-forge graphviz` in a conda environment")
MISSING_DOT = ("Drawing a graph needs Graphviz's `dot` program, which is not installed or not on "
               f"PATH: install Graphviz ({INSTALL_DOT}), then run this again.")
MISSING_PACKAGE = ("Drawing a graph needs the `graphviz` Python package, which is not "
                   "installed: `pip install graphviz` (and Graphviz's `dot` program: "
                   f"{INSTALL_DOT}).")


RASTER_FORMATS = {"png", "jpg", "jpeg", "gif", "bmp", "tif", "tiff", "webp"}


class GraphvizMissing(RuntimeError):
    """Graphviz (the Python package, or its ``dot`` program) is not installed."""


def pyplot() -> Any:
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: str | Path | None) -> Any:
    """Write ``figure`` to ``path`` (its suffix names the format) if one is given; return it."""
    if path is None:
        return figure
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.suffix:  # matplotlib names the format and adds its suffix itself
        figure.savefig(path, dpi=120, bbox_inches="tight")
    else:
        written_whole(path, lambda temporary: figure.savefig(temporary, dpi=120,
                                                             bbox_inches="tight"))
    return figure


def graphviz_module() -> Any:
    try:
        import graphviz
    except ImportError:
        raise GraphvizMissing(MISSING_PACKAGE) from None
    return graphviz


def digraph(**attributes: Any) -> Any:
    """A ``graphviz.Digraph`` that a notebook shows as SVG, and that names what to install
    when ``dot`` is missing instead of failing with a traceback from inside graphviz."""
    return _drawing_class()(**attributes)


@functools.cache
def _drawing_class() -> type:
    graphviz = graphviz_module()

    class Drawing(graphviz.Digraph):
        def _repr_mimebundle_(self, include: Any = None, exclude: Any = None,
                              **kwargs: Any) -> Any:
            try:
                return super()._repr_mimebundle_(include, exclude, **kwargs)
            except graphviz.ExecutableNotFound:
                raise GraphvizMissing(MISSING_DOT) from None

    return Drawing


def save_graph(graph: Any, path: str | Path | None) -> Any:
    """Write ``graph`` to ``path`` if one is given: ``.gv`` or ``.dot`` as its source, any
    other suffix (``.svg``, ``.png``, ``.pdf``) laid out by ``dot`` in that format."""
    if path is None:
        return graph
    graphviz = graphviz_module()
    path = Path(path)
    suffix = path.suffix[1:].lower()
    if suffix not in {"gv", "dot"} and suffix not in graphviz.FORMATS:
        raise ValueError(f"cannot write a graph to {str(path)!r}: give a file name ending in "
                         ".svg, .png, .pdf (or another format of Graphviz), or .gv for the "
                         "source.")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix in {"gv", "dot"}:
        written_whole(path, lambda temporary: temporary.write_text(graph.source,
                                                                   encoding="utf-8"))
        return graph
    laid_out = graph
    if suffix in RASTER_FORMATS:  # Graphviz's 96 dots per inch blur small labels
        laid_out = graph.copy()
        laid_out.attr(dpi="144")
    try:
        picture = laid_out.pipe(format=suffix)
    except graphviz.ExecutableNotFound:
        raise GraphvizMissing(MISSING_DOT) from None
    written_whole(path, lambda temporary: temporary.write_bytes(picture))
    return graph
