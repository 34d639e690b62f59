"""Time self-distillation of one batch of prompts with the hidden states taken from
the float32 writer's own passes (the default) against a separate hidden-state pass.

All paths run in one process on the same prompts, through
``gumiho.train.sources.distill.distill_conversations``; each line gives the wall time, the
answer tokens and answer tokens per second, and whether the text equals the first
path's. With every path on 64 prompts of 192 new tokens this takes about 9 minutes
on 2 shared CPU cores; ``--paths`` runs fewer; ``bf16-writer`` is the float32 writer against
a bfloat16 copy writing (``--write-dtype bfloat16``). Example::

    OMP_WAIT_POLICY=PASSIVE python research/bench_distill.py --prompts data/prompts-tax-short.jsonl \\
        --skip 512 --limit 64 --batch-size 64 --max-new-tokens 192 --threads 2
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

# name -> keyword arguments of distill_conversations (``batched`` stands for --hidden-batch-tokens)
PATHS = {
    "writer": dict(hidden_from_writer=True),
    "separate": dict(hidden_from_writer=False, hidden_batch_tokens=0),
    "separate-batched": dict(hidden_from_writer=False, hidden_batch_tokens="batched"),
    # --write-dtype bfloat16: a bfloat16 copy writes, the float32 target gives the states
    # (fast only where the CPU has native bf16 matmuls: AVX512-BF16 or AMX)
    "bf16-writer": dict(hidden_from_writer=False, hidden_batch_tokens="batched", writer="bfloat16"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", required=True, help="prompt file, any format gumiho.train.sources.distill reads")
    p.add_argument("--skip", type=int, default=512, help="leave out the first N prompts of the file")
    p.add_argument("--limit", type=int, default=64, help="then take N prompts")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--paths", default="writer,separate,separate-batched",
                   help=f"comma-separated, in running order, from: {', '.join(PATHS)}")
    p.add_argument("--hidden-batch-tokens", type=int, default=4096, help="for the separate-batched path")
    p.add_argument("--model", default=None, help="target (default: the embedded SmolLM2-135M-Instruct)")
    args = p.parse_args(argv)
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    unknown = [x for x in paths if x not in PATHS]
    if unknown or not paths:
        print(f"error: unknown path(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(PATHS)}",
              file=sys.stderr)
        return 2

    from gumiho.files import LibraryPaths, configure
    from gumiho.files.prompt_files import PromptFileError, read_prompts
    from gumiho.kernels.machine import cpu_has_native_bf16
    from gumiho.loading import load_target
    from gumiho.train.sources.distill import distill_conversations

    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    torch.set_num_threads(args.threads)
    try:
        convs = read_prompts(args.prompts)[args.skip:args.skip + args.limit]
    except PromptFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not convs:
        print("error: no prompts left after --skip", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    target = load_target(args.model, device="cpu", dtype="float32")
    print(f"{len(convs)} prompts, batch {args.batch_size}, max_new_tokens {args.max_new_tokens}, "
          f"{args.threads} threads; target loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    bf16_writer = None
    if "bf16-writer" in paths:
        import copy
        bf16_writer = copy.deepcopy(target.model).to(torch.bfloat16).eval()
        print(f"native bf16 matmuls on this CPU: {cpu_has_native_bf16()}", flush=True)
    # Warm up both generation paths (the first forwards pre-pack the weights).
    for name in ("writer", "separate"):
        distill_conversations(target.model, target.tokenizer, convs[:2], 2, 2, **PATHS[name])
    if bf16_writer is not None:
        distill_conversations(target.model, target.tokenizer, convs[:2], 2, 2, writer=bf16_writer,
                              hidden_from_writer=False)

    results = {}
    for name in paths:
        kw = {k: (args.hidden_batch_tokens if v == "batched" else v) for k, v in PATHS[name].items()}
        shown = dict(kw)
        if kw.get("writer") == "bfloat16":
            kw["writer"] = bf16_writer
        last_answer = [0.0]

        def on_tokens(n_new: int, n_done: int) -> None:
            if n_new:
                last_answer[0] = time.perf_counter()

        t0 = time.perf_counter()
        out = distill_conversations(target.model, target.tokenizer, convs, args.batch_size, args.max_new_tokens,
                                    on_tokens=on_tokens, **kw)
        wall = time.perf_counter() - t0
        n_answer = int(out["loss_mask"].sum())
        line = (f"{name:16s} {wall:7.1f} s, {n_answer} answer tokens, {n_answer / wall:6.1f} answer tok/s "
                f"({', '.join(f'{k}={v}' for k, v in shown.items())}")
        if not kw["hidden_from_writer"]:
            gen = last_answer[0] - t0
            line += f"; generation {gen:.1f} s, hidden pass {wall - gen:.1f} s"
        line += ")"
        if results:
            first = results[paths[0]][1]
            same = torch.equal(out["input_ids"], first["input_ids"]) and torch.equal(out["offsets"], first["offsets"])
            line += f", text {'identical to' if same else 'DIFFERS from'} {paths[0]}'s"
            if same:
                diff = (out["hidden"].float() - first["hidden"].float()).abs().max().item()
                line += (f", hidden states within {diff:.2g} (largest |state| "
                         f"{first['hidden'].float().abs().max().item():.3g}, stored as float16)")
        results[name] = (wall, out)
        print(line, flush=True)
    if len(results) > 1:
        base = results[paths[0]][0]
        print("wall time relative to " + paths[0] + ": "
              + ", ".join(f"{name} {results[name][0] / base:.2f}x" for name in paths[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
