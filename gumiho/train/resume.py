"""A training run's checkpoint: the drafter, the optimizer, the scheduler, the RNG
states and the position in the batch order, so a resumed run continues exactly
where the interrupted one stopped."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import torch


def checkpoint_path(out: str) -> Path:
    return Path(out) / "checkpoint" / "state.pt"


def rng_state() -> dict:
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}


def set_rng_state(state: dict):
    torch.set_rng_state(state["cpu"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_checkpoint(path: Path, drafter, optimizer, scheduler, step: int, extra: dict,
                    progress: Optional[dict] = None, rng_by_rank: Optional[list] = None):
    """``progress``: what the run's summary counts from its first step (history
    lines, wall time, tokens seen), so a resumed run reports the whole run.
    ``rng_by_rank``: with several processes, every process's random state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": drafter.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "step": step,
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "extra": extra,
        "progress": progress or {},
        "rng_by_rank": rng_by_rank,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-save never damages the previous checkpoint
