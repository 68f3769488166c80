"""The chapters as notebooks: a chapter runs in a real Jupyter kernel (nbclient and ipykernel,
as JupyterLab runs it), its page keeps every output and figure, and jupytext pairs each
chapter with a notebook as the README's command says."""

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the course or docs extra")
pytest.importorskip("nbclient", reason="needs the course or docs extra")
pytest.importorskip("jupytext", reason="needs the course or docs extra")
pytest.importorskip("ipykernel", reason="needs the course or docs extra")

from minitransformer.course.notebooks import ChapterError, chapter_page, run_chapter  # noqa: E402

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chapter_5(tmp_path_factory):
    """Chapter 5 (attention, with its √d_k figure) run in a kernel, in its fast mode."""
    cwd = tmp_path_factory.mktemp("chapter5")
    return run_chapter(LESSONS / "05_scaled_dot_product_attention.py", fast=True, cwd=cwd), cwd


def test_a_chapter_runs_top_to_bottom_in_a_kernel(chapter_5):
    notebook, cwd = chapter_5
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(isinstance(cell.execution_count, int) for cell in code)
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    printed = "".join(o.get("text", "") for cell in code for o in cell.outputs
                      if o.output_type == "stream")
    assert "gradcheck attention" in printed and "passed" in printed
    # the figure is shown inline, as an image output, and saved where the chapter ran
    images = [o for cell in code for o in cell.outputs if "image/png" in o.get("data", {})]
    assert images and base64.b64decode(images[0]["data"]["image/png"]).startswith(PNG)
    assert (cwd / "figures" / "05_scaling.png").exists()


def test_the_page_of_a_chapter_holds_its_code_outputs_and_figures(chapter_5):
    notebook, _ = chapter_5
    page = chapter_page(notebook, assets="05_attention", downloads="[notebook](05.ipynb)")
    lines = page.markdown.splitlines()
    assert lines[0].startswith("# Chapter 5") and lines[2] == "[notebook](05.ipynb)"
    assert page.markdown.count("```python\n") == sum(
        1 for cell in notebook.cells if cell.cell_type == "code" and cell.source.strip())
    assert page.n_outputs >= 3 and page.markdown.count('class="chapter-output"') == page.n_outputs
    assert "passed" in page.markdown
    assert page.n_figures == len(page.files) >= 1
    for name, data in page.files.items():
        assert f"](05_attention/{name})" in page.markdown
        assert data.startswith(PNG) if name.endswith(".png") else b"<svg" in data
    assert page.repeated == []


def _notebook(*cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = list(cells)
    return notebook


def test_outputs_keep_their_order_and_kind():
    png = base64.b64encode(PNG + b"rest").decode()
    svg = "<svg xmlns='http://www.w3.org/2000/svg'><text>tape</text></svg>"
    cell = nbformat.v4.new_code_cell("work()", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="one\n"),
        nbformat.v4.new_output("stream", name="stdout", text="two\n"),
        nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Fig>"}),
        nbformat.v4.new_output("execute_result", data={"text/plain": "42"}, execution_count=1),
        nbformat.v4.new_output("display_data", data={"image/svg+xml": svg,
                                                     "text/plain": "<Digraph>"}),
    ])
    page = chapter_page(_notebook(nbformat.v4.new_markdown_cell("# Title\nProse $x$."), cell),
                        assets="a")
    text = page.markdown
    assert text.index("one\ntwo") < text.index("figure-1.png") < text.index("42") \
        < text.index("figure-2.svg")
    assert "<Fig>" not in text and "<Digraph>" not in text  # the picture, not its repr
    assert page.files == {"figure-1.png": PNG + b"rest", "figure-2.svg": svg.encode()}
    assert (page.n_outputs, page.n_figures) == (2, 2)
    assert "Prose $x$." in text  # the math is left for the site to typeset


def test_a_figure_shown_twice_in_a_cell_is_reported_once():
    png = base64.b64encode(PNG).decode()
    shown = {"image/png": png, "text/plain": "<Figure>"}
    cell = nbformat.v4.new_code_cell("viz.curves()", outputs=[
        nbformat.v4.new_output("execute_result", data=shown, execution_count=1),
        nbformat.v4.new_output("display_data", data=shown),
    ])
    page = chapter_page(_notebook(nbformat.v4.new_markdown_cell("# T"), cell), assets="a")
    assert page.n_figures == 1 and page.repeated == [1]


def test_a_chapter_that_raises_names_itself_and_the_error(tmp_path):
    lesson = tmp_path / "99_broken.py"
    lesson.write_text("# %% [markdown]\n# # Broken\n\n# %%\nprint('fine')\n\n"
                      "# %%\nraise ValueError('the attention weights do not sum to 1')\n")
    with pytest.raises(ChapterError) as raised:
        run_chapter(lesson, fast=True, cwd=tmp_path)
    assert str(raised.value) == ("99_broken.py failed in cell 3 (raise ValueError('the "
                                 "attention weights do not sum to 1')): ValueError: the "
                                 "attention weights do not sum to 1")


@pytest.mark.skipif(shutil.which("jupytext") is None and not Path(sys.executable).with_name(
    "jupytext").exists(), reason="needs jupytext's command (the course extra)")
def test_jupytext_pairs_a_chapter_with_a_notebook_and_leaves_the_script_alone(tmp_path):
    """The README's `jupytext --sync lessons/...` writes the notebooks beside the chapters
    (lessons/jupytext.toml pairs them) without touching the scripts."""
    shutil.copy(LESSONS / "jupytext.toml", tmp_path)
    script = tmp_path / "04_softmax.py"
    shutil.copy(LESSONS / "04_softmax.py", script)
    before = script.read_bytes()
    jupytext = shutil.which("jupytext") or str(Path(sys.executable).with_name("jupytext"))
    subprocess.run([jupytext, "--sync", str(script)], check=True, capture_output=True)
    assert script.read_bytes() == before
    notebook = nbformat.read(tmp_path / "04_softmax.ipynb", as_version=4)
    assert notebook.cells[0].source.startswith("# Chapter 4")
    assert sum(cell.cell_type == "code" for cell in notebook.cells) >= 5
