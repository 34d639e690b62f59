import os

# Several torch processes may share few cores (the app test starts a server next to
# the test process); spinning OpenMP workers would then starve each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# No runtime is forced here: the library reads no environment, so a test that loads the
# default model without naming a runtime gets the default a user gets ("auto":
# llama.cpp for the embedded GGUF on a CPU where llama-cpp-python is installed). Tests
# about the engine's own float32 forwards ask for runtime="torch" by name.

import torch  # noqa: E402

# One intra-op thread: the tests' models are tiny, and with two threads on a busy
# two-core machine the workers wait on each other far longer than they compute.
torch.set_num_threads(1)


# The tiers (pytest.ini registers the markers). One table here rather than a decorator
# per test, so the tiers can be read, and changed, in one place: a test module, or one
# test of a module (its name's start), and the marks it gets. "slow": a minute or so of
# the real default model, a new environment or the training commands; measured with
# `python -m pytest --durations=40` on two cores.
TIERS = {
    "app/test_app_browser.py": ("browser", "slow"),
    "app/test_figures_browser.py": ("browser",),
    "serving/test_vllm": ("vllm", "slow"),
    "serving/test_llamacpp_server.py": ("llamacpp", "slow"),
    "app/test_space_rehearsal.py": ("slow",),
    "app/test_app_concurrency.py::test_eight_simultaneous_sessions": ("slow",),
    "bench/test_acceptance_guard.py": ("slow",),
    "app/test_compare.py::test_each_drafters_tau_is_the_benchmarks": ("slow",),
    "app/test_compare_browser.py": ("browser", "slow"),
    "engine/test_default_model.py": ("slow",),
    "formats/test_export_target.py::test_the_default_target": ("slow",),
    "runtimes/test_llamacpp_runtime.py::test_a_long_prompt": ("slow",),
    "runtimes/test_llamacpp_runtime.py::test_the_shipped_drafter_is_lossless_on_a_long_prompt": ("slow",),
    "runtimes/test_llamacpp_runtime.py::test_rows_after_a_long_context": ("slow",),
    "runtimes/test_llamacpp_layouts.py::test_the_runtime_runs_the_file_it_names": ("slow",),
    "train/test_train_quickstart.py": ("slow",),
    "train/test_train_distributed.py": ("slow",),
}


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        where = item.nodeid.removeprefix("tests/")
        for prefix, marks in TIERS.items():
            if where.startswith(prefix):
                for mark in marks:
                    item.add_marker(getattr(pytest.mark, mark))
