"""Engine peers: this project's engine beside vLLM and transformers on the same prompts,
the same machine, one engine at a time.

    python -m gumiho.bench.engines --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 \\
        --max-new-tokens 64 --out benchmarks/engines/mt_bench.json

Batch 1 (one prompt at a time, as a single user sends them), greedy:

* this engine: vanilla, gumiho, gumiho+copy and eagle3 (the shipped drafters, the
  device's tree), and transformers' ``generate`` (hf) on the same model object, through
  the bench's runner (interleaved prompt by prompt, after a warm-up);
* vLLM's CPU build (gumiho.serving, its own environment) on the default target as
  ``python -m gumiho.export target`` writes it: vanilla, n-gram (prompt lookup, 3 tokens
  per draft) and EAGLE-3 with the shipped eagle3 drafter as ``python -m gumiho.export
  eagle3`` writes it (3 tokens per draft); one engine start each, a warm-up call, then
  every prompt in its own generate call.

Then vLLM vanilla at the batch sizes of ``--batch-sizes`` (the prompts repeated to fill
each batch, one generate call per batch): throughput, where a serving engine should win.

Threads: both cores to every engine, one after another: torch's threads for this
engine and transformers (``--threads``, default 2); ``VLLM_CPU_OMP_THREADS_BIND=0-1``
and no reserved core for vLLM. Each row: new tokens / wall seconds over the prompts,
and the ratio to its own engine's vanilla at batch 1 (the same tokens: greedy, and
every speculative method is checked token for token against its engine's vanilla).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

import torch

from ..errors import GumihoError
from ..models import load_target
from .methods import resolve_drafters
from .prompts import load_prompts, prompt_ids
from .runner import BenchSettings, run_benchmark

ENGINE_METHODS = ["vanilla", "gumiho", "gumiho+copy", "eagle3", "hf"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


def engine_rows(target, prompts, max_new: int, log) -> tuple[list[dict], dict]:
    """This engine's and transformers' rows (batch 1), and the bench record they come from."""
    drafters, _ = resolve_drafters(target, ENGINE_METHODS, {}, True, 0, warn=log)
    record = run_benchmark(target, drafters, prompts, BenchSettings(max_new_tokens=max_new, progress=False),
                           log=log)
    rows = []
    for name, m in record["methods"].items():
        engine = "transformers" if name == "hf" else "gumiho engine"
        rows.append({"engine": engine, "method": "generate" if name == "hf" else name, "batch": 1,
                     "new_tokens": m["new_tokens"], "seconds": m["wall_s"], "tokens_per_s": m["tokens_per_s"],
                     "tau": m["tau"]})
    return rows, record


def vllm_rows(target, ids: list, max_new: int, batch_sizes: list[int], work: Path, log) -> list[dict]:
    """vLLM's rows: vanilla, n-gram and EAGLE-3 at batch 1, vanilla at ``batch_sizes``."""
    from ..export.target import export_target
    from ..formats.eagle3 import write_eagle3
    from ..models import load_drafter, shipped_drafter_path
    from ..serving.vllm_env import ensure_env, run_vllm

    python = ensure_env(log=log)
    model_dir, drafter_dir = work / "target", work / "eagle3"
    export_target(target, model_dir, force=True)
    shipped = shipped_drafter_path("eagle3")
    configs = [("vanilla", None), ("n-gram", NGRAM)]
    if shipped:
        write_eagle3(load_drafter(shipped, target, dtype="fp32"), str(drafter_dir), target.config)
        configs.append(("eagle3", {"method": "eagle3", "model": str(drafter_dir), "num_speculative_tokens": 3}))
    rows, vanilla_tokens = [], None
    for name, spec in configs:
        log(f"vLLM {name}, batch 1 ...")
        out = run_vllm(model_dir, ids, max_new, speculative_config=spec, python=python, batch_size=1, warmup=True)
        vanilla_tokens = vanilla_tokens or out["tokens"]
        rows.append(_vllm_row(name, 1, out, same=out["tokens"] == vanilla_tokens))
    for batch in batch_sizes:
        log(f"vLLM vanilla, batch {batch} ...")
        requests = [ids[i % len(ids)] for i in range(batch)]
        out = run_vllm(model_dir, requests, max_new, python=python, batch_size=batch, warmup=True)
        rows.append(_vllm_row("vanilla", batch, out, same=None))
    return rows


def _vllm_row(name: str, batch: int, out: dict, same: Optional[bool]) -> dict:
    n = sum(len(t) for t in out["tokens"])
    seconds = sum(out["call_seconds"])
    row = {"engine": "vLLM", "method": name, "batch": batch, "new_tokens": n, "seconds": round(seconds, 3),
           "tokens_per_s": round(n / seconds, 2), "identical_to_vanilla": same}
    spec = out.get("spec_decode")
    if spec and spec.get("vllm:spec_decode_num_drafts"):
        row["accepted_per_draft"] = round(spec["vllm:spec_decode_num_accepted_tokens"]
                                          / spec["vllm:spec_decode_num_drafts"], 3)
    return row


def add_ratios(rows: list[dict]) -> list[dict]:
    """Each row's tokens/s over its own engine's vanilla at batch 1 (for a larger batch:
    what batching gains in throughput)."""
    base = {r["engine"]: r["tokens_per_s"] for r in rows if r["method"] in ("vanilla", "generate") and r["batch"] == 1}
    for r in rows:
        own = base.get(r["engine"])
        r["ratio_to_own_vanilla"] = round(r["tokens_per_s"] / own, 3) if own else None
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = ["| engine | method | batch | tokens/s | vs its own vanilla at batch 1 | tau / accepted per draft |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        extra = (f"tau {r['tau']:.2f}" if "tau" in r else
                 f"{r['accepted_per_draft']:.2f} accepted per draft" if "accepted_per_draft" in r else "-")
        lines.append(f"| {r['engine']} | {r['method']} | {r['batch']} | {r['tokens_per_s']:.1f} | "
                     f"{r['ratio_to_own_vanilla']:.2f}x | {extra} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.engines", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="a bench prompt file (.jsonl)")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-sizes", default="8,32", help="vLLM vanilla throughput runs (comma-separated; '' none)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of this engine and transformers")
    ap.add_argument("--no-vllm", action="store_true", help="this engine and transformers only")
    ap.add_argument("--out", default=None, metavar="FILE.json")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    try:
        torch.set_num_threads(args.threads)
        prompts = load_prompts(args.prompts, args.limit)
        target = load_target(None, device="cpu")
        rows, record = engine_rows(target, prompts, args.max_new_tokens, log)
        if not args.no_vllm:
            ids = [prompt_ids(target, p) for p in prompts]
            sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
            with tempfile.TemporaryDirectory(prefix="gumiho-engines-") as work:
                rows += vllm_rows(target, ids, args.max_new_tokens, sizes, Path(work), log)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = add_ratios(rows)
    result = {"prompts_file": os.path.basename(args.prompts), "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "threads": args.threads, "cpu": record.get("cpu"),
              "engine_lossless": record["lossless"], "rows": rows,
              "settings": {"vllm": "vllm-cpu 0.32.0, float32, eager, VLLM_CPU_OMP_THREADS_BIND=0-1, "
                                   "VLLM_CPU_NUM_OF_RESERVED_CPU=0",
                           "engine": f"torch {torch.__version__}, {args.threads} threads, the device's tree"}}
    print(format_rows(rows))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
