"""The built documentation site, as a reader sees it: every page opened from the folder
`mkdocs build` wrote (site/), in a real headless Chromium, with the network cut off.

On every page: nothing is fetched from outside the site, every formula was typeset (no TeX
command is left in the text a reader sees, and no KaTeX error), every image loaded, and no
code block runs past its box, on a desktop window and on a narrow one. On every chapter page:
the outputs of its cells are there, and each figure of its notebook is shown.

CI builds the site before the tests (.ci/run); elsewhere the test skips until `mkdocs build`
has been run, and says so, as it does without Playwright or a Chromium.
"""

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
PAGES = sorted(p for p in SITE.rglob("*.html") if p.name != "404.html"
               and "assets" not in p.relative_to(SITE).parts) if SITE.is_dir() else []
CHAPTERS = [p for p in PAGES if re.fullmatch(r"\d\d_\w+\.html", p.name)
            and p.parent.name == "lessons"]
WINDOWS = {"desktop": (1280, 900), "narrow": (600, 900)}

# what the reader sees, leaving out code (where TeX may be quoted) and typeset math
VISIBLE_TEXT = """() => {
  const body = document.querySelector('.md-content').cloneNode(true);
  body.querySelectorAll('pre, code, .katex, script, style').forEach(e => e.remove());
  return body.textContent;
}"""
OVERFLOWING_CODE = """() => [...document.querySelectorAll('.md-content pre > code')]
  .filter(c => c.scrollWidth > c.clientWidth + 1)
  .map(c => c.textContent.split('\\n').sort((a, b) => b.length - a.length)[0].slice(0, 80))"""
BROKEN_IMAGES = """() => [...document.querySelectorAll('.md-content img')]
  .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src'))"""
UNTYPESET = """() => [...document.querySelectorAll('.arithmatex')]
  .filter(e => !e.querySelector('.katex')).map(e => e.textContent.slice(0, 80))"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if not (SITE / "index.html").exists():
        pytest.skip("no built site in site/: run `mkdocs build` first (CI does)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="Playwright is not installed: pip install -e '.[docs]'")
    if _chromium() is None:
        pytest.skip("no Chromium: `apt-get install chromium` (CI installs it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(),
                                             args=["--no-sandbox"])
        yield browser
        browser.close()


def _open(browser, page_path: Path, window: str):
    """The page opened from the file system; requests that leave it are refused, and kept."""
    width, height = WINDOWS[window]
    page = browser.new_page(viewport={"width": width, "height": height})
    outside = []

    def route(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", route)
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_function("() => typeof renderMathInElement === 'function'")
    page.wait_for_timeout(100)  # KaTeX runs on the document$ event, right after load
    return page, outside


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("page_path", PAGES, ids=[str(p.relative_to(SITE)) for p in PAGES])
def test_a_page_renders_offline(browser, page_path, window):
    page, outside = _open(browser, page_path, window)
    try:
        assert outside == [], f"fetched from outside the site: {outside}"
        assert page.evaluate(UNTYPESET) == [], "math left for a renderer that never ran"
        assert page.locator(".katex-error").count() == 0, page.locator(
            ".katex-error").first.text_content()
        raw = re.findall(r"\$\$|\\[a-zA-Z]+", page.evaluate(VISIBLE_TEXT))
        assert raw == [], f"TeX left untypeset in the text: {raw[:5]}"
        assert page.evaluate(BROKEN_IMAGES) == []
        assert page.evaluate(OVERFLOWING_CODE) == [], "code runs past its box"
    finally:
        page.close()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_a_chapter_page_shows_its_outputs_and_figures(browser, chapter):
    page, _ = _open(browser, chapter, "desktop")
    try:
        assert page.locator(".chapter-output").count() >= 1
        figures = sorted(p.name for p in (chapter.parent / chapter.stem).glob("figure-*"))
        shown = page.locator(".chapter-figure img")
        assert shown.count() == len(figures)
        assert sorted(Path(s).name for s in shown.evaluate_all(
            "images => images.map(i => i.getAttribute('src'))")) == figures
        assert all(w > 0 for w in shown.evaluate_all(
            "images => images.map(i => i.naturalWidth)"))
        # the notebook, with its outputs, and the script are offered for download
        for suffix in (".ipynb", ".py"):
            link = page.locator(f"a[download][href$='{chapter.stem}{suffix}']")
            assert link.count() == 1 and (chapter.parent / f"{chapter.stem}{suffix}").exists()
    finally:
        page.close()


def test_every_chapter_has_a_page():
    if not SITE.is_dir():
        pytest.skip("no built site in site/: run `mkdocs build` first (CI does)")
    lessons = sorted(p.stem for p in (ROOT / "lessons").glob("[0-9][0-9]_*.py"))
    assert [p.stem for p in CHAPTERS] == lessons
