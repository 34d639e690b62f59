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

With llama-cpp-python installed (requirements.txt; ``--no-llamacpp`` leaves it
out), the GGUF file as stored: this engine on its llama.cpp runtime (vanilla, gumiho,
gumiho+copy; the engine's llama.cpp runtime) interleaved like the rows above, and llama.cpp as a user
runs it (llama-cpp-python's ``Llama.generate``, greedy, the same file, prompt ids and
threads; its cache reset before each prompt), checked token for token against the
runtime's vanilla: the same kernels (those rows: gumiho.bench.llamacpp_rows).

Then vLLM vanilla, eagle3 and gumiho (the shipped gumiho drafter through the
vllm-gumiho plugin, 4 tokens per draft) at the batch sizes of ``--batch-sizes`` (the
prompts repeated to fill each batch, one generate call per batch): throughput, where a
serving engine should win.

``--vllm-only``: vLLM's vanilla, eagle3 and gumiho rows alone, measured as a service
runs them: one OpenAI-compatible server per method, the same requests sent to each in
turn (gumiho.bench.served), so that other work on the machine slows all three alike.

``--llamacpp-only``: the 4-bit file as stored, and nothing else: this engine on its
llama.cpp runtime (vanilla, gumiho, gumiho+copy), llama-cpp-python's own loop, and
llama.cpp's own server without drafting, with EAGLE-3 drafting by the shipped eagle3
drafter and with its n-gram drafting (gumiho.bench.llamacpp_served), the same prompt
ids and threads; then whether this engine's best row is at least as fast as the
server's best.

Threads: both cores to every engine, one after another: torch's threads for this
engine and transformers (``--threads``, default 2); ``VLLM_CPU_OMP_THREADS_BIND=0-1``
and no reserved core for vLLM. Each row: new tokens / wall seconds over the prompts,
and the ratio to its own engine's vanilla at batch 1 (the same tokens: greedy, and
every speculative method is checked token for token against its engine's vanilla).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

import torch

from ..engine.decode import GenerationSettings, generate
from ..errors import GumihoError
from ..files import LibraryPaths, configure
from ..kernels.machine import cpu_summary
from ..loading import llamacpp_available, load_target
from ..runtimes.llamacpp_files import DEFAULT_LAYOUT, LAYOUTS, SHIPPED_LAYOUT
from .layouts import SIZES, candidate_targets, format_curves, verify_curves
from .llamacpp_rows import llamacpp_layout_rows, llamacpp_rows, runtime_engine
from .llamacpp_served import ENGINE as SERVER_ENGINE
from .llamacpp_served import K as SERVER_K
from .llamacpp_served import paired_ratio, server_rows
from .methods import resolve_drafters
from .prompt_sets import load_prompts, prompt_ids
from .records import save
from .runner import BenchSettings, run_benchmark
from .served import GUMIHO_K

ENGINE_METHODS = ["vanilla", "gumiho", "gumiho+copy", "eagle3", "hf"]


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
    """vLLM's rows: vanilla, n-gram, EAGLE-3 (the shipped eagle3 drafter) and Gumiho (the
    shipped gumiho drafter through the vllm-gumiho plugin) at batch 1, and all but n-gram
    at ``batch_sizes`` too. One engine start per method serves its batch sizes in turn
    (after a warm-up); a batch of B repeats the prompts to fill one generate call of B
    requests. Every row's tokens are checked against vanilla's at the same batch size."""
    from ..formats.transformers_folder import export_target
    from ..serving.vllm_env import ensure_env, run_vllm
    from .served import vllm_configs

    python = ensure_env(log=log)
    model_dir = work / "target"
    export_target(target, model_dir, force=True)
    plans = [{"prompts": ids, "batch_size": 1}]
    plans += [{"prompts": [ids[i % len(ids)] for i in range(b)], "batch_size": b} for b in batch_sizes]
    rows, vanilla_tokens = [], {}
    for name, spec, batched in vllm_configs(target, work):
        runs = plans if batched else plans[:1]
        log(f"vLLM {name}, batch {', '.join(str(r['batch_size']) for r in runs)} ...")
        out = run_vllm(model_dir, ids[:1], max_new, speculative_config=spec, python=python, warmup=True, runs=runs)
        for run in out["runs"]:
            batch = run["batch_size"]
            vanilla_tokens.setdefault(batch, run["tokens"])
            rows.append(_vllm_row(name, batch, run, same=run["tokens"] == vanilla_tokens[batch]))
    return rows


def vllm_served_rows(target, ids: list, max_new: int, batch_sizes: list[int], work: Path, log) -> list[dict]:
    """vLLM vanilla, eagle3 and gumiho at batch 1 and ``batch_sizes``, interleaved: one
    server per method, the same requests sent to each in turn (gumiho.bench.served)."""
    from ..formats.transformers_folder import export_target
    from ..serving.vllm_env import ensure_env
    from .served import default_configs, served_rows

    python = ensure_env(log=log)
    export_target(target, work / "target", force=True)
    return served_rows(python, work / "target", default_configs(target, work), ids, max_new, batch_sizes, work, log)


def _vllm_row(name: str, batch: int, out: dict, same: Optional[bool]) -> dict:
    n = sum(len(t) for t in out["tokens"])
    seconds = sum(out["call_seconds"])
    row = {"engine": "vLLM", "method": name, "batch": batch, "new_tokens": n, "seconds": round(seconds, 3),
           "tokens_per_s": round(n / seconds, 2), "identical_to_vanilla": same}
    spec = out.get("spec_decode")
    if spec and spec.get("vllm:spec_decode_num_drafts"):
        drafts = spec["vllm:spec_decode_num_drafts"]
        row["accepted_per_draft"] = round(spec["vllm:spec_decode_num_accepted_tokens"] / drafts, 3)
        row["accepted_per_position"] = [round(n / drafts, 3)
                                        for n in spec.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []]
    return row


def add_ratios(rows: list[dict]) -> list[dict]:
    """Each row's tokens/s over its own engine's vanilla at batch 1 (for a larger batch:
    what batching gains in throughput)."""
    base = {}
    for r in rows:  # llama.cpp's first vanilla row is the shipped file's
        if r["method"] in ("vanilla", "generate", "vanilla, defaults") and r["batch"] == 1:
            base.setdefault(r["engine"], r["tokens_per_s"])
    for r in rows:
        own = base.get(r["engine"])
        r["ratio_to_own_vanilla"] = round(r["tokens_per_s"] / own, 3) if own else None
    return rows


def targets(rows: list[dict], curves: Optional[dict], runtime: Optional[str] = None) -> dict:
    """The flat-verify yardsticks of the rows of engine ``runtime`` (default: the runtime on
    its default file), each with its target and whether it is met: a 4-token verify on the
    file that ran against a one-token forward (at most 1.3x);
    Gumiho with copying on the runtime over the runtime's vanilla (at least 1.3x) and over
    llama.cpp's vanilla on the shipped file (above 1); and the runtime's vanilla over
    transformers and over llama.cpp on the shipped file (figures, no target)."""
    def tps(engine, method, weights=None):
        return next((r["tokens_per_s"] for r in rows if r["engine"] == engine and r["method"] == method
                     and r["batch"] == 1 and (weights is None or r.get("weights") == weights)), None)

    ratio = lambda a, b: round(a / b, 3) if a and b else None  # noqa: E731
    runtime = runtime or runtime_engine(LAYOUTS[DEFAULT_LAYOUT])
    lc, best = tps(runtime, "vanilla"), tps(runtime, "gumiho+copy")
    peer = tps("llama.cpp (llama-cpp-python)", "vanilla, defaults", LAYOUTS[SHIPPED_LAYOUT].label)
    out = {"runtime_vanilla_over_transformers": ratio(lc, tps("transformers", "generate")),
           "runtime_vanilla_over_llamacpp_shipped": ratio(lc, peer)}
    weights = next((r.get("weights") for r in rows if r["engine"] == runtime), None)
    quant = next((lay.quant for lay in LAYOUTS.values() if lay.label == weights), None)
    curve = (curves or {}).get(f"llama.cpp {quant}")
    verify4 = curve["relative"][SIZES.index(4)] if curve else None
    # Each yardstick: its value, the bound in words, and the test of the value against it.
    for key, value, goal, ok in (
            ("verify_4_over_1_its_file", verify4, "<= 1.3", lambda v: v <= 1.3),
            ("runtime_gumiho_copy_over_runtime_vanilla", ratio(best, lc), ">= 1.3", lambda v: v >= 1.3),
            ("runtime_gumiho_copy_over_llamacpp_shipped", ratio(best, peer), "> 1", lambda v: v > 1)):
        out[key] = {"value": value, "target": goal, "met": value is not None and ok(value)}
    return out


INTERLEAVED = "gumiho engine, llama.cpp runtime, beside the servers"


def llamacpp_server_target(rows: list[dict]) -> dict:
    """This engine's best 4-bit configuration (vanilla: no drafting pays on two cores,
    as the rows above show) over llama.cpp server's fastest row, drafting included, both
    timed prompt by prompt in one rotation: at least 1 is the target; with a 95%
    bootstrap interval over prompts."""
    ours = next((r for r in rows if r["engine"] == INTERLEAVED), None)
    theirs = [r for r in rows if r["engine"] == SERVER_ENGINE and r["batch"] == 1]
    if ours is None or not theirs:
        return {}
    peer = max(theirs, key=lambda r: r["tokens_per_s"])
    got = paired_ratio(ours, peer)
    return {"runtime_vanilla_over_llamacpp_server_best": {
        **got, "target": ">= 1", "met": got["value"] >= 1, "ours": ours["method"], "theirs": peer["method"]}}


def format_rows(rows: list[dict]) -> str:
    lines = ["| engine | method | batch | tokens/s | vs its own vanilla at batch 1 | tau / accepted |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        extra = (f"tau {r['tau']:.2f}" if "tau" in r else
                 f"{r['accepted_per_draft']:.2f} accepted per draft" if "accepted_per_draft" in r else
                 f"{r['accepted_share']:.2f} of drafted tokens accepted" if "accepted_share" in r else "-")
        lines.append(f"| {r['engine']} | {r['method']} | {r['batch']} | {r['tokens_per_s']:.1f} | "
                     f"{r['ratio_to_own_vanilla']:.2f}x | {extra} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.engines", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="a bench prompt file (.jsonl)")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-sizes", default="8,32",
                    help="vLLM's batched runs, beside batch 1: vanilla, eagle3 and gumiho (comma-separated; '' none)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of this engine and transformers")
    ap.add_argument("--no-vllm", action="store_true", help="leave vLLM out")
    ap.add_argument("--no-llamacpp", action="store_true", help="leave llama.cpp (the GGUF as stored) out")
    ap.add_argument("--vllm-only", action="store_true",
                    help="vLLM's rows only: vanilla, eagle3 and gumiho, one server each, their requests interleaved "
                         "(gumiho.bench.served); this engine, llama.cpp and n-gram left out")
    ap.add_argument("--llamacpp-only", action="store_true",
                    help="the 4-bit file as stored only: this engine's llama.cpp runtime, llama-cpp-python, and "
                         "llama.cpp's own server without drafting, with EAGLE-3 and with n-gram drafting")
    ap.add_argument("--note", default=None,
                    help="a sentence kept with the record and shown by the report (e.g. what else ran on the machine)")
    ap.add_argument("--out", default=None, metavar="FILE.json")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if args.llamacpp_only:
        return llamacpp_only(args, log)
    try:
        torch.set_num_threads(args.threads)
        prompts = load_prompts(args.prompts, args.limit)
        target = load_target(None, device="cpu", runtime="torch")
        rows, record, lossless = [], {}, {}
        if not args.vllm_only:
            rows, record = engine_rows(target, prompts, args.max_new_tokens, log)
            lossless["torch runtime"] = record["lossless"]
        ids = [prompt_ids(target, p) for p in prompts]
        if not args.vllm_only and not args.no_llamacpp and llamacpp_available():
            more, lc_records = llamacpp_rows(prompts, ids, args.max_new_tokens, args.threads, log)
            rows += more
            for key, rec in lc_records.items():
                lossless[f"llama.cpp runtime, {LAYOUTS[key].label}"] = rec["lossless"]
        curves = None
        if not args.vllm_only and not args.no_llamacpp and llamacpp_available():
            log("verify cost curves of every candidate layout ...")
            curves = verify_curves(candidate_targets(args.threads))
        if not args.no_vllm:
            sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
            with tempfile.TemporaryDirectory(prefix="gumiho-engines-") as work:
                if args.vllm_only:
                    rows += vllm_served_rows(target, ids, args.max_new_tokens, sizes, Path(work), log)
                else:
                    rows += vllm_rows(target, ids, args.max_new_tokens, sizes, Path(work), log)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = add_ratios(rows)
    settings = {"vllm": "vllm-cpu 0.32.0, float32, eager, VLLM_CPU_OMP_THREADS_BIND=0-1, "
                        "VLLM_CPU_NUM_OF_RESERVED_CPU=0" + (", OpenAI-compatible servers, OMP_WAIT_POLICY=PASSIVE, "
                                                           "requests interleaved" if args.vllm_only else ""),
                "vllm drafters": f"eagle3: 3 tokens per draft (vLLM's eagle3 method); gumiho: {GUMIHO_K} tokens per "
                                 f"draft (vllm-gumiho plugin, eagle method)"}
    if not args.vllm_only:
        settings.update({"engine": f"torch {torch.__version__}, {args.threads} threads, the device's tree",
                         "engine, llama.cpp runtime": "the runtime's tree, a chain of one (TreeSettings.for_target), "
                                                      "its default file (gumiho.runtimes.llamacpp_files)",
                         "llama.cpp": f"llama-cpp-python 0.3.36, {args.threads} threads, the shipped Q4_1 file and the "
                                      f"runtime's file; defaults: flash attention off, float16 cache"})
    result = {"prompts_file": os.path.basename(args.prompts), "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "threads": args.threads,
              "cpu": record.get("cpu") or cpu_summary(), "engine_lossless": lossless, "rows": rows,
              "settings": settings, **({"note": args.note} if args.note else {})}
    print(format_rows(rows))
    if not args.vllm_only:
        result["verify_cost"] = curves
        result["targets"] = {layout.label: targets(rows, curves, runtime_engine(layout))
                             for layout in LAYOUTS.values()}
        if curves:
            print(format_curves(curves))
        for weights, got in result["targets"].items():
            print(f"llama.cpp runtime, {weights}:")
            for key, t in got.items():
                print(f"  {key}: {t['value']} (target {t['target']}: {'met' if t['met'] else 'not met'})"
                      if isinstance(t, dict) else f"  {key}: {t}")
    if args.out:
        save(args.out, result)
    return 0


def llamacpp_only(args, log) -> int:
    """``--llamacpp-only`` (module docstring)."""
    layout = LAYOUTS[SHIPPED_LAYOUT]
    try:
        torch.set_num_threads(args.threads)
        prompts = load_prompts(args.prompts, args.limit)
        if not llamacpp_available():
            raise GumihoError("llama-cpp-python is not installed (requirements.txt installs it).")
        target = load_target(None, device="cpu", runtime="llama.cpp", layout=layout.key)
        ids = [prompt_ids(target, p) for p in prompts]
        rows, record = llamacpp_layout_rows(layout, prompts, ids, args.max_new_tokens, args.threads, log)
        settings = GenerationSettings(max_new_tokens=args.max_new_tokens)
        local = (INTERLEAVED, "vanilla", lambda p: generate(target, prompt_ids=p, settings=settings).tokens)
        with tempfile.TemporaryDirectory(prefix="gumiho-engines-") as work:
            rows += server_rows(ids, args.max_new_tokens, args.threads, Path(work), layout.label, log, local)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = add_ratios(rows)
    from ..serving.llamacpp_build import SOURCE_VERSION

    settings = {"engine, llama.cpp runtime": "the runtime's tree, a chain of one (TreeSettings.for_target), the "
                                             "shipped Q4_1 file",
                "llama.cpp": f"llama-cpp-python {SOURCE_VERSION}, {args.threads} threads, the shipped Q4_1 file; "
                             f"defaults: flash attention off, float16 cache",
                "llama.cpp server": f"llama-server built from llama-cpp-python {SOURCE_VERSION}'s vendor/llama.cpp, "
                                    f"-t {args.threads}, the shipped Q4_1 file, its defaults otherwise; /completion "
                                    f"with prompt ids, greedy, cache_prompt off; eagle3: the shipped eagle3 drafter "
                                    f"(gumiho.formats.eagle3_gguf), --spec-type draft-eagle3; n-gram: --spec-type "
                                    f"ngram-simple; both --spec-draft-n-max {SERVER_K} --spec-draft-n-min 0 "
                                    f"--spec-draft-p-min 0; the three servers up at once, requests interleaved"}
    result = {"prompts_file": os.path.basename(args.prompts), "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "threads": args.threads, "cpu": record.get("cpu") or cpu_summary(),
              "engine_lossless": {f"llama.cpp runtime, {layout.label}": record["lossless"]}, "rows": rows,
              "settings": settings, "targets": llamacpp_server_target(rows), **({"note": args.note} if args.note else {})}
    print(format_rows(rows))
    for key, t in result["targets"].items():
        print(f"{key}: {t['value']} (95% interval {t['low']}-{t['high']} over {t['prompts']} prompts; this engine's "
              f"{t['ours']} over llama-server's {t['theirs']}; target {t['target']}: {'met' if t['met'] else 'not met'})")
    if args.out:
        save(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
