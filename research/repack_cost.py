"""What llama.cpp's weight repack at load (extra buffer types: CPU_REPACK, and AMX where
cpuid advertises it) is worth on this machine, for each 4-bit file the llama.cpp runtime
offers: vanilla decoding and the verify cost curve (a forward over 1-16 tokens after 200
tokens of context), the model loaded with and without extra buffer types, both in one
process, interleaved round by round. The 4-bit runtime's load rule
(gumiho.runtimes.llamacpp_trust.extra_buffers_default) is chosen from this.

    PYTHONPATH=. python research/repack_cost.py --prompts benchmarks/prompts/mt_bench.jsonl --limit 8 \\
        --out benchmarks/native/repack_cost.json

Ratios are "without / with" of wall time (above 1: loading without repacking is slower),
each a median of paired per-round (per-prompt) ratios with a 95% bootstrap interval.
"""
import argparse
import dataclasses
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

import torch

from gumiho import GenerationSettings, generate
from gumiho.bench.prompt_sets import load_prompts, prompt_ids
from gumiho.files import LibraryPaths, configure
from gumiho.loading import load_target
from gumiho.runtimes.llamacpp import LlamaCppRuntime
from gumiho.runtimes.native_probe import cpu_signature

SIZES = (1, 2, 4, 8, 16)
CONTEXT = 200


def interval(ratios: list[float], draws: int = 2000, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return [round(medians[int(0.025 * draws)], 3), round(medians[int(0.975 * draws) - 1], 3)]


def forward_ms(target, ids: list[int]) -> dict:
    """One round: a fresh cache holding CONTEXT tokens, then a forward of each size (its
    cells buried after it, as a rejected draft's are)."""
    cache = target.new_cache()
    target.forward(ids[:CONTEXT], 0, cache, last_logits_only=True)
    out = {}
    for k in SIZES:
        t0 = time.perf_counter()
        target.forward(ids[CONTEXT:CONTEXT + k], CONTEXT, cache)
        out[k] = 1000 * (time.perf_counter() - t0)
        target.keep(cache, CONTEXT, [])
    return out


def main() -> None:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layouts", default="q4_1,q4_0")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cpu = cpu_signature()
    report = {"cpu": cpu["model"], "machine": platform.machine(), "threads": args.threads,
              "amx_advertised": any(f.startswith("amx") for f in cpu["flags"]), "layouts": {}}
    print(f"CPU: {cpu['model']} ({args.threads} threads); AMX advertised: {report['amx_advertised']}", flush=True)
    docs = Path(__file__).resolve().parents[1] / "docs"
    for layout in args.layouts.split(","):
        base = load_target(runtime="llama.cpp", layout=layout)
        ids_long = base.tokenizer("\n\n".join(f.read_text() for f in sorted(docs.glob("*.md"))))["input_ids"]
        prompts = [prompt_ids(base, pr) for pr in load_prompts(args.prompts)[:args.limit]]
        targets = {}
        for on in (True, False):
            rt = LlamaCppRuntime(base.runtime.path, base.context_length, threads=args.threads,
                                 weights=base.runtime.weights, extra_buffers=on)
            if rt.extra_buffers != on:
                raise SystemExit(f"extra buffers {on} did not pass its trial here: {rt.verdict.reason()}")
            targets[on] = dataclasses.replace(base, runtime=rt)
        settings = GenerationSettings(max_new_tokens=args.max_new)
        for t in targets.values():  # warm-up
            generate(t, prompt_ids=prompts[0][:16], settings=GenerationSettings(max_new_tokens=4))
            forward_ms(t, ids_long)
        curves = {on: {k: [] for k in SIZES} for on in targets}
        for r in range(args.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            for on in order:
                for k, ms in forward_ms(targets[on], ids_long).items():
                    curves[on][k].append(ms)
        vanilla = {on: [] for on in targets}
        same = True
        for i, ids in enumerate(prompts):
            order = [True, False] if i % 2 == 0 else [False, True]
            tokens = {}
            for on in order:
                t0 = time.perf_counter()
                res = generate(targets[on], prompt_ids=ids, settings=settings)
                vanilla[on].append((time.perf_counter() - t0, len(res.tokens)))
                tokens[on] = res.tokens
            same = same and tokens[True] == tokens[False]
        row = {"cost_ms": {("with" if on else "without"): {k: round(statistics.median(v), 2) for k, v in c.items()}
                           for on, c in curves.items()}}
        row["cost_ratio"] = {k: {"median": round(statistics.median(r), 3), "ci95": interval(r)} for k in SIZES
                             for r in [[b / a for a, b in zip(curves[True][k], curves[False][k])]]}
        ratios = [b[0] / a[0] for a, b in zip(vanilla[True], vanilla[False])]
        tps = {("with" if on else "without"): round(sum(n for _, n in v) / sum(s for s, _ in v), 2)
               for on, v in vanilla.items()}
        row["vanilla"] = {"tokens_per_s": tps, "time_ratio": {"median": round(statistics.median(ratios), 3),
                                                              "ci95": interval(ratios)},
                          "same_tokens": same, "prompts": len(prompts), "max_new": args.max_new}
        report["layouts"][layout] = row
        print(f"\n{layout}: forward ms after {CONTEXT} tokens (median of {args.rounds} interleaved rounds)")
        print("  tokens      " + "".join(f"{k:>8d}" for k in SIZES))
        for name in ("with", "without"):
            print(f"  {name:8s}    " + "".join(f"{row['cost_ms'][name][k]:8.1f}" for k in SIZES))
        print("  without/with" + "".join(f"{row['cost_ratio'][k]['median']:8.3f}" for k in SIZES))
        print(f"  vanilla: {tps['with']} tok/s with, {tps['without']} without; time ratio without/with "
              f"{row['vanilla']['time_ratio']['median']} (95% {row['vanilla']['time_ratio']['ci95']}); "
              f"same tokens: {same}", flush=True)
    print(json.dumps(report))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
