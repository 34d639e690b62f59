"""One process of a data-parallel training run on the tiny target of the training
tests, for tests/train/test_train_distributed.py to launch several of with torchrun:

    python -m torch.distributed.run --nproc_per_node 2 tests/train/train_worker.py CONFIG.json

CONFIG.json holds the TrainConfig fields (its ``loss`` as LossConfig fields), and
optionally ``sigterm``: {"rank": R, "batch": K}, which makes process R send itself
SIGTERM while preparing its K-th batch, as a job scheduler might signal one process
of a run. Every process builds the same tiny target from the same seed, as every
process of a real run loads the same model."""
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the helpers
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: gumiho

from gumiho.train.config import TrainConfig  # noqa: E402
from gumiho.train.loop import train  # noqa: E402
from gumiho.train.objective import LossConfig  # noqa: E402
from gumiho.train.processes import end_processes  # noqa: E402
from helpers import tiny_target  # noqa: E402

TARGET = dict(family="llama", hidden=32, heads=4, kv_heads=2, seed=2, init=0.3)  # the training tests' target


def main(path: str) -> int:
    fields = json.loads(Path(path).read_text())
    fields["loss"] = LossConfig(**fields.get("loss", {}))
    sigterm = fields.pop("sigterm", None)
    if sigterm and int(os.environ.get("RANK", "0")) == sigterm["rank"]:
        from gumiho.train import data as tdata

        real, calls = tdata.collate, []

        def collate(*args, **kwargs):
            calls.append(1)
            if len(calls) == sigterm["batch"]:
                os.kill(os.getpid(), signal.SIGTERM)
            return real(*args, **kwargs)

        tdata.collate = collate
    target = tiny_target(**TARGET)
    train(TrainConfig(**fields), target.model, "tiny", {1}, log=lambda m: print(m, flush=True))
    end_processes()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
