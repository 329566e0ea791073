"""The headless-browser harness (tests/report/browser.py) on small static pages: images from
data URIs decode (and a broken one visibly does not), tables read back, JavaScript errors are
reported, clicks run their handlers, and the browser leaves nothing behind. Skips without
Chromium, except in CI (`CI` set), where that fails."""

import base64
import io
import os
import re
import signal
import struct
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from tests.report.browser import Browser, BrowserError, JavaScriptError, require_chromium

# The plot below: 2 x 1.5 inches at 40 dpi.
PLOT_SIZE = (80, 60)
TABLE = [["source", "documents"], ["web", "1200"], ["code", "34"]]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def plot_png() -> bytes:
    fig = Figure(figsize=(2, 1.5), dpi=40)  # no pyplot: no backend, no global state
    fig.add_subplot().plot([0, 1, 2], [2, 0, 1])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    data = buffer.getvalue()
    assert png_size(data) == PLOT_SIZE
    return data


def page_html(png: bytes) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in TABLE)
    # A data URI that claims to be a PNG but holds no image.
    broken = base64.b64encode(b"this is not a png").decode()
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>harness test</title></head><body>
<img id="plot" src="data:image/png;base64,{base64.b64encode(png).decode()}">
<img id="broken" src="data:image/png;base64,{broken}">
<table id="counts">{rows}</table>
<button id="add">add</button>
<div id="target"></div>
<script>
document.getElementById("add").addEventListener("click", () => {{
  // Later than the click itself, so that wait_for has something to wait for.
  setTimeout(() => {{
    const p = document.createElement("p");
    p.id = "added";
    p.textContent = "added by click";
    document.getElementById("target").appendChild(p);
  }}, 100);
}});
</script>
</body></html>
"""


ERRORS_HTML = """<!DOCTYPE html><html><body><p>errors</p>
<script>console.error("logged problem", 7);</script>
<script>throw new Error("deliberate failure");</script>
</body></html>
"""


@pytest.fixture(scope="module")
def browser():
    with Browser(require_chromium()) as browser:
        yield browser


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pages")
    (folder / "page.html").write_text(page_html(plot_png()))
    (folder / "errors.html").write_text(ERRORS_HTML)
    return folder


@pytest.fixture
def page(browser, pages):
    page = browser.open(pages / "page.html")
    yield page
    page.close()


def test_data_uri_image_decodes(page):
    size = page.evaluate(
        "(() => { const img = document.getElementById('plot');"
        " return img.complete ? [img.naturalWidth, img.naturalHeight] : null; })()"
    )
    assert size == list(PLOT_SIZE)
    assert page.evaluate("document.getElementById('plot').getBoundingClientRect().width") > 0


def test_broken_data_uri_image_has_no_width(page):
    assert page.evaluate("document.getElementById('broken').complete") is True
    assert page.evaluate("document.getElementById('broken').naturalWidth") == 0


def test_table_cells_read_back(page):
    cells = page.evaluate(
        "Array.from(document.querySelectorAll('#counts tr'),"
        " row => Array.from(row.cells, cell => cell.textContent))"
    )
    assert cells == TABLE


def test_clean_page_has_no_console_errors(page):
    assert page.console_errors == []


def test_script_errors_are_reported(browser, pages):
    page = browser.open(pages / "errors.html")
    errors = page.console_errors
    page.close()
    assert len(errors) == 2, errors
    assert "logged problem 7" in errors[0]
    assert "deliberate failure" in errors[1]
    assert "errors.html" in errors[1]  # where it was thrown


def test_click_handler_inserts_element(page):
    assert page.evaluate("document.getElementById('added')") is None
    page.evaluate("document.getElementById('add').click()")
    text = page.wait_for("document.getElementById('added')?.textContent", timeout=10)
    assert text == "added by click"


def test_evaluate_returns_json_and_awaits_promises(page):
    assert page.evaluate("({a: [1, 'two', null], b: true})") == {"a": [1, "two", None], "b": True}
    assert page.evaluate("new Promise(resolve => setTimeout(() => resolve(42), 20))") == 42
    assert page.evaluate("undefined") is None
    assert page.evaluate("10n ** 20n") == 10**20


def test_evaluate_raises_the_javascript_error(page):
    with pytest.raises(JavaScriptError, match="no such thing"):
        page.evaluate("(() => { throw new Error('no such thing'); })()")
    with pytest.raises(JavaScriptError, match="rejected on purpose"):
        page.evaluate("Promise.reject(new Error('rejected on purpose'))")
    with pytest.raises(JavaScriptError, match="ReferenceError"):
        page.wait_for("notDefinedAnywhere.x", timeout=5)


def test_wait_for_times_out_with_the_expression(page):
    with pytest.raises(TimeoutError, match=re.escape("window.neverSet")):
        page.wait_for("window.neverSet", timeout=0.5)
    # JavaScript truthiness, not Python's: an empty array is truthy.
    assert page.wait_for("[]", timeout=2) == []


def test_hung_browser_times_out_then_recovers(browser, page):
    os.kill(browser.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TimeoutError, match="slow answer"):
            page.evaluate("'slow answer'", timeout=1)
    finally:
        os.kill(browser.process.pid, signal.SIGCONT)
    # The late reply to the command above is told apart from this one's.
    assert page.evaluate("'next answer'") == "next answer"


def test_screenshot_is_a_png_of_the_viewport(page, tmp_path):
    path = page.screenshot(tmp_path / "shot.png")
    assert png_size(path.read_bytes()) == page._browser.viewport
    assert page.evaluate("[innerWidth, innerHeight]") == list(page._browser.viewport)


def test_missing_file_fails_to_load(browser, tmp_path):
    with pytest.raises(BrowserError, match="ERR_FILE_NOT_FOUND"):
        browser.open(tmp_path / "missing.html", timeout=10)


def test_browser_cleans_up_even_on_error(browser, pages):
    # `browser` first, so that this test skips (or fails in CI) like the others.
    with pytest.raises(RuntimeError, match="inside the block"), Browser() as other:
        process, tmp_dir = other.process, other.tmp_dir
        assert other.open(pages / "page.html").evaluate("document.title") == "harness test"
        raise RuntimeError("inside the block")
    assert process.poll() is not None
    assert not tmp_dir.exists()
    with pytest.raises(BrowserError, match="closed"):
        other.open(pages / "page.html")


def test_dead_browser_fails_at_once(browser, pages):
    with Browser() as other:
        page = other.open(pages / "page.html")
        other.process.kill()
        with pytest.raises(BrowserError, match=r"DevTools pipe|is gone"):
            page.evaluate("1", timeout=20)
        tmp_dir = other.tmp_dir
    assert not tmp_dir.exists()
