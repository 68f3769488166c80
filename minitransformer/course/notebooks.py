"""The chapters as notebooks: run a lesson in a real Jupyter kernel, and turn the result into
a page of the documentation site.

    notebook = run_chapter("lessons/05_scaled_dot_product_attention.py")   # executed
    page = chapter_page(notebook, "05_scaled_dot_product_attention")
    page.markdown, page.files        # the page's Markdown; {name: bytes} of its figures

A lesson is a ``# %%`` script; jupytext reads it as a notebook (markdown and code cells),
nbclient runs it cell by cell in an IPython kernel, as JupyterLab would, so what a cell
prints and the figures it shows (matplotlib's inline backend, or an SVG such as a graphviz
drawing) become the cell's outputs. A cell that raises stops the run with the chapter, the
cell and the error named.

The page keeps the prose as it is (its ``$...$`` math is typeset by the site), each code cell
as a Python block, and under it what the cell printed and the figures it showed, in the
order they came. Needs the ``course`` or ``docs`` extra (jupytext, nbclient, ipykernel).
"""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAST_ENV = "MINITRANSFORMER_FAST"  # the lessons' fast mode, as the tests run them


class ChapterError(RuntimeError):
    """A chapter failed to run in its kernel, or ran without what its page needs."""


def _libraries() -> tuple[Any, Any]:
    try:
        import jupytext
        import nbclient
    except ImportError as exc:
        raise ChapterError("running a chapter as a notebook needs jupytext, nbclient and "
                           "ipykernel: pip install -e \".[course]\"") from exc
    return jupytext, nbclient


def run_chapter(path: str | Path, fast: bool = False, timeout: int = 900,
                cwd: str | Path | None = None) -> Any:
    """The chapter at ``path`` executed top to bottom in a fresh IPython kernel: a notebook
    (nbformat) whose code cells hold their outputs. ``fast`` runs the lesson's fast mode;
    ``cwd`` is where it runs (default: a temporary folder, so that the figures and runs it
    writes are not left beside the lessons); ``timeout`` is per cell, in seconds."""
    jupytext, nbclient = _libraries()
    path = Path(path)
    notebook = jupytext.read(path)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    env = {k: v for k, v in os.environ.items() if k not in (FAST_ENV, "MPLBACKEND")}
    if fast:
        env[FAST_ENV] = "1"
    with tempfile.TemporaryDirectory() as scratch:
        where = str(cwd or scratch)
        client = nbclient.NotebookClient(notebook, kernel_name="python3", timeout=timeout,
                                         resources={"metadata": {"path": where}},
                                         extra_arguments=["--IPKernelApp.log_level=ERROR"])
        try:
            client.execute(env=env)
        except nbclient.exceptions.CellExecutionError as exc:
            raise ChapterError(f"{path.name} failed in {_failed_cell(notebook)}: "
                               f"{exc.ename}: {exc.evalue}") from exc
    return notebook


def _failed_cell(notebook: Any) -> str:
    """'cell N (its first line)' for the cell whose output is an error (N counts from 1)."""
    for number, cell in enumerate(notebook.cells, start=1):
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            return f"cell {number} ({first.strip()[:80]})"
    return "a cell"


@dataclass
class ChapterPage:
    """A chapter as a documentation page: Markdown, and the figure files it links to
    (``{file name: bytes}``, placed in the folder named ``assets`` beside the page)."""

    markdown: str
    files: dict[str, bytes] = field(default_factory=dict)
    n_outputs: int = 0
    n_figures: int = 0
    repeated: list[int] = field(default_factory=list)  # cells that showed a figure twice


_IMAGES = (("image/svg+xml", "svg"), ("image/png", "png"))


def chapter_page(notebook: Any, assets: str, downloads: str = "") -> ChapterPage:
    """The executed ``notebook`` as Markdown: prose as written, code in Python blocks, each
    cell's printed output in a text block under it (class ``chapter-output``) and its figures
    as images (class ``chapter-figure``), saved as ``assets/figure-N.png`` or ``.svg``.
    ``downloads``, when given, is a line of Markdown put under the chapter's title."""
    page = ChapterPage(markdown="")
    parts: list[str] = []
    for index, cell in enumerate(notebook.cells):
        source = cell.source.rstrip()
        if cell.cell_type == "markdown":
            if index == 0 and downloads:
                title, _, rest = source.partition("\n")
                source = f"{title}\n\n{downloads}\n\n{rest.lstrip()}" if title.startswith(
                    "# ") else f"{downloads}\n\n{source}"
            parts.append(source)
        elif cell.cell_type == "code" and source:
            parts.append(f"```python\n{source}\n```")
            parts.extend(_outputs(cell.get("outputs", []), assets, page, index))
    page.markdown = "\n\n".join(parts) + "\n"
    return page


def _outputs(outputs: list, assets: str, page: ChapterPage, index: int) -> list[str]:
    blocks: list[str] = []
    text: list[str] = []
    seen: set[str] = set()

    def flush() -> None:
        if text:
            body = "".join(text).rstrip("\n")
            fence = "````" if "```" in body else "```"
            blocks.append(f'<div class="chapter-output" markdown>\n\n{fence}text\n{body}\n'
                          f"{fence}\n\n</div>")
            page.n_outputs += 1
            text.clear()

    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            text.append(output.get("text", ""))
            continue
        data = output.get("data", {})
        image = next(((mime, ext) for mime, ext in _IMAGES if mime in data), None)
        if image is not None:
            flush()
            mime, ext = image
            if data[mime] in seen:  # a figure returned as the cell's value and shown again
                page.repeated.append(index)
                continue
            seen.add(data[mime])
            page.n_figures += 1
            name = f"figure-{page.n_figures}.{ext}"
            raw = data[mime]
            page.files[name] = (raw.encode("utf-8") if ext == "svg"
                                else base64.b64decode(raw))
            blocks.append(f'<figure class="chapter-figure" markdown>\n\n'
                          f"![Figure {page.n_figures}]({assets}/{name})\n\n</figure>")
        elif "text/plain" in data:
            text.append(data["text/plain"] + "\n")
    flush()
    return blocks
