"""Data-parallel training with several processes (torchrun, gloo on the CPU): the
drafter N processes train is the one a single process trains on the same batches,
a paused run resumes bit for bit, and a signal to one process stops them all at the
same step instead of leaving the others waiting in a collective."""
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from test_train import cfg_for, make_shards

from gumiho.train.config import TrainConfig
from gumiho.train.loop import train
from gumiho.train.objective import LossConfig
from gumiho.train.resume import checkpoint_path
from helpers import tiny_target

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.slow]

WORKER = Path(__file__).resolve().parent / "train_worker.py"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from train_worker import TARGET

    return make_shards(tmp_path_factory.mktemp("ddp"), tiny_target(**TARGET))


def fields(data, out, noise=0.0, sigterm=None, **kw):
    """The training tests' config (test_train.cfg_for) with 150-token batches and six
    steps, as the worker's JSON; ``sigterm`` as the worker reads it."""
    cfg = asdict(cfg_for(data, out, loss=LossConfig(noise=noise), **{"batch_tokens": 150, "max_steps": 6, **kw}))
    return cfg if sigterm is None else dict(cfg, sigterm=sigterm)


def launch(cfg: dict, processes: int, tmp_path, timeout=240):
    """Run the worker in ``processes`` processes; returns the completed process."""
    path = tmp_path / f"config-{len(list(tmp_path.glob('config-*.json')))}.json"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                          str(processes), str(WORKER), str(path)], env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run


def in_process(cfg: dict):
    from train_worker import TARGET

    cfg = dict(cfg, loss=LossConfig(**cfg["loss"]))
    return train(TrainConfig(**cfg), tiny_target(**TARGET).model, "tiny", {1}, log=lambda m: None)


def checkpoint(out):
    return torch.load(checkpoint_path(out), weights_only=False)


def test_three_processes_train_what_one_process_trains(data, tmp_path):
    """The same global batches, split over three processes: with 150-token batches
    of 36-token sequences the shares are uneven and one batch of two sequences leaves
    a process with none. The losses, the tokens counted, the weights after six AdamW
    steps and the held-out report match a single process's up to float rounding (a
    mean of per-process means, the usual shortcut, would not: its loss weights the
    shares' tokens unequally)."""
    one = fields(data, tmp_path / "one")
    many = fields(data, tmp_path / "many")
    single = in_process(one)
    launch(many, 3, tmp_path)
    a, b = checkpoint(one["out"]), checkpoint(many["out"])
    assert a["step"] == b["step"] == 6
    ha, hb = a["progress"]["history"], b["progress"]["history"]
    assert [h["loss"] for h in hb] == pytest.approx([h["loss"] for h in ha], rel=1e-6)
    for x, y in zip(ha, hb):
        assert y["top1"] == pytest.approx(x["top1"], abs=1e-6)  # the single process keeps float32 fractions
    assert b["progress"]["tokens_seen"] == a["progress"]["tokens_seen"] == single["tokens_seen"]
    for k, w in a["model"].items():
        assert torch.allclose(w.float(), b["model"][k].float(), rtol=0, atol=2e-5), k
    summary = json.loads((tmp_path / "many" / "training_summary.json").read_text())
    assert summary["held_out"]["top1_by_position"] == pytest.approx(single["held_out"]["top1_by_position"],
                                                                   abs=1e-9)


def test_a_paused_two_process_run_resumes_bit_for_bit(data, tmp_path):
    """With the input noise on (each process draws its own), a run paused at step 3
    and started again ends with the weights of a run that was never paused: every
    process's random stream is saved with the checkpoint."""
    whole = fields(data, tmp_path / "whole", noise=0.05)
    paused = fields(data, tmp_path / "paused", noise=0.05, stop_at_step=3)
    launch(whole, 2, tmp_path)
    launch(paused, 2, tmp_path)
    assert checkpoint(paused["out"])["step"] == 3
    launch(dict(paused, stop_at_step=None), 2, tmp_path)
    a, b = checkpoint(whole["out"]), checkpoint(paused["out"])
    assert a["step"] == b["step"] == 6
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert [h["loss"] for h in a["progress"]["history"]] == [h["loss"] for h in b["progress"]["history"]]


def test_sigterm_to_one_process_stops_every_process_at_the_same_step(data, tmp_path):
    """Process 1 alone is signalled while preparing its third batch. Both processes
    stop after step 3 with one checkpoint and the drafter saved; had process 0 gone
    on, it would wait forever in the next step's collective (the launch times out)."""
    cfg = fields(data, tmp_path / "cut", max_steps=8, sigterm={"rank": 1, "batch": 3})
    run = launch(cfg, 2, tmp_path, timeout=120)
    assert "pausing at step 3/8" in run.stdout + run.stderr
    summary = json.loads((tmp_path / "cut" / "training_summary.json").read_text())
    assert summary["stopped_early"] and summary["steps"] == 3
    assert checkpoint(cfg["out"])["step"] == 3


def test_launched_processes_without_distributed_set_up_are_refused(data, tmp_path, monkeypatch):
    """A process that was told it is one of two (WORLD_SIZE=2) but finds no process
    group refuses to train alone on all the data, and says how to launch."""
    from gumiho import GumihoError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # so accelerate is not told to use the CPU
    with pytest.raises(GumihoError, match="accelerate launch --multi_gpu --num_processes 2"):
        in_process(fields(data, tmp_path / "alone"))
