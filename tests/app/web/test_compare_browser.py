"""The Compare tab in a real headless Chromium: a comparison of every shipped drafter
with its table, its sentences and its three plots, at a laptop's and a projector's
width (1024, 1280 and 1920 px) with no text drawn over text; bad input refused in words;
Stop; and the screenshot the README shows (assets/compare.png).

Needs what tests/app/web/test_app_browser.py needs (Chromium and playwright)."""
from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"headless browser test needs Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)
from playwright import sync_api  # noqa: E402  (requirements-dev.txt)
from test_app_browser import ARGS, MODEL_READY_S, RUN_S, SHOTS, WIDTHS, check_fits_the_width, check_no_text_over_text  # noqa: E402

from app.compare.tab import PLOT_IDS  # noqa: E402
from app_server import ROOT, running_app  # noqa: E402

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOT = os.path.join(ROOT, "assets", "compare.png")
PLOTS = [f"#{elem_id}" for elem_id in PLOT_IDS]


@pytest.fixture(scope="module")
def page():
    server = running_app()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": WIDTHS[0], "height": 1000})
        page.goto(server.url)
        page.wait_for_selector("#gm-run:not([disabled])", timeout=MODEL_READY_S)
        page.click("button[role=tab]:has-text('Compare drafters')")
        page.wait_for_selector("#gm-cmp-run:not([disabled])", timeout=30_000)
        yield page
        browser.close()


def test_a_comparison_shows_every_drafter_side_by_side(page):
    page.fill("#gm-cmp-prompt textarea", "Explain in a few sentences why the sky is blue.")
    page.locator("#gm-cmp-prompt").scroll_into_view_if_needed()
    box = page.locator("#gm-cmp-tokens input[type=number]")
    box.fill("32")
    box.press("Enter")
    page.click("#gm-cmp-run")
    page.wait_for_selector("#gm-cmp-table table", timeout=RUN_S)
    table = page.inner_text("#gm-cmp-table")
    for name in ("Vanilla", "Gumiho", "All-serial", "All-parallel", "EAGLE-3"):
        assert name in table, table
    assert table.count("identical") == 4 and "DIFFERS" not in table
    findings = page.inner_text("#gm-cmp-findings")
    assert "All 5 texts are identical to vanilla's" in findings, findings
    assert "Drafting took" in findings and ("Fastest on this prompt" in findings or "No drafter beat" in findings)
    assert page.inner_text("#gm-cmp-text").strip()
    for sel in PLOTS:
        assert page.locator(f"{sel} .main-svg").count() >= 1, sel
    assert page.locator("#gm-cmp-acc .legend text:has-text('All-parallel')").count() == 1
    page.wait_for_selector("#gm-cmp-run:not([disabled])", timeout=60_000)
    os.makedirs(SHOTS, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(600)  # the plots' relayout
        check_no_text_over_text(page, *PLOTS)
        for sel in PLOTS:  # the legend below the axis's title, not on it
            legend = page.locator(f"{sel} .legend").first.bounding_box()
            axis = page.locator(f"{sel} .xtitle").first.bounding_box()
            assert legend["y"] >= axis["y"] + axis["height"], (sel, axis, legend)
        check_fits_the_width(page)
        page.screenshot(path=os.path.join(SHOTS, f"compare_{width}.png"), full_page=True)
    page.set_viewport_size({"width": WIDTHS[0], "height": 1000})
    page.screenshot(path=SCREENSHOT, full_page=True)


def test_bad_input_and_stop_leave_the_tab_usable(page):
    page.fill("#gm-cmp-prompt textarea", "   ")
    page.click("#gm-cmp-run")
    page.wait_for_selector("#gm-cmp-status:has-text('prompt is empty')", timeout=60_000)
    page.wait_for_selector("#gm-cmp-run:not([disabled])", timeout=60_000)
    page.fill("#gm-cmp-prompt textarea", "Write a long story about a lighthouse keeper and a storm.")
    box = page.locator("#gm-cmp-tokens input[type=number]")
    box.fill("256")
    box.press("Enter")
    page.click("#gm-cmp-run")
    page.wait_for_selector("#gm-cmp-stop:not([disabled])", timeout=30_000)
    page.wait_for_timeout(1500)
    page.click("#gm-cmp-stop")
    page.wait_for_selector("#gm-cmp-findings:has-text('Stopped')", timeout=RUN_S)
    page.wait_for_selector("#gm-cmp-run:not([disabled])", timeout=60_000)


def test_plots_follow_their_box_after_a_resize_on_another_tab(page):
    """Issue 60: the window resized while another tab is shown left the plots of the
    tab shown before at their old width, their ends cut off. Back on that tab, every
    plot fills its box again."""
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.wait_for_timeout(600)
    page.click("button[role=tab]:has-text('Walkthrough')")
    page.wait_for_timeout(300)
    page.set_viewport_size({"width": 1920, "height": 1000})
    page.wait_for_timeout(600)
    page.click("button[role=tab]:has-text('Compare drafters')")
    page.wait_for_timeout(1000)
    for sel in PLOTS:
        widths = page.evaluate("""sel => { const box = document.querySelector(sel + ' .js-plotly-plot');
            const svg = box.querySelector('.main-svg'); return [box.getBoundingClientRect().width,
            svg.getBoundingClientRect().width]; }""", sel)
        assert abs(widths[0] - widths[1]) <= 2, (sel, widths)
    page.set_viewport_size({"width": WIDTHS[0], "height": 1000})
