"""The README's front matter is the Hugging Face Space's configuration: it must name
the app file, the gradio version the project pins, and a Python that the pinned
packages install on (Spaces default to Python 3.10, where numpy 2.4 has no wheel)."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _front_matter() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert m, "README.md must start with the Space's YAML front matter"
    return yaml.safe_load(m.group(1))


def _pins() -> dict:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def test_space_front_matter_matches_the_pins():
    meta = _front_matter()
    assert meta["sdk"] == "gradio"
    assert str(meta["sdk_version"]) == _pins()["gradio"]
    assert (ROOT / meta["app_file"]).is_file()
    # A string, so YAML cannot turn "3.10" into the number 3.1.
    version = meta.get("python_version")
    assert isinstance(version, str), "python_version must be set, quoted"
    major, minor = (int(x) for x in version.split(".")[:2])
    assert (major, minor) >= (3, 11), "numpy 2.4 (pinned) needs Python 3.11 or later"


def test_the_server_drops_only_the_frameworks_leaked_loop_report():
    """Gradio's Spaces mode leaves event loops whose cleanup fails with "Invalid file
    descriptor: -1" (app/web/server.py); that report is dropped, every other one passes."""
    import asyncio
    from types import SimpleNamespace

    from app.web.server import _quiet_leaked_event_loops

    seen = []
    hook = _quiet_leaked_event_loops(seen.append)
    leaked = SimpleNamespace(exc_value=ValueError("Invalid file descriptor: -1"), object=asyncio.BaseEventLoop.__del__)
    other_value = SimpleNamespace(exc_value=ValueError("something else"), object=asyncio.BaseEventLoop.__del__)
    other_place = SimpleNamespace(exc_value=ValueError("Invalid file descriptor: -1"), object=print)
    for u in (leaked, other_value, other_place):
        hook(u)
    assert seen == [other_value, other_place]
