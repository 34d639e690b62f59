"""A class on one server, in a real headless Chromium: a finished live race gives a link,
and a second visitor who opens it sees the same race replayed (the same texts and the same
speedup), without running the model again. Needs the Debian package ``chromium``."""
from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"headless browser test needs Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)

from playwright import sync_api  # noqa: E402  (requirements-dev.txt)
from test_app_browser import ARGS, MODEL_READY_S, RUN_S, set_number  # noqa: E402

from app_server import running_app  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_shared_race_replays_for_another_visitor():
    server = running_app()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            teacher = browser.new_page(viewport={"width": 1280, "height": 900})
            teacher.goto(server.url)
            teacher.wait_for_selector("#gm-run:not([disabled])", timeout=MODEL_READY_S)
            teacher.fill("#gm-prompt textarea", "Name two colours of the rainbow.")  # not an example: live
            teacher.click("text=Settings")
            set_number(teacher, "Max new tokens", 12)
            teacher.click("#gm-run")
            teacher.wait_for_selector("#gm-share-link", timeout=RUN_S)
            assert "Recorded on" not in teacher.inner_text("#gm-result")
            href = teacher.get_attribute("#gm-share-link", "href")
            assert href.startswith("?run=") and len(href) == len("?run=") + 32, href
            speedup = teacher.inner_text("#gm-result .big")
            texts = teacher.inner_text("#gm-vanilla .prose"), teacher.inner_text("#gm-gumiho .prose")

            student = browser.new_page(viewport={"width": 390, "height": 800})
            student.goto(server.url + href)
            student.wait_for_selector("#gm-result .big", timeout=60_000)
            assert student.inner_text("#gm-result .big") == speedup
            assert (student.inner_text("#gm-vanilla .prose"), student.inner_text("#gm-gumiho .prose")) == texts

            # A link to a run the server does not keep says so, in words.
            lost = browser.new_page(viewport={"width": 390, "height": 800})
            lost.goto(server.url + "?run=" + "0" * 32)
            lost.wait_for_function("() => (document.querySelector('#gm-status') || {}).innerText"
                                   "?.includes('not kept here')", timeout=60_000)
        finally:
            browser.close()
