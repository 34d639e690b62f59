"""Training examples from cached shards: sequences cut to a maximum length,
a fixed held-out split, length-bucketed batches, and the draft vocabulary."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..errors import GumihoError
from . import shards


@dataclass
class Sequence:
    ids: torch.Tensor  # [T] long
    loss_mask: torch.Tensor  # [T] uint8
    hidden: Optional[torch.Tensor]  # [T, H] float16; None: computed on the fly (text-only data)
    features: Optional[torch.Tensor] = None  # [T, k*H] float16: cached fused target features
    feature_layers: Optional[tuple] = None  # the layers ``features`` holds


def shard_folders(data_dir: str | Path) -> list[Path]:
    """The folders holding ``data_dir``'s shards: ``data_dir`` itself, or, when it holds
    no shard but ``part-K`` folders that do (several distillation processes, see
    gumiho.train.sources.distill), those, in the order of K."""
    data_dir = Path(data_dir)
    if data_dir.is_dir() and not any(data_dir.glob("shard_*.safetensors")):
        parts = [p for p in data_dir.glob("part-*") if p.is_dir() and p.name[5:].isdigit()
                 and any(p.glob("shard_*.safetensors"))]
        if parts:
            return sorted(parts, key=lambda p: int(p.name[5:]))
    return [data_dir]


def check_data_dir(data_dir: str | Path) -> int:
    """Fail early, before any model loads, on a missing folder or an unreadable
    shard. Returns the number of shards (of every part, for a folder of parts)."""
    folders = shard_folders(data_dir)
    if len(folders) > 1 or folders[0] != Path(data_dir):
        return sum(check_data_dir(f) for f in folders)
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise GumihoError(f"Training data folder {str(data_dir)!r} does not exist; "
                          f"create it with `python -m gumiho.train.sources.distill`.")
    files = sorted(data_dir.glob("shard_*.safetensors"))
    if not files:
        raise GumihoError(f"No shards (shard_*.safetensors) in {str(data_dir)!r}; "
                          f"create them with `python -m gumiho.train.sources.distill`.")
    for f in files:
        try:
            shards.shard_stats(f)
        except Exception as e:
            raise GumihoError(f"Shard {f.name} cannot be read ({e}); delete it and rerun the distillation "
                              f"to regenerate it.") from None
    return len(files)


def load_sequences(data_dirs: str | Path, max_len: int = 512, states: bool = True) -> list[Sequence]:
    """Every sequence of every finished shard, cut into windows of at most ``max_len``
    (windows overlap by nothing: each token is trained once per epoch).
    ``data_dirs`` may name several folders separated by commas.

    A window with no answer token after its first position carries no loss (the loss
    falls on answer tokens at positions t + d, d >= 1) and is left out: the first
    window of a prompt longer than ``max_len`` is one, and a batch made only of such
    windows would have nothing to learn from.

    ``states=False`` reads token ids and masks only (training then computes the
    target's states on the fly): less memory, and any shard will do."""
    out: list[Sequence] = []
    folders = [f for spec in str(data_dirs).split(",") for f in shard_folders(spec)]
    for folder in folders:
        check_data_dir(folder)
        for f in sorted(Path(folder).glob("shard_*.safetensors")):
            try:
                t = shards.load_shard(f)
                layers = shards.shard_feature_layers(f) if states else None
            except Exception as e:  # a damaged shard: name it, do not guess
                raise GumihoError(f"Shard {f.name} cannot be read ({e}); delete it and rerun the distillation "
                                  f"to regenerate it.") from None
            if not states:
                t = {k: v for k, v in t.items() if k not in ("hidden", "features")}
            feats = t.get("features")
            off = t["offsets"].tolist()
            for (ids, mask, hid), start in zip(shards.iter_sequences(t), off):
                for a in range(0, len(ids), max_len):
                    if len(ids[a:a + max_len]) >= 4 and bool(mask[a + 1:a + max_len].any()):
                        w = slice(a, a + max_len)
                        fw = None if feats is None else feats[start:start + len(ids)][w]
                        out.append(Sequence(ids[w].long(), mask[w], None if hid is None else hid[w], fw,
                                            layers if fw is not None else None))
    if not out:
        raise GumihoError(f"The shards in {str(data_dirs)!r} hold no usable sequence.")
    return out


def split(seqs: list[Sequence], eval_fraction: float, seed: int) -> tuple[list[Sequence], list[Sequence]]:
    idx = list(range(len(seqs)))
    random.Random(seed).shuffle(idx)
    n_eval = max(1, int(len(seqs) * eval_fraction)) if eval_fraction > 0 and len(seqs) > 1 else 0
    return [seqs[i] for i in idx[n_eval:]], [seqs[i] for i in idx[:n_eval]]


def draft_vocabulary(seqs: list[Sequence], size: int, vocab_size: int, always: set[int]) -> torch.Tensor:
    """The ``size`` most frequent tokens of the training answers (FR-Spec), plus
    ``always`` (EOS and friends), sorted by id."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for s in seqs:
        ids = s.ids[s.loss_mask.bool()] if s.loss_mask.any() else s.ids
        counts += torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    size = min(size, vocab_size)
    top = torch.topk(counts, size).indices.tolist()
    chosen = set(top[: max(0, size - len(always))]) | {a for a in always if 0 <= a < vocab_size}
    return torch.tensor(sorted(chosen), dtype=torch.long)


def coverage(seqs: list[Sequence], vocab_ids: torch.Tensor, vocab_size: int) -> float:
    """Share of answer tokens inside the draft vocabulary."""
    inside = torch.zeros(vocab_size, dtype=torch.bool)
    inside[vocab_ids] = True
    hit = tot = 0
    for s in seqs:
        ids = s.ids[s.loss_mask.bool()]
        hit += int(inside[ids].sum())
        tot += len(ids)
    return hit / tot if tot else 0.0


def batches(seqs: list[Sequence], batch_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Index batches for one epoch: sequences sorted by length within shuffled
    buckets, packed up to ``batch_tokens`` padded tokens; batch order shuffled.
    Deterministic in (seed, epoch), so a resumed run sees the same batches."""
    rng = random.Random(seed * 100003 + epoch)
    idx = list(range(len(seqs)))
    rng.shuffle(idx)
    bucket = 64
    out: list[list[int]] = []
    for b0 in range(0, len(idx), bucket):
        chunk = sorted(idx[b0:b0 + bucket], key=lambda i: len(seqs[i].ids))
        cur: list[int] = []
        longest = 0
        for i in chunk:
            n = len(seqs[i].ids)
            if cur and max(longest, n) * (len(cur) + 1) > batch_tokens:
                out.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, n)
        if cur:
            out.append(cur)
    rng.shuffle(out)
    return out


def length_groups(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Rows (indices into ``lengths``) in groups of similar length, each of at most
    ``max_tokens`` padded tokens (a longer row goes alone). Lengths grow within and
    across groups, so a group's last row sets its padded width. Here, not in distillation,
    because the trainer's feature cache groups its forwards the same way and the trainer
    does not import the data sources."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and lengths[order[end]] * (end + 1 - start) <= max_tokens:
            end += 1
        groups.append(order[start:end])
        start = end
    return groups


class EpochSchedule:
    """Maps a global training step to (epoch, batch within that epoch).

    Each epoch's shuffle packs the sequences into its own batches, and their
    number can differ from one epoch to the next (length-sorted buckets pack
    differently). Every epoch is therefore sized by its own batch list: a run of
    ``epochs`` whole epochs trains every token exactly that many times. A
    fractional last epoch takes that share of its batches."""

    def __init__(self, seqs: list[Sequence], batch_tokens: int, seed: int, epochs: float):
        self._args = (seqs, batch_tokens, seed)
        self._cached: tuple[int, list[list[int]]] = (-1, [])  # one epoch's batches at a time
        whole = int(epochs)
        self.lengths = [len(self.order(e)) for e in range(whole)]
        part = epochs - whole
        if part > 0:
            self.lengths.append(int(len(self.order(whole)) * part))
        if not sum(self.lengths):  # a fraction of an epoch smaller than one batch
            self.lengths = [1]
        self.total_steps = sum(self.lengths)

    def order(self, epoch: int) -> list[list[int]]:
        """The batches of one epoch (deterministic, so the same for a resumed run)."""
        if self._cached[0] != epoch:
            self._cached = (epoch, batches(*self._args, epoch))
        return self._cached[1]

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, index within the epoch) of a 0-based global step."""
        for epoch, n in enumerate(self.lengths):
            if step < n:
                return epoch, step
            step -= n
        raise IndexError("step beyond the last epoch")


def collate(seqs: list[Sequence], index: list[int], device) -> dict:
    """A right-padded batch: ids, loss_mask, valid [B, L], and the cached states the
    sequences carry, hidden [B, L, H] and features [B, L, k*H] (float32), each only
    when every sequence has it (otherwise training computes them on the fly)."""
    items = [seqs[i] for i in index]
    L = max(len(s.ids) for s in items)
    B = len(items)
    ids = torch.zeros(B, L, dtype=torch.long)
    loss_mask = torch.zeros(B, L)
    valid = torch.zeros(B, L)
    for b, s in enumerate(items):
        n = len(s.ids)
        ids[b, :n] = s.ids
        loss_mask[b, :n] = s.loss_mask.float()
        valid[b, :n] = 1
    batch = {"ids": ids.to(device), "loss_mask": loss_mask.to(device), "valid": valid.to(device)}
    for key in ("hidden", "features"):
        parts = [getattr(s, key) for s in items]
        if all(p is not None for p in parts):
            out = torch.zeros(B, L, parts[0].shape[-1], dtype=torch.float16)
            for b, p in enumerate(parts):
                out[b, :len(p)] = p
            batch[key] = out.to(device).float()
    return batch
