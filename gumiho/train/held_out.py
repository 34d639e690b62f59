"""The held-out report: per-position top-1 agreement of the drafter with the
target, the estimate of acceptance that training is read by."""
from __future__ import annotations

import dataclasses

import torch

from ..engine.metrics import conditional_acceptance
from ..errors import GumihoError
from . import data as tdata
from .objective import LossConfig, draft_loss
from .states import target_states


def with_states(batch: dict, target_model, feature_layers) -> dict:
    """``batch`` with the target's states computed from its tokens (on-the-fly training)."""
    hidden, features = target_states(target_model, batch["ids"], batch["valid"], feature_layers)
    return dict(batch, hidden=hidden, features=features)


@torch.no_grad()
def evaluate(drafter, seqs, batch_tokens: int, loss_cfg: LossConfig, device, sum_over_processes=None,
             target_model=None) -> dict:
    """Held-out per-position top-1 agreement with the target (with the true prefix),
    against the target's top token over its whole vocabulary (a token outside the
    draft vocabulary is a miss): an estimate of conditional acceptance at each
    position; its running product estimates (unconditional) acceptance at each
    position for a chain draft.

    ``sum_over_processes`` (data parallel): sums a float64 tensor over the processes; each process
    then passes its own share of the held-out sequences, and every process gets the
    report of all of them. ``target_model``: computes the target's states of sequences
    that carry none (on-the-fly data)."""
    was = drafter.training
    drafter.eval()
    n_pos = drafter.cfg.max_depth
    hits = torch.zeros(n_pos, dtype=torch.float64)
    counts = torch.zeros(n_pos, dtype=torch.float64)
    loss_sum, n_b = 0.0, 0
    for index in (tdata.batches(seqs, batch_tokens, seed=0, epoch=0) if seqs else []):
        batch = tdata.collate(seqs, index, device)
        if "hidden" not in batch:
            if target_model is None:
                raise GumihoError("these sequences carry no target states: pass the target model")
            batch = with_states(batch, target_model, drafter.cfg.feature_layers)
        loss, info = draft_loss(drafter, batch, dataclasses.replace(loss_cfg, noise=0.0),
                                exact_top1=True)
        loss_sum += float(loss)
        n_b += 1
        c = torch.tensor(info["count"], dtype=torch.float64)
        hits += (torch.tensor(info["top1"], dtype=torch.float64) * c).round()  # whole hit counts
        counts += c
    drafter.train(was)
    if sum_over_processes is not None:
        summed = sum_over_processes(torch.cat([hits, counts, torch.tensor([loss_sum, n_b], dtype=torch.float64)]))
        hits, counts, (loss_sum, n_b) = summed[:n_pos], summed[n_pos:2 * n_pos], summed[2 * n_pos:].tolist()
    if n_b == 0:
        return {}
    cond = (hits / counts.clamp(min=1)).tolist()
    uncond, prod = [], 1.0
    for c in cond:
        prod *= c
        uncond.append(prod)
    return {"loss": loss_sum / max(1, n_b), "top1_by_position": cond, "top1_vocabulary": "full",
            "chain_acceptance_estimate": uncond,
            "tau_estimate": 1 + sum(uncond), "conditional_check": conditional_acceptance(uncond)}
