"""The handout (docs/handout.md) printed by ``python -m app.handout`` in headless
Chromium (issue 76): one A4 page, no text below 10 pt, every sentence of the Markdown
on it. Needs the Debian package ``chromium`` and the Python package ``playwright``."""
from __future__ import annotations

import os
import re

import pytest

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"headless browser test needs Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)
from playwright import sync_api  # noqa: E402  (requirements-dev.txt)

from app.handout import ARGS, BODY_PT, HANDOUT, handout_html, main, page_count, render_pdf  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The smallest font size of any element that holds text itself, in points, as printed.
SMALLEST_TEXT = """() => {
  let smallest = Infinity, where = '';
  for (const el of document.body.querySelectorAll('*')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const pt = parseFloat(getComputedStyle(el).fontSize) * 0.75;
    if (pt < smallest) { smallest = pt; where = el.tagName + ': ' + el.textContent.slice(0, 40); }
  }
  return [smallest, where];
}"""


@pytest.fixture(scope="module")
def markdown():
    return HANDOUT.read_text(encoding="utf-8")


def test_the_handout_prints_on_one_a4_page(markdown, tmp_path):
    out = tmp_path / "handout.pdf"
    assert main(["--out", str(out)]) == 0
    pdf = out.read_bytes()
    assert pdf.startswith(b"%PDF")
    assert page_count(pdf) == 1
    box = re.search(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", pdf)
    assert box and abs(float(box[1]) - 595) < 2 and abs(float(box[2]) - 842) < 2  # A4 in points
    # The counter counts: the handout twice over does not fit one page.
    assert page_count(render_pdf(handout_html(markdown + "\n\n" + markdown))) >= 2


def test_no_text_on_the_handout_is_below_10_pt(markdown):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_content(handout_html(markdown))
            page.emulate_media(media="print")
            smallest, where = page.evaluate(SMALLEST_TEXT)
            text = " ".join(page.inner_text("body").split())
        finally:
            browser.close()
    assert BODY_PT >= 10 and smallest >= 9.99, (smallest, where)  # 10 pt is 13.33 px
    # Nothing of the Markdown is left out: every table cell and every sentence's words are on the page.
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    for cell in (c.strip() for line in table for c in line.strip("|").split("|")):
        if cell.strip("-"):
            assert cell in text, cell
    prose = [line for line in markdown.splitlines() if not line.startswith("|")]
    blocks = re.split(r"\n\s*\n|\n(?=#|- )", "\n".join(prose))  # paragraphs, headings, list items
    for block in blocks:
        plain = " ".join(re.sub(r"[*`#]|^- ", "", block.strip()).split())
        for sentence in re.split(r"(?<=[.:])\s+", plain):
            if sentence.strip(" .:"):
                assert sentence.strip(" .:") in text, sentence
