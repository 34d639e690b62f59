"""The default target's weight layouts side by side: what a verify over k tokens costs
in each, and what each costs in exactness against the float32 weights.

    python -m gumiho.bench.layouts --out benchmarks/layouts/layouts.json
    python -m gumiho.bench.layouts --curves-only          # the cost curves alone, a minute

* cost: seconds of a target forward over 1, 2, 4, 8 and 16 tokens after a 200-token
  context (a chain; a tree of as many nodes costs the same), every candidate and size
  interleaved round by round in one process so that a busy moment of the machine
  spreads over all of them; medians, and each as a multiple of its own one-token
  forward. Candidates: PyTorch's kernels on the float32 and bfloat16 weights (the torch
  runtime), and llama.cpp on the shipped Q4_1 file and on the same weights rewritten
  by llama.cpp's quantiser (gumiho.runtimes.llamacpp_files.CANDIDATES).
* exactness, per prompt set: along the float32 target's own greedy continuation (one
  token per forward, as decoding runs), how often each layout's greedy choice differs,
  and where the free-running texts part (as gumiho.bench.asstored measures it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from ..engine.decode import GenerationSettings, generate
from ..engine.target import Target
from ..errors import GumihoError
from ..files import LibraryPaths, configure
from ..kernels.machine import cpu_summary
from ..loading import default_target_files, load_target
from ..runtimes.llamacpp import LlamaCppRuntime
from ..runtimes.llamacpp_files import CANDIDATES, layout_file
from .asstored import one_token_rows
from .prompt_sets import load_prompts, prompt_ids
from .records import save

SIZES = (1, 2, 4, 8, 16)
CONTEXT = 200


def candidate_targets(threads: int, keys=None) -> dict:
    """Each candidate as a Target on its runtime, sharing one float32 model for the
    tokenizer and config ("torch float32" is that model itself, always there: the
    reference). ``keys``: "bf16" and keys of CANDIDATES (None: all)."""
    float32 = load_target(None, device="cpu", runtime="torch")
    targets = {"torch float32": float32}
    if keys is None or "bf16" in keys:
        targets["torch bfloat16"] = load_target(None, device="cpu", dtype="bf16", runtime="torch")
    source = os.path.join(*default_target_files())
    for key, layout in CANDIDATES.items():
        if keys is None or key in keys:
            path = layout_file(source, layout)
            rt = LlamaCppRuntime(path, float32.context_length, threads=threads, weights=layout.label)
            targets[f"llama.cpp {layout.quant}"] = Target(float32.model, float32.tokenizer, float32.name,
                                                          float32.device, float32.dtype, runtime=rt,
                                                          _torch_view=float32)
    return targets


def verify_curves(targets: dict, rounds: int = 10, sizes=SIZES, context: int = CONTEXT) -> dict:
    """Median milliseconds of a forward over each size after ``context`` tokens, per candidate."""
    vocab = targets["torch float32"].config.vocab_size
    ids = [(i * 7919 + 11) % vocab for i in range(context + max(sizes))]  # fixed tokens: cost does not depend on them
    samples = {(name, n): [] for name in targets for n in sizes}
    with torch.inference_mode():
        caches = {}
        for name, t in targets.items():
            caches[name] = t.new_cache()
            t.forward(ids[:context], 0, caches[name], last_logits_only=True)
        for r in range(rounds + 1):  # round 0 warms every shape up and is not kept
            for name, t in targets.items():
                for n in sizes:
                    parents = None if n == 1 else list(range(-1, n - 1))
                    t0 = time.perf_counter()
                    t.forward(ids[context:context + n], context, caches[name], parents)
                    dt = time.perf_counter() - t0
                    t.keep(caches[name], context, [])
                    if r:
                        samples[(name, n)].append(dt)
    curves = {}
    for name in targets:
        ms = [statistics.median(samples[(name, n)]) * 1e3 for n in sizes]
        curves[name] = {"ms": [round(x, 2) for x in ms], "relative": [round(x / ms[0], 2) for x in ms]}
    return curves


def exactness(targets: dict, prompt_files: list[str], limit: int, max_new: int, log) -> dict:
    """Per prompt set and candidate: greedy choices differing from float32 along float32's
    own continuation, and texts that part. The float32 reference is computed once."""
    ref_target = targets["torch float32"]
    out = {}
    for path in prompt_files:
        prompts = load_prompts(path, limit)
        per = {name: {"positions": 0, "greedy_choices_differing": 0, "texts_identical": 0}
               for name in targets if name != "torch float32"}
        for p in prompts:
            ids = prompt_ids(ref_target, p)
            s = GenerationSettings(max_new_tokens=max_new)
            ref = generate(ref_target, prompt_ids=ids, settings=s).tokens
            ref_rows = one_token_rows(ref_target, ids, ref)
            for name, t in targets.items():
                if name == "torch float32":
                    continue
                rows = one_token_rows(t, ids, ref)
                mine = generate(t, prompt_ids=ids, settings=s).tokens
                agg = per[name]
                agg["positions"] += len(ref)
                agg["greedy_choices_differing"] += int((rows.argmax(-1) != ref_rows.argmax(-1)).sum())
                agg["texts_identical"] += int(mine == ref)
        for agg in per.values():
            agg["share_differing"] = round(agg["greedy_choices_differing"] / max(agg["positions"], 1), 4)
            agg["prompts"] = len(prompts)
        out[Path(path).stem] = per
        log(f"{Path(path).stem}: " + "; ".join(f"{n} {100 * a['share_differing']:.1f}%" for n, a in per.items()))
    return out


def format_curves(curves: dict) -> str:
    lines = ["| weights | " + " | ".join(f"{n} tok (ms)" for n in SIZES) + " | " +
             " | ".join(f"{n}/1" for n in SIZES[1:]) + " |", "|---" * (2 * len(SIZES)) + "|"]
    for name, c in curves.items():
        lines.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in c["ms"]) + " | " +
                     " | ".join(f"{x:.2f}x" for x in c["relative"][1:]) + " |")
    return "\n".join(lines)


def format_exactness(ex: dict) -> str:
    names = list(next(iter(ex.values())))
    lines = ["| prompt set | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for stem, per in ex.items():
        lines.append(f"| {stem} | " + " | ".join(
            f"{100 * per[n]['share_differing']:.1f}% ({per[n]['texts_identical']}/{per[n]['prompts']} texts)"
            for n in names) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.layouts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts-dir", default="benchmarks/prompts", help="every *.jsonl in it is a prompt set")
    ap.add_argument("--limit", type=int, default=5, help="prompts per set for exactness")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds of the cost curves")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--candidates", default=None,
                    help="comma-separated: bf16 and layout keys (" + ",".join(CANDIDATES) + "); default all")
    part = ap.add_mutually_exclusive_group()
    part.add_argument("--curves-only", action="store_true", help="the cost curves alone (a minute or two)")
    part.add_argument("--exactness-only", action="store_true", help="the exactness alone")
    ap.add_argument("--out", default=None, metavar="FILE.json")
    args = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        torch.set_num_threads(args.threads)
        keys = [k.strip() for k in args.candidates.split(",")] if args.candidates else None
        targets = candidate_targets(args.threads, keys)
        curves = None
        if not args.exactness_only:
            curves = verify_curves(targets, args.rounds)
            print(format_curves(curves), flush=True)
        ex = None
        if not args.curves_only:
            files = sorted(str(p) for p in Path(args.prompts_dir).glob("*.jsonl"))
            ex = exactness(targets, files, args.limit, args.max_new_tokens, log)
            print(format_exactness(ex))
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        save(args.out, {"threads": args.threads, "cpu": cpu_summary(), "context_tokens": CONTEXT,
                        "sizes": list(SIZES), "rounds": args.rounds, "verify_cost": curves,
                        "exactness": ex, "limit": args.limit, "max_new_tokens": args.max_new_tokens})
    return 0


if __name__ == "__main__":
    sys.exit(main())
