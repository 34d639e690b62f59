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

# The tiers (pytest.ini's markers: slow, browser, vllm, llamacpp) are kept where the tests are:
# a module's `pytestmark`, or a test's own decorator, so a renamed test keeps its tier.
