import os

# Several torch processes may share few cores (the app test starts a server next to
# the test process); spinning OpenMP workers would then starve each other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402  (after the environment variable above)

# One intra-op thread: the tests' models are tiny, and with two threads on a busy
# two-core machine the workers wait on each other far longer than they compute.
torch.set_num_threads(1)
