"""MkDocs hook: the course's chapters, run during the build and put on the site with their
outputs; the teachers' answers (lessons/answers/) beside them, reached from the teaching
guide's answers page rather than from the chapters; and the home page's picture of the
model, drawn from the code.

Each lesson in lessons/ is run top to bottom in a Jupyter kernel, in its full mode (the mode
a student runs, not the tests' fast mode), by ``minitransformer.course.notebooks``. Its page
shows every code cell with what it printed and the figures it drew; beside the page the site
offers the executed notebook (outputs included) and the script for download. A chapter that
raises fails the build, and so does one that shows no output, or fewer figures than it saved
as files (a figure drawn but never shown).

The home page's Figure 1 (img/model.svg) is drawn by ``viz.draw_model`` from the `small`
configuration at each build, so it cannot fall out of step with the model.

Running every chapter takes a few minutes on two cores (most of it chapters 14, 16, 19 and 22,
which train). Results are cached in .cache/chapters/, keyed by the lesson's text and the
package's source, so a rebuild runs only what changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tempfile
import time
from pathlib import Path

import mkdocs.plugins
import nbformat
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from minitransformer.course.notebooks import ChapterError, chapter_page, run_chapter

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
ANSWERS = LESSONS / "answers"
PACKAGE = ROOT / "minitransformer"
CACHE = ROOT / ".cache" / "chapters"
FORMAT = "3"  # bump when what is cached changes shape

log = logging.getLogger("mkdocs.hooks.chapters")


def chapters() -> list[Path]:
    return sorted(LESSONS.glob("[0-9][0-9]_*.py"))


def _key(lesson: Path) -> str:
    digest = hashlib.sha256(FORMAT.encode())
    for path in [lesson, *sorted(PACKAGE.rglob("*.py"))]:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _executed(lesson: Path) -> tuple[nbformat.NotebookNode, int]:
    """The chapter run in full mode (from the cache when nothing it depends on changed), and
    the number of picture files it wrote."""
    cached = CACHE / f"{lesson.stem}.{_key(lesson)}.ipynb"
    if cached.exists():
        notebook = nbformat.read(cached, as_version=4)
        return notebook, notebook.metadata["minitransformer"]["pictures_written"]
    for stale in CACHE.glob(f"{lesson.stem}.*.ipynb"):
        stale.unlink()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        try:
            notebook = run_chapter(lesson, fast=False, cwd=cwd)
        except ChapterError as exc:
            raise PluginError(f"chapter {exc}") from exc
        written = sum(1 for p in Path(cwd).rglob("*") if p.suffix in (".png", ".svg"))
    log.info("ran %s in %.0f s", lesson.name, time.perf_counter() - start)
    notebook.metadata["minitransformer"] = {"pictures_written": written}
    CACHE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, cached)
    return notebook, written


def model_picture() -> bytes:
    """Figure 1 of the paper drawn from the `small` model, as SVG (the same bytes each build:
    no date, fixed element ids)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minitransformer import viz
    from minitransformer.nn import TransformerConfig

    figure = viz.draw_model(TransformerConfig.named("small", 8000), batch=(2, 7, 6))
    svg = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "minitransformer"}):
        figure.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    return svg.getvalue()


@mkdocs.plugins.event_priority(50)
def on_files(files: Files, config: dict) -> Files:
    files.append(File.generated(config, "img/model.svg", content=model_picture()))
    for path in sorted(ANSWERS.glob("*")):
        if path.is_file() and path.suffix in (".md", ".py"):
            files.append(File.generated(config, f"lessons/answers/{path.name}",
                                        content=path.read_bytes()))
    for lesson in chapters():
        stem = lesson.stem
        notebook, written = _executed(lesson)
        downloads = (f"[:material-download: notebook with outputs]({stem}.ipynb){{ download }}"
                     f" · [:material-download: script]({stem}.py){{ download }}")
        page = chapter_page(notebook, assets=stem, downloads=downloads)
        if page.n_outputs == 0:
            raise PluginError(f"chapter {lesson.name} printed nothing when run; its page would "
                              "show code alone.")
        if page.repeated:
            raise PluginError(f"chapter {lesson.name} shows a figure twice in cell "
                              f"{page.repeated[0]}: a cell that ends in a call returning a "
                              "figure shows it as its value too; assign the figure instead.")
        if page.n_figures < written:
            raise PluginError(f"chapter {lesson.name} saved {written} pictures but showed "
                              f"{page.n_figures}; show each figure it draws (plt.show(), or "
                              "a drawing as a cell's last expression).")
        notebook.metadata.pop("minitransformer", None)
        files.append(File.generated(config, f"lessons/{stem}.md", content=page.markdown))
        files.append(File.generated(config, f"lessons/{stem}.ipynb",
                                    content=json.dumps(notebook, indent=1) + "\n"))
        files.append(File.generated(config, f"lessons/{stem}.py", content=lesson.read_bytes()))
        for name, data in page.files.items():
            files.append(File.generated(config, f"lessons/{stem}/{name}", content=data))
    return files


def on_nav(nav, config: dict, files: Files):
    """Every chapter has its place in the site's navigation (mkdocs.yml's nav)."""
    listed = {page.file.src_uri for page in nav.pages}
    missing = [lesson.name for lesson in chapters() if f"lessons/{lesson.stem}.md" not in listed]
    if missing:
        raise PluginError(f"{', '.join(missing)} not in mkdocs.yml's nav: add "
                          f"`lessons/{Path(missing[0]).stem}.md` under Lessons.")
    return nav
