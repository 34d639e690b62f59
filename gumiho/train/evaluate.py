"""Top-1 agreement of several drafters with the target, position by position, on the
same sequences, so drafters trained on different data (e.g. before and after a
training stage) are compared on equal terms. Two sources of sequences:

* ``--data``: the held-out split that `python -m gumiho.train` makes for the same
  --data, --eval-fraction and --seed, so no drafter trained with those settings has
  seen it;
* ``--prompts``: a benchmark prompt file. The target answers the prompts the bench
  picks with the same --limit (greedy, --max-new-tokens), and the drafters are scored
  on those answers. This measures how well the drafters know the kind of text a
  benchmark asks for, without decoding; nothing here is ever trained on.

    python -m gumiho.train.evaluate --data data/wiki-b,data/distill-new-a runs/stage2-gumiho
    python -m gumiho.train.evaluate --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 \\
        assets/drafters/smollm2-135m-gumiho assets/drafters/smollm2-135m-serial
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from ..files import LibraryPaths, configure
from . import data as tdata
from . import shards


def benchmark_sequences(target, prompts_file: str, limit: int | None, max_new_tokens: int):
    """The target's greedy answers to the bench's prompt selection, as training sequences."""
    # Only --prompts needs the bench's prompt selection and distillation: imported here.
    from ..bench import load_prompts
    from ..files.prompt_files import Conversation
    from .sources.distill import distill_conversations

    convs = [Conversation(id=str(p.question_id), source=p.category, user_turns=[p.text], system=p.system)
             for p in load_prompts(prompts_file, limit)]
    packed = distill_conversations(target.runtime_model, target.tokenizer, convs, batch_size=len(convs),
                                   max_new_tokens=max_new_tokens)
    return [tdata.Sequence(ids.long(), mask, hid) for ids, mask, hid in shards.iter_sequences(packed)]


def widened_vocab(ids: torch.Tensor, size: int, vocab_size: int) -> torch.Tensor:
    """``ids`` followed by the lowest token ids not among them, ``size`` in all (0:
    the whole vocabulary). The drafter's LM head is the target's, so any row of it
    can be scored; only the training objective saw the draft vocabulary alone."""
    size = vocab_size if size <= 0 else min(size, vocab_size)
    if size <= ids.numel():
        return ids
    inside = torch.zeros(vocab_size, dtype=torch.bool)
    inside[ids] = True
    rest = torch.nonzero(~inside).flatten()[: size - ids.numel()]
    return torch.cat([ids, rest])


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    from ..loading import load_drafter, load_target
    from .held_out import evaluate
    from .objective import LossConfig

    ap = argparse.ArgumentParser(prog="python -m gumiho.train.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("drafters", nargs="+", help="drafter folders")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="cached shard folders, comma-separated: score their held-out split")
    src.add_argument("--prompts", help="benchmark prompt file (.jsonl): score the target's answers to it")
    ap.add_argument("--limit", type=int, default=None, help="with --prompts: as the bench's --limit")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="with --prompts: answer length")
    ap.add_argument("--eval-fraction", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--draft-vocab", type=int, default=None,
                    help="score with a larger draft vocabulary: the drafter's own tokens, then the lowest token ids "
                         "not among them (BPE merge order, roughly frequency), up to this many (0: all)")
    args = ap.parse_args(argv)
    target = load_target(runtime="torch")
    if args.prompts:
        seqs = benchmark_sequences(target, args.prompts, args.limit, args.max_new_tokens)
        answer_tokens = sum(int(s.loss_mask.sum()) for s in seqs)
        print(f"{len(seqs)} answers ({answer_tokens} tokens) by the target to {args.prompts}")
    else:
        _, seqs = tdata.split(tdata.load_sequences(args.data, args.max_len), args.eval_fraction, args.seed)
        print(f"{len(seqs)} held-out sequences of {args.data}")
    answers = torch.cat([s.ids[s.loss_mask.bool()] for s in seqs])
    for folder in args.drafters:
        drafter = load_drafter(folder, target, dtype="fp32")  # the precision the training report uses
        if args.draft_vocab is not None and drafter.cfg.own_head:
            print(f"error: {folder}: an {drafter.cfg.kind} drafter's draft vocabulary is its own LM head's rows; "
                  "--draft-vocab cannot widen it", file=sys.stderr)
            return 2
        if args.draft_vocab is not None:
            drafter.set_draft_vocab(widened_vocab(drafter.draft_vocab_ids.cpu(), args.draft_vocab, drafter.cfg.vocab_size))
        # The loss each kind trains with by default (an eagle3 drafter has no state to regress onto).
        loss = LossConfig(ce_weight=1.0, reg_weight=0.0) if drafter.cfg.own_head else LossConfig()
        report = evaluate(drafter, seqs, args.batch_tokens, loss, torch.device("cpu"))
        # A drafter can only ever propose its draft vocabulary: the share of answer
        # tokens inside it caps its agreement.
        inside = torch.isin(answers, drafter.draft_vocab_ids.cpu()).float().mean()
        print(json.dumps({"drafter": folder, "draft_vocab": int(drafter.draft_vocab_ids.numel()),
                          "top1_by_position": [round(a, 3) for a in report["top1_by_position"]],
                          "loss": round(report["loss"], 4),
                          "answer_tokens_in_draft_vocab": round(float(inside), 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
