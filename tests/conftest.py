import dataclasses
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

from gumiho.files import LibraryPaths, configure, configured  # noqa: E402

# One intra-op thread: the tests' models are tiny, and with two threads on a busy
# two-core machine the workers wait on each other far longer than they compute.
torch.set_num_threads(1)

# The tiers (pytest.ini's markers: slow, browser, vllm, llamacpp) are kept where the tests are:
# a module's `pytestmark`, or a test's own decorator, so a renamed test keeps its tier.


def pytest_configure(config):
    """The suite is an entry point of its own: the library's paths outside a clone
    (gumiho.files.paths: GUMIHO_CACHE, GUMIHO_LLAMA_SERVER, GUMIHO_VLLM_ENV) are read from
    its environment once, before any fixture, as a command reads them, so that a prebuilt
    llama-server or vLLM environment named there serves the tests that need one."""
    configure(LibraryPaths.from_environment(os.environ))


@pytest.fixture(autouse=True)
def library_paths():
    """The suite's paths (above) put back after each test, so that a test that sets its
    own, or runs a command's ``main`` (which reads them from the environment it has then),
    leaves nothing to the next. Called, it sets some for this test:
    ``library_paths(cache_root=tmp_path)``."""
    kept = configured()

    def use(**changes) -> LibraryPaths:
        paths = dataclasses.replace(kept, **changes)
        configure(paths)
        return paths

    yield use
    configure(kept)


@pytest.fixture(scope="module")
def machine_threads():
    """The machine's cores for one module's torch work, as a user's process has them: for
    modules that decode with the real 135M model for minutes, where the suite's one thread
    would leave a core idle. Every comparison such a module makes is between runs made
    under it, and the recorded acceptance baseline was measured with torch's default, the
    machine's cores, too."""
    torch.set_num_threads(max(2, os.cpu_count() or 2))
    yield
    torch.set_num_threads(1)


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


def pytest_addoption(parser):
    parser.addoption("--memory-log", default=None, metavar="PATH",
                     help="after each test module, append its name, the process's resident memory now and its "
                          "peak so far (MB) to PATH: where the suite's memory goes")


def _resident_mb() -> tuple[float, float]:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    with open("/proc/self/statm") as f:
        now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return now, peak


def _give_freed_memory_back() -> None:
    """Collect, then ask glibc to hand its free heap pages back to the system. A module's
    models are freed when its fixtures end, but glibc may keep the pages in its arenas
    for allocations of other sizes that never come; the suite's resident memory should
    follow what is alive, not what once was (``--memory-log`` shows it module by module)."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


_last_module: list = []  # the test file whose tests ran last


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """At the first test of each file, the files before it are wholly done: their items no
    longer hold fixture values (an item keeps its ``funcargs`` through its own teardown, so
    a module's models are still alive in that file's last teardown hook)."""
    if _last_module and _last_module[0] != item.path:
        _module_done(item.config, _last_module[0])
    _last_module[:] = [item.path]


def pytest_sessionfinish(session):
    if _last_module:
        _module_done(session.config, _last_module[0])


def _module_done(config, path) -> None:
    _give_freed_memory_back()
    log = config.getoption("--memory-log")
    if log:
        now, peak = _resident_mb()
        with open(log, "a") as f:
            f.write(f"{path.relative_to(config.rootpath)}\t{now:.0f}\t{peak:.0f}\n")
