"""The training loop, on accelerate: the same code runs on a CPU, one GPU, or many
GPUs/nodes under `accelerate launch` (or several CPU processes under `torchrun`).

Checkpoints hold the drafter, the optimizer, the scheduler, the RNG states and the
position in the (deterministic) batch order, so a resumed run continues exactly
where the interrupted one stopped.

Data parallel, N processes: the global batch of a step is the one a single process
would train on; process p takes its sequences p, p+N, ... Each process divides its
loss sums by the whole batch's token counts (summed across processes before the
forward), so its loss is its share of the global batch's loss and the sum of the
processes' gradients is the single-process gradient of that batch, up to float
rounding: N processes train the same drafter as one, only faster. Every decision that
ends the loop (a time limit, a pause, a signal to any process) is taken by all
processes together, so none is left waiting in a collective the others have left.
"""
from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from ..drafter import Drafter, DrafterConfig
from ..errors import GumihoError
from . import data as tdata
from .config import TrainConfig, states_source
from .held_out import evaluate, with_states
from .objective import draft_loss, loss_depth, loss_token_counts
from .processes import StopRequest, accelerator, sum_gradients
from .resume import checkpoint_path, rng_state, save_checkpoint, set_rng_state
from .widen import widen_to_fused


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def initial_drafter(folder: str, drafter: Drafter, expected: DrafterConfig) -> Drafter:
    """The saved drafter of ``folder`` to continue training from, refused with a clear
    message when it is not a drafter of the same kind for the same target shape."""
    have = drafter.cfg
    fields = ("kind", "hidden_size", "vocab_size", "serial_positions", "mlp_heads", "num_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "mlp_blocks",
              "feature_layers")
    differ = [f"{f}: {getattr(have, f)} there, {getattr(expected, f)} here" for f in fields
              if getattr(have, f) != getattr(expected, f)]
    if differ:
        raise GumihoError(f"--init-from {folder} holds a drafter that does not fit this run ({'; '.join(differ)}); "
                          "pick a drafter of the same --kind trained for this target.")
    return drafter.train()


def train(cfg: TrainConfig, target_model, target_name: str, eos_ids: set[int], log=print) -> dict:
    """Train a drafter of ``cfg.kind`` for ``target_model`` on the shards in
    ``cfg.data``; writes the drafter to ``cfg.out`` and returns a summary."""
    acc, precision = accelerator(cfg)
    if not acc.is_main_process:
        log = lambda message: None  # noqa: E731 -- one process speaks for all
    run = _set_up(cfg, acc, precision, target_model, target_name, eos_ids, log)
    progress = _resume(run, checkpoint_path(cfg.out), log)
    if cfg.init_from and progress.step == 0 and run.eval_seqs:
        # What the continued drafter agrees with before this run: the baseline the final
        # held-out report is read against (same split, same measure).
        progress.at_start = run.held_out()
        log(f"held-out before training: {json.dumps(progress.at_start)}")
    stopped_early, wall = _train_steps(run, progress, log)
    report = run.held_out() if run.eval_seqs else {}
    summary = _summary(run, progress, precision, target_name, stopped_early, wall, report)
    if acc.is_main_process:
        _save(run, summary, progress.history)
    log(f"held-out: {json.dumps(report)}")
    return summary


@dataclass
class _Run:
    """What every step of one training run uses, set up once by ``_set_up``."""
    cfg: TrainConfig
    acc: object  # accelerate.Accelerator
    target_model: object
    dcfg: DrafterConfig
    drafter: Drafter
    vocab_ids: torch.Tensor
    cover: float
    train_seqs: list
    eval_seqs: list
    on_the_fly: bool
    schedule: tdata.EpochSchedule
    total_steps: int
    optimizer: object
    scheduler: object
    n_params: int
    n_target: int

    @property
    def world(self) -> int:
        return self.acc.num_processes

    @property
    def rank(self) -> int:
        return self.acc.process_index

    def sum_over_processes(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise sum of ``x`` over the processes (float64, on the CPU in and out)."""
        return self.acc.reduce(x.to(self.acc.device), reduction="sum").cpu() if self.world > 1 else x

    def held_out(self) -> dict:
        """The held-out report over every process's share of the held-out split."""
        return evaluate(self.drafter, self.eval_seqs[self.rank::self.world], self.cfg.batch_tokens, self.cfg.loss,
                        self.acc.device, self.sum_over_processes, self.target_model)


@dataclass
class _Progress:
    """Where a run stands, counted from its first step across pauses (the checkpoint
    carries it): the step reached, the history lines, the tokens seen, the seconds
    spent in earlier sessions and a continued drafter's held-out report before its
    first step."""
    step: int = 0
    history: list = field(default_factory=list)
    tokens_seen: int = 0
    wall_before: float = 0.0
    at_start: Optional[dict] = None


def _set_up(cfg: TrainConfig, acc, precision: str, target_model, target_name: str, eos_ids: set[int], log) -> _Run:
    """The data, the drafter (new or continued), its optimizer and schedule, in the order
    that fixes the random streams: a run set up again from the same seed is the same run."""
    world, rank = acc.num_processes, acc.process_index
    torch.manual_seed(cfg.seed)
    started = time.time()
    overrides = dict(cfg.drafter_overrides)
    saved = Drafter.load(cfg.init_from, device="cpu", dtype=torch.float32) if cfg.init_from else None
    if saved is not None and "feature_layers" not in overrides:
        # A continued drafter reads what it was trained to read, unless told otherwise.
        overrides["feature_layers"] = saved.cfg.feature_layers
    dcfg = DrafterConfig.for_target(target_model.config, cfg.kind, target=target_name, **overrides)
    seqs, on_the_fly = states_source(cfg, dcfg.feature_layers)
    log(f"{len(seqs)} sequences loaded in {time.time() - started:.1f} s; target states "
        + ("computed on the fly" if on_the_fly else "read from the shards")
        + (" (the shards do not hold them; `python -m gumiho.train.features` caches them once, and cached "
           "states train about twice as fast)" if on_the_fly and cfg.features == "auto" else "")
        + (f"; fused features of layers {list(dcfg.feature_layers)}" if dcfg.feature_layers else ""))
    train_seqs, eval_seqs = tdata.split(seqs, cfg.eval_fraction, cfg.seed)
    hidden_size = dcfg.hidden_size if on_the_fly else seqs[0].hidden.shape[-1]
    if dcfg.hidden_size != hidden_size:
        raise GumihoError(f"The shards hold hidden states of size {hidden_size} but the target's hidden size is "
                          f"{dcfg.hidden_size}: the data was made with another model.")
    drafter, vocab_ids = _first_weights(cfg, saved, dcfg, target_model, train_seqs, eos_ids, log)
    drafter.set_draft_vocab(vocab_ids)
    if world > 1:
        # Every process built the same weights from the same seed; the noise added to
        # the input hidden states must differ between processes (they see different
        # sequences), so each continues with its own random stream.
        torch.manual_seed(cfg.seed + 1_000_003 * (rank + 1))
    cover = tdata.coverage(eval_seqs or train_seqs, vocab_ids, dcfg.vocab_size)
    drafter.to(acc.device)
    target_model.to(acc.device).eval()
    drafter.attach_target(target_model)
    if not cfg.init_from:
        drafter.init_own_head(target_model)  # eagle3: its norm and LM head start as the target's
    n_params = drafter.trainable_parameters()
    n_target = sum(p.numel() for p in target_model.parameters())
    log(f"drafter {cfg.kind}: {n_params / 1e6:.2f}M parameters ({100 * n_params / n_target:.1f}% of the target's "
        f"{n_target / 1e6:.1f}M, shared embedding/LM head excluded); draft vocabulary {len(vocab_ids)} tokens "
        f"covers {100 * cover:.1f}% of answer tokens; {len(train_seqs)} train / {len(eval_seqs)} held-out sequences; "
        f"mixed precision: {precision}" + (f"; data parallel over {world} processes" if world > 1 else ""))
    schedule = tdata.EpochSchedule(train_seqs, cfg.batch_tokens, cfg.seed, cfg.epochs)
    total_steps = min(schedule.total_steps, cfg.max_steps) if cfg.max_steps else schedule.total_steps
    optimizer, scheduler = _optimizer(cfg, drafter, total_steps)
    # The drafter is driven through its methods, not forward(), so it is not wrapped
    # in DDP; gradients are summed across processes explicitly (sum_gradients).
    optimizer = acc.prepare(optimizer)
    return _Run(cfg, acc, target_model, dcfg, drafter, vocab_ids, cover, train_seqs, eval_seqs, on_the_fly,
                schedule, total_steps, optimizer, scheduler, n_params, n_target)


def _first_weights(cfg: TrainConfig, saved, dcfg: DrafterConfig, target_model, train_seqs: list,
                   eos_ids: set[int], log) -> tuple[Drafter, torch.Tensor]:
    """The drafter training starts from and its draft vocabulary: the saved one of
    ``--init-from`` (widened when fused layers are named for a last-state drafter), or
    new weights with the training data's most frequent tokens."""
    if not cfg.init_from:
        return Drafter(dcfg), tdata.draft_vocabulary(train_seqs, cfg.draft_vocab, dcfg.vocab_size, eos_ids)
    if saved.cfg.feature_layers is None and dcfg.feature_layers:
        # Fused layers named for a last-state drafter: widen it so that it starts as
        # the same function (gumiho.train.widen) instead of refusing it.
        text_cfg = getattr(target_model.config, "get_text_config", lambda: target_model.config)()
        saved = widen_to_fused(saved, dcfg.feature_layers, text_cfg.num_hidden_layers)
        log(f"widened {cfg.init_from} to read the target's layers {list(dcfg.feature_layers)}: it starts "
            "as the same drafter (the other layers' weights start at zero)")
    drafter = initial_drafter(cfg.init_from, saved, dcfg)
    log(f"starting from the weights of {cfg.init_from} (optimizer and schedule start fresh)")
    # Keep the draft vocabulary the weights were trained with: the heads' outputs
    # were shaped for those tokens, and new data barely moves a frequency list.
    return drafter, drafter.draft_vocab_ids.clone()


def _optimizer(cfg: TrainConfig, drafter: Drafter, total_steps: int):
    """AdamW (no weight decay on biases and norms) and the warm-up + cosine schedule."""
    decay, no_decay = [], []
    for n, p in drafter.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, cfg.warmup_steps, total_steps))
    return optimizer, scheduler


def _resume(run: _Run, ckpt: Path, log) -> _Progress:
    """The run's progress: from its checkpoint when there is one (weights, optimizer,
    schedule and random streams restored with it), else from the start."""
    if not ckpt.exists():
        return _Progress()
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    run.drafter.load_state_dict(state["model"])
    run.drafter.attach_target(run.target_model)
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    step, world = state["step"], run.world
    by_rank = state.get("rng_by_rank")
    if world > 1 and by_rank and len(by_rank) == world:
        set_rng_state(by_rank[run.rank])
    elif world > 1 or by_rank:
        # The global batches are the same with any number of processes; only the
        # noise draws cannot continue the saved streams.
        log(f"resuming with {world} process(es) where the checkpoint was written by "
            f"{len(by_rank) if by_rank else 1}: same batches, new random streams for the noise")
        torch.manual_seed(run.cfg.seed + 1_000_003 * (run.rank + 1) + step)
    else:
        torch.set_rng_state(state["rng_cpu"])
        if state.get("rng_cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
    saved = state.get("progress") or {}  # absent in checkpoints of older versions
    log(f"resumed from step {step}" + ("" if saved else " (the checkpoint predates saved progress: "
                                                           "history and wall time start here)"))
    # The history was saved with the step: it ends there.
    return _Progress(step, list(saved.get("history", [])), saved.get("tokens_seen", 0), saved.get("wall_s", 0.0),
                     saved.get("held_out_at_start"))


def _train_steps(run: _Run, progress: _Progress, log) -> tuple[bool, float]:
    """Steps from ``progress.step`` to the run's last, or to a pause (time limit,
    --stop-at-step, a signal); a checkpoint every --checkpoint-every steps and at the
    end. Returns whether the run paused early and its wall time over all sessions."""
    from accelerate.utils import gather_object

    cfg, acc = run.cfg, run.acc
    t_start = time.time()
    run.drafter.train()
    bar = tqdm(total=run.total_steps, initial=progress.step, desc=f"train {cfg.kind}",
               disable=not acc.is_local_main_process, mininterval=5)
    stopped_early = False
    with StopRequest() as stop_request:
        while progress.step < run.total_steps:
            loss, info, share, denominators, batch_tokens = _step(run, progress.step)
            progress.step += 1
            progress.tokens_seen += batch_tokens
            out_of_time = (cfg.max_minutes is not None and (time.time() - t_start) / 60 > cfg.max_minutes) or (
                cfg.stop_at_step is not None and progress.step >= cfg.stop_at_step) or stop_request.signal is not None
            step_loss, top1, out_of_time = _step_figures(run, loss, info, share, denominators, out_of_time)
            bar.set_postfix_str(f"loss {step_loss:.3f} top1 {' '.join(f'{a:.2f}' for a in top1)}")
            bar.update(1)
            progress.history.append({"step": progress.step, "loss": step_loss, "top1": top1,
                                     "wall_s": round(progress.wall_before + time.time() - t_start, 3)})
            if progress.step % cfg.checkpoint_every == 0 or progress.step == run.total_steps or out_of_time:
                # Each process's random streams (the noise), gathered from all of them.
                rng = gather_object([rng_state()]) if run.world > 1 else None
                if acc.is_main_process:
                    save_checkpoint(checkpoint_path(cfg.out), run.drafter, run.optimizer, run.scheduler, progress.step,
                                    {"kind": cfg.kind},
                                    {"history": progress.history, "tokens_seen": progress.tokens_seen,
                                     "wall_s": progress.wall_before + time.time() - t_start,
                                     "held_out_at_start": progress.at_start}, rng_by_rank=rng)
            if out_of_time:
                stopped_early = True
                why = f" on {signal.Signals(stop_request.signal).name}" if stop_request.signal is not None else ""
                log(f"pausing at step {progress.step}/{run.total_steps}{why} (checkpoint saved; rerun the same "
                    "command to continue)")
                break
    bar.close()
    return stopped_early, progress.wall_before + time.time() - t_start


def _step(run: _Run, step: int):
    """One optimizer step on the global batch of ``step``. Returns the loss and its
    figures, this process's share of the batch (None with one process), the whole
    batch's loss denominators (None with one process) and its token count."""
    # Positions with loss: the drafted ones, and those the unrolled serial steps reach.
    cfg, acc, raw, n_pos = run.cfg, run.acc, run.drafter, loss_depth(run.dcfg, run.cfg.loss)
    epoch, within = run.schedule.locate(step)
    index = run.schedule.order(epoch)[within]
    denominators = share = None
    if run.world > 1:
        # This process's share of the global batch; a batch of fewer sequences
        # than processes leaves some with none, which then run one sequence at
        # zero weight (every process must take part in every collective).
        share = index[run.rank::run.world]
        batch = tdata.collate(run.train_seqs, share or index[:1], acc.device)
        if run.on_the_fly:
            batch = with_states(batch, run.target_model, run.dcfg.feature_layers)
        local = torch.cat([loss_token_counts(batch, n_pos), batch["valid"].sum().double().cpu()[None]])
        whole = run.sum_over_processes(local * bool(share))
        denominators, batch_tokens = whole[:n_pos].tolist(), int(whole[n_pos])
    else:
        batch = tdata.collate(run.train_seqs, index, acc.device)
        if run.on_the_fly:
            batch = with_states(batch, run.target_model, run.dcfg.feature_layers)
        batch_tokens = int(batch["valid"].sum())
    with acc.autocast():
        loss, info = draft_loss(raw, batch, cfg.loss, denominators=denominators)
    if run.world > 1 and not share:
        loss = loss * 0.0
    if not loss.requires_grad:
        # No position of this batch carries loss (load_sequences leaves such
        # windows out, but a process's share of a batch can still be one). A
        # zero that depends on every trainable weight keeps the step uniform:
        # backward, the gradient reduction across processes and the optimizer
        # all run as for any batch, with zero gradients.
        loss = loss + 0.0 * sum(p.sum() for p in raw.parameters() if p.requires_grad)
    run.optimizer.zero_grad(set_to_none=True)
    acc.backward(loss)
    if run.world > 1:
        sum_gradients(acc, [p for p in raw.parameters() if p.requires_grad])
    if cfg.grad_clip:
        acc.clip_grad_norm_(raw.parameters(), cfg.grad_clip)
    run.optimizer.step()
    run.scheduler.step()
    return loss, info, share, denominators, batch_tokens


def _step_figures(run: _Run, loss, info: dict, share, denominators, out_of_time: bool):
    """The step's loss and top-1 agreement by position over the whole batch, and
    whether any process has to stop (then all stop here)."""
    step_loss, top1 = float(loss.detach()), info["top1"]
    if run.world > 1:
        # The whole batch's loss and top-1 are the sums of the shares: one collective.
        n_pos = run.dcfg.max_depth
        hits = [round(a * n) for a, n in zip(info["top1"], info["count"])] if share else [0] * n_pos
        whole = run.sum_over_processes(torch.tensor([step_loss, *hits, float(out_of_time)], dtype=torch.float64))
        step_loss, out_of_time = float(whole[0]), bool(whole[-1] > 0)
        top1 = [h / n if n else 0.0 for h, n in zip(whole[1:-1].tolist(), denominators)]
    return step_loss, top1, out_of_time


def _summary(run: _Run, progress: _Progress, precision: str, target_name: str, stopped_early: bool, wall: float,
             report: dict) -> dict:
    """training_summary.json: what the run was and what it reached."""
    cfg = run.cfg
    return {
        "kind": cfg.kind, "target": target_name, "steps": progress.step, "total_steps": run.total_steps,
        "stopped_early": stopped_early, "wall_s": wall, "init_from": cfg.init_from, "mixed_precision": precision,
        "train_tokens_per_epoch": sum(len(s.ids) for s in run.train_seqs),
        "tokens_seen": progress.tokens_seen, "states": "on-the-fly" if run.on_the_fly else "cached",
        "train_tokens_per_s": progress.tokens_seen / max(wall, 1e-9), "feature_layers": run.dcfg.feature_layers,
        "parameters": run.n_params, "target_parameters": run.n_target,
        "draft_vocab": len(run.vocab_ids), "draft_vocab_coverage": run.cover, "held_out": report,
        "held_out_at_start": progress.at_start,
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("loss",)}, "loss_config": asdict(cfg.loss),
    }


def _save(run: _Run, summary: dict, history: list) -> None:
    """The drafter (float16), its training summary and its history, into --out."""
    out = Path(run.cfg.out)
    run.drafter.save(out, dtype=torch.float16)
    with open(out / "training_summary.json", "w") as f:
        json.dump(summary, f, indent=2)
    with open(out / "training_history.jsonl", "w") as f:
        for h in history:
            f.write(json.dumps(h) + "\n")
