"""The one-page handout (docs/handout.md) as a PDF for one A4 sheet.

    python -m app.handout --out handout.pdf

The Markdown is rendered to HTML (markdown-it-py, which comes with Gradio) with the
print stylesheet below: A4, 11 mm margins, body text 10 pt, two columns, the table
across both. Headless Chromium (the Debian package ``chromium``, driven by playwright
from requirements-dev.txt) prints it. tests/app/test_handout_pdf.py checks that the
PDF is one page and that no text is below 10 pt."""
from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HANDOUT = ROOT / "docs" / "handout.md"
CHROMIUM = "/usr/bin/chromium"
BODY_PT = 10  # the smallest text on the sheet
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

PRINT_CSS = f"""
@page {{ size: A4; margin: 11mm 12mm; }}
html {{ font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; font-size: {BODY_PT}pt;
        line-height: 1.25; color: #000; }}
body {{ margin: 0; }}
h1 {{ font-size: 15pt; margin: 0 0 4pt 0; }}
h2 {{ font-size: 11.5pt; margin: 6pt 0 2pt 0; break-after: avoid; }}
p, ul {{ margin: 0 0 4pt 0; }}
ul {{ padding-left: 12pt; }}
li {{ margin: 0 0 2pt 0; }}
table {{ border-collapse: collapse; width: 100%; margin: 2pt 0 5pt 0; }}
th, td {{ border: 0.5pt solid #888; padding: 1.5pt 3pt; text-align: left; vertical-align: top; }}
th {{ background: #eee; }}
code {{ font-size: 1em; }}
.columns {{ column-count: 2; column-gap: 7mm; }}
.columns > :first-child {{ margin-top: 0; }}
"""


def handout_html(markdown_text: str) -> str:
    """The handout as one HTML page: the title and the first section (the idea, the
    drafter, the numbers' table) across the sheet, the rest in two columns."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    lines = markdown_text.splitlines()
    # The sections after the table ("## Greedy" on) flow in two columns.
    split = next((i for i, line in enumerate(lines) if line.startswith("## ") and i > 0
                  and any(row.startswith("|") for row in lines[:i])), len(lines))
    head, rest = "\n".join(lines[:split]), "\n".join(lines[split:])
    title = next((line[2:].strip() for line in lines if line.startswith("# ")), "Handout")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{PRINT_CSS}</style></head><body>{md.render(head)}"
            f"<div class='columns'>{md.render(rest)}</div></body></html>")


def render_pdf(page_html: str, chromium: str = CHROMIUM) -> bytes:
    """``page_html`` printed by headless Chromium on A4, as PDF bytes."""
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_content(page_html)
            page.emulate_media(media="print")
            return page.pdf(format="A4", prefer_css_page_size=True, print_background=True)
        finally:
            browser.close()


def page_count(pdf: bytes) -> int:
    """The pages of a PDF: its page objects (``/Type /Page``, not ``/Pages``)."""
    import re

    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.handout", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="handout.pdf", help="the PDF to write (default: handout.pdf)")
    ap.add_argument("--html", default=None, metavar="FILE", help="also write the HTML page it prints")
    ap.add_argument("--chromium", default=CHROMIUM, help=f"the Chromium binary (default {CHROMIUM})")
    args = ap.parse_args(argv)
    if not Path(args.chromium).exists():
        print(f"app.handout: no Chromium at {args.chromium} (apt-get install chromium, or --chromium PATH).",
              file=sys.stderr)
        return 2
    page_html = handout_html(HANDOUT.read_text(encoding="utf-8"))
    if args.html:
        Path(args.html).write_text(page_html, encoding="utf-8")
    pdf = render_pdf(page_html, args.chromium)
    Path(args.out).write_bytes(pdf)
    pages = page_count(pdf)
    print(f"{args.out}: {pages} A4 page{'s' if pages != 1 else ''}, body text {BODY_PT} pt.")
    return 0 if pages == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
