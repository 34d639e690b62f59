import gc
import os
import sys
import threading
import time

# Several torch processes may share few cores (the app test starts a server next to
# the test process); spinning OpenMP workers would then starve each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# No runtime is forced here: the library reads no environment, so a test that loads the
# default model without naming a runtime gets the default a user gets ("auto":
# llama.cpp for the embedded GGUF on a CPU where llama-cpp-python is installed). Tests
# about the engine's own float32 forwards ask for runtime="torch" by name.

import pytest  # noqa: E402
import torch  # noqa: E402

# One intra-op thread: the tests' models are tiny, and with two threads on a busy
# two-core machine the workers wait on each other far longer than they compute.
torch.set_num_threads(1)

# The tiers (pytest.ini's markers: slow, browser, vllm, llamacpp) are kept where the tests are:
# a module's `pytestmark`, or a test's own decorator, so a renamed test keeps its tier.


@pytest.fixture(scope="session", autouse=True)
def no_model_threads_left_behind():
    """After the last test (this fixture is set up first, so torn down last): no app
    model thread (app/core/worker.py) is alive but those of hubs still open. Each idle
    one held its last job, and with it a hub and its model, for the rest of the run."""
    yield
    if "app.models.hub" not in sys.modules:
        return  # no app test ran
    from app.models.hub import ModelHub

    gc.collect()  # a hub dropped without close() ends its thread when collected
    owned = {h._worker._thread for h in gc.get_objects() if isinstance(h, ModelHub) and not h.closed}
    deadline = time.monotonic() + 60  # a closed thread still ends the job it was running
    left = [t for t in threading.enumerate() if t.name == "gumiho-model" and t not in owned]
    for t in left:
        t.join(max(0.0, deadline - time.monotonic()))
    left = [t for t in left if t.is_alive()]
    assert not left, f"{len(left)} model thread(s) left running with no open hub"
