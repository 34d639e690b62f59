"""What the app tests share: the default model as the app loads it, loaded once."""
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_shared: dict = {}


@pytest.fixture(scope="module")
def default_hub():
    """A ready hub with the default model as the app loads it (its 4-bit file in
    llama.cpp where that is installed, with the float32 view beside it; float32 alone
    where it is not). One load serves every module that asks (the race's runtime tests,
    the Compare tab's): they run it and read it, none changes it. It is closed after
    the last test of this folder (pytest_runtest_teardown below), so the rest of the
    suite does not carry the model."""
    if "hub" not in _shared:
        from app.models.hub import ModelHub
        from gumiho.loading import load_target

        _shared["hub"] = ModelHub(default_loader=lambda: load_target(None, runtime="auto"), warmup=False).start()
    hub = _shared["hub"]
    assert hub.wait_ready(300) and hub.ready, hub.error
    return hub


def pytest_runtest_teardown(item, nextitem):
    if "hub" in _shared and (nextitem is None or HERE not in Path(nextitem.path).resolve().parents):
        _shared.pop("hub").close()
