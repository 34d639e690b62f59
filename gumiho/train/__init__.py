"""Drafter training: data pipeline and trainer."""
import os


def launched_processes() -> tuple[int, int]:
    """(this process's rank, number of processes) as torchrun / accelerate launch set
    them in the environment; (0, 1) for a process started on its own. Distillation
    splits the prompts by it, training checks accelerate's set-up against it, and
    only rank 0 prints."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return (int(os.environ.get("RANK", "0") or 0), world) if world > 1 else (0, 1)
