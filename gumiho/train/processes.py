"""The processes a run trains in (accelerate: one CPU, one GPU, or many under
`accelerate launch` / `torchrun`): setting them up, summing their gradients into
the whole batch's, and taking the group down at the end (gumiho.train.loop's
docstring says why the sum is the single-process gradient), and the signals that
ask a run to stop."""
from __future__ import annotations

import signal
import threading
from typing import Optional

import torch

from ..errors import GumihoError
from . import launched_processes
from .config import TrainConfig, mixed_precision


def accelerator(cfg: TrainConfig):
    """accelerate's Accelerator for this run and its mixed precision, refused when the
    launched processes and accelerate's set-up disagree."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    precision = mixed_precision(cfg.precision)
    # accelerate keeps one process-wide state and refuses a second Accelerator with
    # another precision; drop it (not the distributed PartialState) so one process,
    # e.g. a notebook, can train several drafters with different settings.
    AcceleratorState._reset_state()
    _, launched = launched_processes()  # processes started by torchrun / accelerate launch
    # Without a GPU, accelerate sets up several launched processes only when told to
    # use the CPU (gloo); with GPUs it does so by itself.
    acc = Accelerator(mixed_precision=precision, cpu=launched > 1 and not torch.cuda.is_available())
    if launched > 1 and acc.num_processes != launched:
        raise GumihoError(
            f"{launched} processes were launched (WORLD_SIZE={launched}) but accelerate set up "
            f"{acc.num_processes}, so every process would train on all the data alone. On GPUs launch with "
            f"`accelerate launch --multi_gpu --num_processes {launched} -m gumiho.train ...`; on CPUs with "
            f"`torchrun --nproc_per_node {launched} -m gumiho.train ...`.")
    return acc, precision


def sum_gradients(acc, params: list) -> None:
    """Replace every gradient by its sum over the processes, in one collective: the
    gradient of the whole batch's loss (see the module docstring). A weight that no
    process's loss reached (a draft position beyond every share's sequences) keeps no
    gradient, as in a single process, where the optimizer then leaves it alone; one
    that some process's loss reached gets the sum, zeros standing in where it had none."""
    flat = torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), device=p.device,
                                                                                dtype=p.dtype) for p in params]
                     + [torch.tensor([float(p.grad is not None) for p in params], device=params[0].device,
                                     dtype=params[0].dtype)])
    flat = acc.reduce(flat, reduction="sum")
    reached = flat[-len(params):].tolist()
    for p, part, n in zip(params, flat[:-len(params)].split([p.numel() for p in params]), reached):
        p.grad = part.view_as(p) if n > 0 else None


def end_processes() -> None:
    """After the last training run of a data-parallel process: wait for the others and
    take the process group down. A gloo group left to the interpreter's exit can abort
    the process ("terminate called without an active exception") after its work is
    done, which fails the launch."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class StopRequest:
    """While training: SIGTERM or Ctrl-C (SIGINT) asks the loop to stop after the
    current step, with a checkpoint, the held-out report and the saved drafter, as a
    pause does; a second Ctrl-C stops at once. A job scheduler's or a deadline's
    SIGTERM then loses no step. Handlers are installed only in the main thread (the
    only one that may) and restored afterwards."""

    def __init__(self):
        self.signal: Optional[int] = None
        self._previous: dict = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc) -> bool:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False
