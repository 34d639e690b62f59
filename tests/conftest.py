import os

# Several torch processes may share few cores (the app test starts a server next to
# the test process); spinning OpenMP workers would then starve each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The float32 (torch) runtime unless a test asks for another: most tests are about the
# engine's own forwards (inner-layer drafters, exports, training, float32 tokens). The
# default, "auto" (llama.cpp for the embedded GGUF on a CPU), has its own tests, which
# ask for it by name (tests/runtimes/test_llamacpp_runtime.py, tests/app/test_app_runtime.py).
os.environ.setdefault("GUMIHO_RUNTIME", "torch")

import torch  # noqa: E402  (after the environment variable above)

# One intra-op thread: the tests' models are tiny, and with two threads on a busy
# two-core machine the workers wait on each other far longer than they compute.
torch.set_num_threads(1)
