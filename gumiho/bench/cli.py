"""``python -m gumiho.bench``: the command line. It checks the flags and the prompt file
before loading any model, resolves the methods' drafters, runs the benchmark, prints the
table and writes the JSON record."""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import sys
import time
from typing import Optional

import torch

from ..errors import GumihoError
from ..files import LibraryPaths, configure
from ..loading import DEFAULT_TARGET_LABEL, DRAFTER_DTYPES, load_target
from ..proposers import CopySettings, as_proposer
from ..tree import TreeSettings
from .machine_load import BUSY_EFFECT, BUSY_NOTE
from .methods import DRAFTER_FLAGS, HF_LOOKUP_TOKENS, METHODS, is_default_target, registry_lookup, resolve_drafters
from .prompt_sets import load_prompts
from .runner import BenchSettings, run_benchmark
from .table import format_table


def _int_at_least(minimum: int):
    """An argparse type: a whole number >= ``minimum``."""
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {s!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1)
_nonneg_int = _int_at_least(0)


def _number(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if math.isnan(v) or math.isinf(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {s!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gumiho.bench",
        description="Benchmark vanilla vs speculative decoding (Gumiho, its all-serial / all-parallel "
                    "ablations, the one-layer EAGLE-2 baseline, the copy proposer beside Gumiho and alone) and "
                    "transformers' own generate (plain: hf; prompt lookup: hf-lookup) on the same prompts in "
                    "one process, interleaved per prompt.")
    p.add_argument("--prompts", required=True, metavar="FILE.jsonl",
                   help='prompt file, one {"question_id", "category", "turns": [...]} object a line (or '
                        '{"prompt"} / {"messages"} lines, or a .txt file of paragraphs); the first user turn '
                        "is the prompt")
    p.add_argument("--limit", type=_positive_int,
                   help="use N prompts, taken category by category in turn so that every category of the file "
                        "is covered (in file order); with --first-n, the first N lines")
    p.add_argument("--first-n", action="store_true", help="with --limit: the first N prompts of the file")
    p.add_argument("--max-new-tokens", type=_positive_int, default=128, help="per prompt (default 128)")
    p.add_argument("--temperature", type=_number, default=0.0, help="0 = greedy (default), > 0 = sampling")
    p.add_argument("--top-p", type=_number, default=1.0, help="sampling top-p (default 1 = off)")
    p.add_argument("--sample-top-k", type=_nonneg_int, default=0, help="sampling top-k (default 0 = off)")
    p.add_argument("--methods", default="vanilla,gumiho",
                   help=f"comma-separated, from {','.join(METHODS)} (default vanilla,gumiho)")
    p.add_argument("--model", default=None, metavar="ID_OR_PATH",
                   help=f"target: hub id, local folder or registry name (default: embedded {DEFAULT_TARGET_LABEL})")
    p.add_argument("--drafter", default=None, metavar="PATH",
                   help="drafter folder for the gumiho method (default: the shipped one)")
    p.add_argument("--serial-drafter", default=None, metavar="PATH", help="drafter folder for the serial method")
    p.add_argument("--parallel-drafter", default=None, metavar="PATH", help="drafter folder for the parallel method")
    p.add_argument("--eagle-drafter", default=None, metavar="PATH", help="drafter folder for the eagle method")
    p.add_argument("--eagle3-drafter", default=None, metavar="PATH",
                   help="drafter folder for the eagle3 method (this project's, or an EAGLE-3 checkpoint of another "
                        "project's layout)")
    p.add_argument("--out", default=None, metavar="FILE.json", help="write the results as JSON")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (default: fp32 on CPU, fp16 on CUDA), fp32, fp16, bf16")
    p.add_argument("--drafter-dtype", default="auto", choices=DRAFTER_DTYPES,
                   help="auto (default): the target's on a GPU; on a CPU bf16 where it has bf16 matrix "
                        "instructions (AVX512-BF16, AMX), else fp32. Never changes the output")
    p.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--runtime", default=os.environ.get("GUMIHO_RUNTIME") or None,
                   choices=("auto", "torch", "llama.cpp"),
                   help="auto (default, or GUMIHO_RUNTIME): llama.cpp for the embedded GGUF on a CPU when "
                        "llama-cpp-python is installed, else torch; torch: float32, any model; llama.cpp: the "
                        "embedded GGUF as stored")
    p.add_argument("--layout", default=os.environ.get("GUMIHO_LAYOUT") or None,
                   help="the llama.cpp runtime's 4-bit file: q4_1 (default, or GUMIHO_LAYOUT: the file as shipped) "
                        "or q4_0 (its weights rewritten, faster, less exact)")
    g = p.add_argument_group("draft tree (default: sized for the device)")
    g.add_argument("--total-tokens", type=_positive_int,
                   help="drafted nodes per step (with a cost-aware tree: the most per step)")
    g.add_argument("--depth", type=_positive_int, help="longest draft path")
    # Every value flag of this group stores under its TreeSettings field's name (tree_from_args).
    g.add_argument("--top-k", dest="serial_top_k", type=_positive_int, help="branching at the serial depths")
    g.add_argument("--mlp-top-k", type=_positive_int, help="tokens per MLP head and path")
    g.add_argument("--mlp-keep", type=_positive_int, help="paths kept at each MLP depth")
    g.add_argument("--full-tree-tokens", type=_nonneg_int, help="extra nodes of the full-tree extension")
    g.add_argument("--no-full-tree", action="store_true", help="turn the full-tree extension off")
    aware = g.add_mutually_exclusive_group()
    aware.add_argument("--cost-aware", dest="cost_aware", action="store_true", default=None,
                       help="size each step's tree by the verify cost measured on this machine, up to "
                            "--total-tokens (gumiho.engine.verifycost)")
    aware.add_argument("--fixed-size", dest="cost_aware", action="store_false",
                       help="verify --total-tokens drafted nodes every step (the default)")
    c = p.add_argument_group("copy proposer (methods gumiho+copy and copy)")

    def defaults(field: str) -> str:
        return f"default {getattr(CopySettings(), field)} beside gumiho, {getattr(CopySettings.alone(), field)} alone"

    c.add_argument("--copy-tokens", type=_positive_int, default=None,
                   help=f"longest copied guess ({defaults('max_tokens')})")
    c.add_argument("--copy-min-match", type=_positive_int, default=None,
                   help=f"shortest suffix match that counts ({defaults('min_match')})")
    c.add_argument("--copy-max-match", type=_positive_int, default=None,
                   help=f"longest suffix looked for ({defaults('max_match')})")
    c.add_argument("--copy-keep-above", type=_number, default=None,
                   help="copied nodes at least this likely are verified beyond the drafter's node budget "
                        f"(default {CopySettings().keep_above:g}: none)")
    p.add_argument("--hf-lookup-tokens", type=_positive_int, default=HF_LOOKUP_TOKENS,
                   help=f"prompt_lookup_num_tokens of the hf-lookup method (default {HF_LOOKUP_TOKENS})")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (per prompt: seed + index) and random drafters")
    p.add_argument("--warmup", type=_nonneg_int, default=1, help="prompts run first and not counted (default 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def parse_methods(text: str) -> list[str]:
    names = [m.strip().lower() for m in (text or "").split(",") if m.strip()]
    if not names:
        raise GumihoError(f"--methods is empty; use a comma-separated list from {', '.join(METHODS)}.")
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise GumihoError(f"Unknown method(s) {', '.join(unknown)}; use a comma-separated list from "
                          f"{', '.join(METHODS)}.")
    out = []
    for m in names:
        if m not in out:
            out.append(m)
    return out


def one_runtime_for(target, drafters: dict, warn):
    """Every method runs on the target's one runtime (speedups compare methods on the
    same kernels); a drafter that runtime cannot feed is refused here, in the runtime's
    own words, before anything is timed."""
    for name, d in drafters.items():
        if d is None:
            continue
        try:
            proposer = as_proposer(d)
        except GumihoError:  # not a proposer (transformers' own generate): runs the torch model itself
            continue
        try:
            target.runtime.check_proposer(proposer)
        except GumihoError as e:
            raise GumihoError(f"{name}: {e} (python -m gumiho.bench --runtime torch)") from None
    return target


# The tree flags that set a TreeSettings field of their own name (their dest); the
# switches (--no-full-tree, --cost-aware/--fixed-size) are applied one by one below.
TREE_VALUE_FLAGS = ("total_tokens", "depth", "serial_top_k", "mlp_top_k", "mlp_keep", "full_tree_tokens")


def tree_from_args(args, device, base: Optional[TreeSettings] = None, target=None) -> TreeSettings:
    """The tree flags on top of ``base`` (a registry pair's settings) or the defaults
    of the ``target``'s runtime (TreeSettings.for_target), or of the device."""
    if base is not None:
        tree = copy.copy(base)
    else:
        tree = TreeSettings.for_target(target) if target is not None else TreeSettings.for_device(device)
    for name in TREE_VALUE_FLAGS:
        v = getattr(args, name)
        if v is not None:
            setattr(tree, name, v)
    # Giving the extension a budget asks for it (the CPU default has it off, which would
    # otherwise make --full-tree-tokens silently do nothing); --no-full-tree wins.
    if args.full_tree_tokens:
        tree.full_tree = True
    if args.no_full_tree:
        tree.full_tree = False
    if getattr(args, "cost_aware", None) is not None:
        tree.cost_aware = args.cost_aware
    return tree.validate()


def busy_warning(machine: Optional[dict]) -> str:
    """The warning of a run timed on a busy machine ("" for a quiet one or an unknown)."""
    if not machine or not machine.get("busy"):
        return ""
    return (f"the machine was busy: {BUSY_NOTE.format(share=machine['others_share'], limit=machine['busy_above'])}. "
            f"{BUSY_EFFECT} Run the benchmark again on a quiet machine before reading its speedups.")


def main(argv: Optional[list[str]] = None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    args = build_parser().parse_args(argv)
    warnings: list[str] = []

    def warn(msg):
        warnings.append(msg)
        bar = "!" * 78
        print(f"{bar}\nWARNING: {msg}\n{bar}", file=sys.stderr, flush=True)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    try:
        methods = parse_methods(args.methods)
        prompts = load_prompts(args.prompts, args.limit, spread=not args.first_n)  # before any model: fail fast
        # Only the flags given: each copy method starts from its own defaults (CopySettings, .alone()).
        copy_overrides = {k: v for k, v in (("max_tokens", args.copy_tokens), ("min_match", args.copy_min_match),
                                            ("max_match", args.copy_max_match),
                                            ("keep_above", args.copy_keep_above)) if v is not None}
        for base in (CopySettings(), CopySettings.alone()):
            dataclasses.replace(base, **copy_overrides).validate()
        if "vanilla" not in methods:
            warn("vanilla is not among the methods: no speedup and no lossless check will be reported.")
        drafter_paths = {kind: getattr(args, flag[2:].replace("-", "_")) for kind, flag in DRAFTER_FLAGS.items()}
        for kind, flag in DRAFTER_FLAGS.items():
            if drafter_paths[kind] and kind not in methods and not (kind == "gumiho" and "gumiho+copy" in methods):
                warn(f"{flag} was given but the {kind} method is not in --methods; it is not used.")
        if args.threads:
            torch.set_num_threads(args.threads)
        model_arg = args.model
        entry = registry_lookup(model_arg)
        pair_tree = None
        if entry:
            model_arg = entry.get("model", model_arg)
            pair_tree = entry.get("tree")
            for kind, path in (entry.get("drafters") or {}).items():
                drafter_paths[kind] = drafter_paths.get(kind) or path
        if args.drafter:
            named = registry_lookup(args.drafter)
            if named and (named.get("drafters") or {}).get("gumiho"):
                drafter_paths["gumiho"] = named["drafters"]["gumiho"]
        log(f"loading target {model_arg or DEFAULT_TARGET_LABEL} ...")
        t0 = time.perf_counter()
        target = load_target(model_arg, device=args.device, dtype=args.dtype, runtime=args.runtime,
                             layout=args.layout)
        log(f"loaded {target.name} on {target.device} in {time.perf_counter() - t0:.1f} s; every method runs on "
            f"the {target.runtime.describe()} runtime")
        drafters, labels = resolve_drafters(target, methods, drafter_paths, is_default_target(model_arg),
                                            args.seed, warn, args.drafter_dtype, copy_overrides,
                                            args.hf_lookup_tokens)
        target = one_runtime_for(target, drafters, warn)
        settings = BenchSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                 top_p=args.top_p, top_k=args.sample_top_k, seed=args.seed, warmup=args.warmup,
                                 tree=tree_from_args(args, target.device, pair_tree, target),
                                 progress=not args.no_progress)
        record = run_benchmark(target, drafters, prompts, settings, log=log)
        busy = busy_warning(record.get("machine"))
        if busy:
            warn(busy)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, label in labels.items():
        if name in record["methods"]:
            record["methods"][name]["drafter"] = label
            record["methods"][name]["random_drafter"] = bool(label and label.startswith("random-weights"))
    record["drafter"] = labels.get("gumiho") or next((v for v in labels.values() if v), None)
    record["pair"] = args.model if entry else None
    record["prompts_file"] = os.path.basename(args.prompts)
    record["prompt_selection"] = ("all" if args.limit is None else "first" if args.first_n
                                  else "spread over categories")
    record["warnings"] = warnings
    print(format_table(record))
    if warnings:
        print(f"\n{len(warnings)} warning(s), see above (also recorded in the JSON).")
    if args.out:
        folder = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(folder, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}")
    return 0
