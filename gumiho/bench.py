"""The benchmark: vanilla and speculative decoding on the same prompts, in one process.

    python -m gumiho.bench --prompts mt_bench.jsonl --limit 10 --max-new-tokens 64

For every prompt the methods run one after the other (vanilla first, then each
speculative method), so whatever else the machine is doing slows all of them alike.
A warm-up on the first prompts comes first and is not counted. The table and the
JSON use the metric words of :mod:`gumiho.metrics`; ``speedup_vs_vanilla`` is
vanilla's total wall time over the method's when both wrote the same number of
tokens on every prompt, else (sampling) the method's tokens/s over vanilla's, and
``speedup_kind`` says which ("wall time" or "throughput"); ``lossless`` counts, at
temperature 0, the (prompt, speculative method) pairs whose tokens equal vanilla's.

The core, :func:`run_benchmark`, takes loaded models and is what the tests call;
:func:`main` parses the command line, loads models and prompt files, and prints.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence, Union

import torch

from .copying import CopySettings, split_copy, with_copy
from .decode import GenerationSettings, draft_depth, stream
from .errors import GumihoError
from .machine import cpu_summary
from .metrics import SPEEDUP_THROUGHPUT, GenerationStats, speedup, speedup_kind, summarize
from .models import (DEFAULT_TARGET, DEFAULT_TARGET_LABEL, DRAFTER_DTYPES, Target, drafter_dtype, load_drafter, load_target,
                     shipped_drafter_path)
from .prompts_file import read_prompts
from .tree import TreeSettings
from .verifycost import tokens_needed, verify_cost_for

# eagle: the one-layer all-serial EAGLE-2 baseline the paper compares Gumiho with.
DRAFTER_METHODS = ("gumiho", "serial", "parallel", "eagle")
# The copy proposer (gumiho.copying) beside the Gumiho drafter, and alone.
COPY_METHODS = ("gumiho+copy", "copy")
# What a user would pick instead: Hugging Face generate, plain and with its prompt lookup.
HF_METHODS = ("hf", "hf-lookup")
SPECULATIVE_METHODS = DRAFTER_METHODS + COPY_METHODS
METHODS = ("vanilla",) + SPECULATIVE_METHODS + HF_METHODS
HF_LOOKUP_TOKENS = 10  # prompt_lookup_num_tokens of hf-lookup: the value transformers' documentation shows
# The drafter folder flag of each speculative method.
DRAFTER_FLAGS = {"gumiho": "--drafter", "serial": "--serial-drafter", "parallel": "--parallel-drafter",
                 "eagle": "--eagle-drafter"}
TABLE_POSITIONS = 7  # acceptance columns shown in the table (every drafter kind reaches 7)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- prompts


@dataclass
class Prompt:
    """One benchmark prompt: ``text`` goes through the target's chat template;
    ``ids``, when given, are used as they are (tests with tokenizer-less targets)."""

    question_id: object = None
    category: str = ""
    text: str = ""
    ids: Optional[list[int]] = None
    system: Optional[str] = None  # the prompt file's system message, sent before the prompt


def load_prompts(path: str, limit: Optional[int] = None, spread: bool = True) -> list[Prompt]:
    """The prompts of a prompt file, read by :func:`gumiho.prompts_file.read_prompts`
    (the reader every command shares: MT-Bench's ``{"question_id", "category",
    "turns"}`` lines, ``prompt`` / ``messages`` lines, ``.txt`` paragraphs); the first
    user turn is the prompt, after the record's system message if it has one. Every
    problem raises GumihoError naming the file, the line and what a valid line looks like.

    With ``limit``, ``spread`` takes the prompts category by category in turn (the
    first of each category, then the second of each, ...) and keeps them in file
    order, so a few prompts of a file sorted by category (MT-Bench: ten writing
    prompts first) still cover every category; a single-category file gives its
    first ``limit`` prompts either way. ``spread=False`` takes the first ``limit``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise GumihoError(f"--limit must be a whole number >= 1, got {limit!r}.")
    prompts = [Prompt(question_id=c.id, category=c.source, text=c.user_turns[0], system=c.system)
               for c in read_prompts(path)]
    if limit is None or len(prompts) <= limit:
        return prompts
    if not spread:
        return prompts[:limit]
    by_category: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        by_category.setdefault(p.category, []).append(i)
    chosen: list[int] = []
    rank = 0
    while len(chosen) < limit:
        for rows in by_category.values():  # categories in order of first appearance
            if rank < len(rows) and len(chosen) < limit:
                chosen.append(rows[rank])
        rank += 1
    return [prompts[i] for i in sorted(chosen)]


# ----------------------------------------------------------------------------- core


@dataclass
class BenchSettings:
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # sampling top-k (0 = off); not the tree's top-k
    seed: int = 0
    warmup: int = 1  # prompts run (and discarded) before measuring
    warmup_tokens: int = 16  # max_new_tokens of a warm-up run
    tree: Optional[TreeSettings] = None  # None: sized for the device
    progress: bool = True

    def validate(self) -> "BenchSettings":
        GenerationSettings(self.max_new_tokens, self.temperature, self.top_p, self.top_k, self.seed,
                           self.tree).validate()
        for name in ("warmup", "warmup_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise GumihoError(f"{name} must be a whole number >= 0, got {v!r}.")
        return self


@dataclass
class _Run:
    tokens: list[int]
    stats: GenerationStats
    finish_reason: Optional[str]


@dataclass
class _MethodTotals:
    stats: GenerationStats = field(default_factory=GenerationStats)
    runs: int = 0


def _prompt_ids(target: Target, p: Union[Prompt, str, Sequence[int]]) -> list[int]:
    if isinstance(p, Prompt):
        if p.ids is not None:
            return list(p.ids)
        if p.system is not None:
            return target.encode([{"role": "system", "content": p.system}, {"role": "user", "content": p.text}])
        return target.encode(p.text)
    if isinstance(p, str):
        return target.encode(p)
    return [int(t) for t in p]


def _as_prompt(p, i: int) -> Prompt:
    if isinstance(p, Prompt):
        return p
    if isinstance(p, str):
        return Prompt(question_id=i, text=p)
    return Prompt(question_id=i, ids=[int(t) for t in p])


def _dtype_name(weight) -> Optional[str]:
    return str(weight.dtype).replace("torch.", "") if isinstance(weight, torch.Tensor) else None


def _depth(drafter) -> int:
    return 0 if drafter is None or isinstance(drafter, HFGenerate) else draft_depth(drafter)


@dataclass
class HFGenerate:
    """A peer method: transformers' own ``generate`` on the same target model,
    plain (``lookup_tokens`` 0) or with its prompt-lookup decoding."""

    lookup_tokens: int = 0

    @property
    def cfg(self):
        return None


def _run_hf(target: Target, ids: list[int], method: HFGenerate, gen: GenerationSettings) -> _Run:
    """One ``generate`` call, timed as a caller waits for it; its target forwards are
    counted by a hook, so tau means the same as for the other methods."""
    forwards = [0]

    def count(*_):
        forwards[0] += 1

    kw = dict(max_new_tokens=gen.max_new_tokens, eos_token_id=sorted(target.eos_ids) or None,
              pad_token_id=target.tokenizer.pad_token_id if getattr(target, "tokenizer", None) is not None
              and target.tokenizer.pad_token_id is not None else 0)
    if gen.temperature == 0:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        torch.manual_seed(gen.seed if gen.seed is not None else 0)
        kw.update(do_sample=True, temperature=gen.temperature, top_p=gen.top_p, top_k=gen.top_k or None)
    if method.lookup_tokens:
        kw["prompt_lookup_num_tokens"] = method.lookup_tokens
    # Never more tokens than the context holds (our stream stops there too).
    kw["max_new_tokens"] = max(1, min(kw["max_new_tokens"], target.context_length - len(ids)))
    handle = target.model.register_forward_pre_hook(count)
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = target.model.generate(torch.tensor([ids], device=target.device), **kw)
        wall = time.perf_counter() - t0
    finally:
        handle.remove()
    tokens = out[0, len(ids):].tolist()
    reason = "eos" if tokens and tokens[-1] in target.eos_ids else "length"
    st = GenerationStats(new_tokens=len(tokens), target_forwards=forwards[0], wall_s=wall)
    return _Run(tokens, st, reason)


def _run_one(target: Target, ids: list[int], drafter, gen: GenerationSettings) -> _Run:
    if isinstance(drafter, HFGenerate):
        return _run_hf(target, ids, drafter, gen)
    t0 = time.perf_counter()
    steps = list(stream(target, ids, drafter, gen))
    wall = time.perf_counter() - t0
    st = summarize(steps, _depth(drafter))
    # The whole call as the caller waits for it (drafter set-up included).
    st.wall_s = wall
    tokens = [t for s in steps for t in s.tokens]
    return _Run(tokens, st, steps[-1].finish_reason if steps else None)


def run_benchmark(target: Target, drafters: dict, prompts: Sequence, settings: Optional[BenchSettings] = None,
                  log=None) -> dict:
    """Run every method on every prompt, interleaved per prompt, after a warm-up.

    ``drafters`` maps a method name to a drafter, with ``None`` for vanilla
    (e.g. ``{"vanilla": None, "gumiho": d}``); names run in the dict's order, and
    vanilla, when present, always runs first on each prompt. ``prompts`` holds
    :class:`Prompt` objects, strings (chat-templated) or lists of token ids.
    Returns the benchmark record (see the module docstring); ``main`` adds the
    model/drafter labels it knows about."""
    settings = (settings or BenchSettings()).validate()
    if not drafters:
        raise GumihoError("No methods to run; use e.g. --methods vanilla,gumiho.")
    prompts = [_as_prompt(p, i) for i, p in enumerate(prompts)]
    if not prompts:
        raise GumihoError("No prompts to run.")
    log = log or (lambda msg: None)
    names = list(drafters)
    if "vanilla" in names:
        names.remove("vanilla")
        names.insert(0, "vanilla")
    spec_names = [n for n in names if drafters[n] is not None]
    tree = (settings.tree or TreeSettings.for_device(target.device)).validate()

    def gen_settings(i: int, max_new: int) -> GenerationSettings:
        # The same seed for every method on a prompt (sampling runs are then comparable).
        return GenerationSettings(max_new_tokens=max_new, temperature=settings.temperature, top_p=settings.top_p,
                                  top_k=settings.top_k, seed=settings.seed + i, tree=tree)

    encoded = []
    ctx = target.context_length
    for p in prompts:
        try:
            ids = _prompt_ids(target, p)
        except GumihoError as e:
            raise GumihoError(f"Prompt {p.question_id}: {e}") from None
        if len(ids) >= ctx:
            raise GumihoError(f"Prompt {p.question_id} is {len(ids)} tokens long but {target.name} reads at most "
                              f"{ctx} tokens (including the answer); drop it from the prompt file or shorten it.")
        encoded.append(ids)

    verify_cost = None
    if tree.cost_aware and spec_names:
        # Measured once, before anything is timed (stream would measure it on first use).
        log("measuring the verify cost per tree size")
        verify_cost = verify_cost_for(target, tokens_needed(tree))

    # Warm-up: the first prompts through every method, not counted.
    n_warm = min(settings.warmup, len(prompts))
    if n_warm and settings.warmup_tokens:
        log(f"warming up on {n_warm} prompt(s)")
        for i in range(n_warm):
            for name in names:
                _run_one(target, encoded[i], drafters[name],
                         gen_settings(i, min(settings.warmup_tokens, settings.max_new_tokens)))

    totals = {name: _MethodTotals() for name in names}
    # (vanilla tokens, vanilla wall, method tokens, method wall) per prompt: the speedup's input.
    pairs = {name: [] for name in names}
    per_prompt = []
    checked = identical = 0
    mismatches = []
    greedy = settings.temperature == 0
    bar = _progress(len(prompts), settings.progress)
    try:
        for i, (p, ids) in enumerate(zip(prompts, encoded)):
            row = {"question_id": p.question_id, "category": p.category, "prompt_tokens": len(ids), "methods": {}}
            runs = {}
            for name in names:
                try:
                    run = _run_one(target, ids, drafters[name], gen_settings(i, settings.max_new_tokens))
                except GumihoError as e:
                    raise GumihoError(f"Prompt {p.question_id}, method {name}: {e}") from None
                runs[name] = run
                t = totals[name]
                t.stats = t.stats.merge(run.stats)
                t.runs += 1
                row["methods"][name] = {"new_tokens": run.stats.new_tokens, "wall_s": round(run.stats.wall_s, 4),
                                        "target_forwards": run.stats.target_forwards,
                                        "finish_reason": run.finish_reason}
            if "vanilla" in runs:
                van_run = runs["vanilla"].stats
                for name in names:
                    pairs[name].append((van_run.new_tokens, van_run.wall_s, runs[name].stats.new_tokens,
                                        runs[name].stats.wall_s))
            if greedy and "vanilla" in runs:
                ref = runs["vanilla"].tokens
                for name in spec_names:
                    same = runs[name].tokens == ref
                    checked += 1
                    identical += same
                    row["methods"][name]["identical"] = same
                    if not same:
                        first = next((k for k, (a, b) in enumerate(zip(ref, runs[name].tokens)) if a != b),
                                     min(len(ref), len(runs[name].tokens)))
                        mismatches.append({"question_id": p.question_id, "method": name, "first_difference": first})
            per_prompt.append(row)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()

    methods = {}
    for name in names:
        st = totals[name].stats
        sp = speedup(pairs[name]) if pairs[name] else None
        depth = max(_depth(drafters[name]), TABLE_POSITIONS) if _depth(drafters[name]) else 0
        # The learned drafter (None for vanilla, the copy proposer alone and the HF peers) and copy settings.
        learned, copy_settings = split_copy(None if isinstance(drafters[name], HFGenerate) else drafters[name])
        methods[name] = {
            "new_tokens": st.new_tokens,
            "wall_s": round(st.wall_s, 4),
            "tokens_per_s": round(st.tokens_per_s, 3),
            "target_forwards": st.target_forwards,
            "tau": round(st.tau, 4),
            "acceptance_by_position": [round(a, 4) for a in st.acceptance_by_position(depth)],
            "conditional_acceptance_by_position": [round(a, 4) for a in st.conditional_acceptance_by_position(depth)],
            "speedup_vs_vanilla": None if sp is None else round(sp, 4),
            # "wall time" (the same tokens as vanilla on every prompt) or "throughput" (tokens/s: sampled
            # runs of different lengths, where wall times would credit whoever stopped sooner).
            "speedup_kind": speedup_kind(pairs[name]) if sp is not None else None,
            # Extra keys (not part of the fixed contract above).
            "verify_steps": st.verify_steps,
            "mean_drafted": round(st.mean_drafted, 3),
            "draft_s": round(st.draft_s, 4),
            "verify_s": round(st.verify_s, 4),
            "tree": asdict(tree) if learned is not None else None,
            "drafter_kind": getattr(getattr(drafters[name], "cfg", None), "kind", None),
            "drafter_dtype": _dtype_name(getattr(getattr(learned, "fc", None), "weight", None)),
            # Who proposed the accepted draft tokens ("serial", "mlp", "copy"), and the copy proposer's
            # settings and drafted nodes (its acceptance: accepted "copy" tokens / copy_nodes).
            "accepted_by_proposer": dict(sorted(st.accepted_by_head.items())),
            "copy": asdict(copy_settings) if copy_settings is not None else None,
            "copy_nodes": st.copy_nodes,
            # The copy proposer's part of acceptance_by_position (the rest is the drafter's heads').
            "copied_acceptance_by_position": ([round(a, 4) for a in st.copied_acceptance_by_position(depth)]
                                              if copy_settings is not None else None),
            "hf_lookup_tokens": drafters[name].lookup_tokens if isinstance(drafters[name], HFGenerate) else None,
        }
    return {
        "model": target.name,
        "drafter": None,
        "device": str(target.device),
        "temperature": settings.temperature,
        "max_new_tokens": settings.max_new_tokens,
        "prompts": len(prompts),
        "methods": methods,
        "lossless": {"checked": checked, "identical": identical},
        # Extra keys.
        "lossless_mismatches": mismatches,
        "top_p": settings.top_p,
        "top_k": settings.top_k,
        "seed": settings.seed,
        "warmup_prompts": n_warm,
        # The cost-aware tree's view of this machine: ms of a verify over 1, 2, ... tokens.
        "verify_ms": None if verify_cost is None else {
            "measured": [round(1000 * c, 3) for c in verify_cost.measured],
            "fitted": [round(1000 * c, 3) for c in verify_cost.seconds]},
        "torch_threads": torch.get_num_threads(),
        # Speedups on a CPU depend on its vector units (see gumiho.machine).
        "cpu": cpu_summary() if str(target.device).startswith("cpu") else None,
        "torch_version": torch.__version__,
        "dtype": str(target.dtype).replace("torch.", ""),
        "per_prompt": per_prompt,
        "warnings": [],
    }


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="prompts", unit="prompt", file=sys.stderr, dynamic_ncols=True)


# ----------------------------------------------------------------------------- table


def _speedup_words(record: dict) -> str:
    """How the table's speedups were computed, in the words the record's kinds call for."""
    kinds = {m.get("speedup_kind") for m in record["methods"].values()}
    if SPEEDUP_THROUGHPUT not in kinds:
        return "speedup = vanilla wall / method wall (the same tokens on every prompt)."
    return ("speedup (tok/s) = method tokens/s / vanilla tokens/s: sampling wrote texts of other lengths, so "
            "wall times are not compared.")


def format_table(record: dict) -> str:
    """A plain-text table of the record's methods."""
    head = ["method", "new tok", "wall s", "tok/s", "fwd", "tau"]
    head += [f"a{d}" for d in range(1, TABLE_POSITIONS + 1)] + ["speedup"]
    rows = [head]
    for name, m in record["methods"].items():
        acc = list(m["acceptance_by_position"][:TABLE_POSITIONS])
        acc_cells = [f"{a:.2f}" for a in acc] + ["-"] * (TABLE_POSITIONS - len(acc))
        sp = m["speedup_vs_vanilla"]
        # A throughput ratio is marked, so that a glance at the table tells it from a wall-time one.
        mark = " (tok/s)" if m.get("speedup_kind") == SPEEDUP_THROUGHPUT else ""
        rows.append([name, str(m["new_tokens"]), f"{m['wall_s']:.2f}", f"{m['tokens_per_s']:.1f}",
                     str(m["target_forwards"]), f"{m['tau']:.2f}"] + acc_cells
                    + ["-" if sp is None else f"{sp:.2f}x{mark}"])
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ll = record["lossless"]
    proposers = []
    for name, m in record["methods"].items():
        by = m.get("accepted_by_proposer") or {}
        if m.get("copy") is not None:
            copied = by.get("copy", 0)
            nodes = m.get("copy_nodes", 0)
            rate = f" ({copied / nodes:.0%})" if nodes else ""
            proposers.append(f"{name}: accepted draft tokens by proposer: "
                             + ", ".join(f"{h} {n}" for h, n in by.items())
                             + f"; copied nodes accepted: {copied} of {nodes}{rate}")
    notes = proposers + [f"a1..a{TABLE_POSITIONS}: acceptance by position (share of verify steps with accepted draft "
             f"length >= d); tau = new tokens / target forwards; " + _speedup_words(record)]
    if record["temperature"] == 0:
        verdict = "OK" if ll["identical"] == ll["checked"] else "MISMATCH"
        notes.append(f"lossless (greedy): {ll['identical']}/{ll['checked']} speculative runs identical to vanilla "
                     f"[{verdict}]")
    else:
        notes.append("lossless: not checked token for token at temperature > 0 (sampling).")
    return "\n".join(lines + [""] + notes)


# ----------------------------------------------------------------------------- models


def registry_lookup(name: Optional[str]) -> Optional[dict]:
    """A named target/drafter pair from ``gumiho.registry`` (e.g. ``smollm2-135m-gumiho``,
    ``amd/Gumiho-llama3-8b``): ``{"model", "drafters": {method: path or id}, "tree"}``,
    or None when ``name`` is not a pair's name (it is then a hub id or a path)."""
    if not name:
        return None
    try:
        from . import registry  # noqa: F401  (optional module)
    except ImportError:
        return None
    lookup = getattr(registry, "lookup", None)
    return lookup(name) if callable(lookup) else None


def _is_default_target(name: Optional[str]) -> bool:
    return name is None or name.strip().lower() in (DEFAULT_TARGET, DEFAULT_TARGET_LABEL.lower(), "default")


def _label(path: str) -> str:
    """A drafter path as recorded in the JSON: relative to the repository when inside it."""
    full = os.path.abspath(path)
    return os.path.relpath(full, REPO_ROOT) if full.startswith(REPO_ROOT + os.sep) else path


def _random_drafter(target: Target, kind: str, seed: int, dtype: Optional[str] = None):
    from .drafter import Drafter, DrafterConfig

    torch.manual_seed(seed)
    d = Drafter(DrafterConfig.for_target(target.config, kind))
    return d.to(device=target.device, dtype=drafter_dtype(target, dtype)).eval().attach_target(target.model)


def resolve_drafters(target: Target, methods: list[str], paths: dict, default_target: bool, seed: int,
                     warn, dtype: Optional[str] = None, copy: Optional[dict] = None,
                     hf_lookup_tokens: int = HF_LOOKUP_TOKENS) -> tuple[dict, dict]:
    """Drafters for the methods: an explicit path, else the shipped drafter of that
    kind (default target only), else random weights with a loud warning; in
    ``dtype`` (see gumiho.models.drafter_dtype). ``gumiho+copy`` is the gumiho
    method's drafter (the same object) with the copy proposer, ``copy`` the copy
    proposer alone, each with its defaults and the CopySettings fields in ``copy``
    on top; ``hf``/``hf-lookup`` transformers' generate.
    Returns ({method: drafter or None}, {method: label})."""
    drafters, labels = {}, {}
    learned = [m for m in methods if m in DRAFTER_METHODS]
    if "gumiho+copy" in methods and "gumiho" not in learned:
        learned.append("gumiho")
    for name in learned:
        drafters[name], labels[name] = _resolve_drafter(target, name, paths, default_target, seed, warn, dtype)
    out, out_labels = {}, {}
    for name in methods:
        if name == "vanilla":
            out[name], out_labels[name] = None, None
        elif name in DRAFTER_METHODS:
            out[name], out_labels[name] = drafters[name], labels[name]
        elif name == "gumiho+copy":
            out[name], out_labels[name] = with_copy(drafters["gumiho"], **(copy or {})), labels["gumiho"]
        elif name == "copy":
            out[name], out_labels[name] = with_copy(None, **(copy or {})), "copy proposer (no learned drafter)"
        elif name == "hf":
            out[name], out_labels[name] = HFGenerate(0), "transformers generate"
        elif name == "hf-lookup":
            out[name], out_labels[name] = HFGenerate(hf_lookup_tokens), \
                f"transformers generate, prompt_lookup_num_tokens={hf_lookup_tokens}"
    return out, out_labels


def _resolve_drafter(target: Target, name: str, paths: dict, default_target: bool, seed: int, warn,
                     dtype: Optional[str]):
    """(drafter, label) of one learned-drafter method."""
    path = paths.get(name)
    if path:
        return load_drafter(path, target, dtype), _label(path)
    shipped = shipped_drafter_path(name) if default_target else None
    if shipped:
        return load_drafter(shipped, target, dtype), _label(shipped)
    why = (f"no trained {name} drafter is shipped (expected assets/drafters/smollm2-135m-{name})"
           if default_target else f"no {name} drafter was given for {target.name} (shipped drafters fit only "
                                  f"the default {DEFAULT_TARGET_LABEL})")
    warn(f"{why}; using a RANDOM-WEIGHT {name} drafter. It accepts almost nothing: its speed numbers say "
         f"nothing about Gumiho. Pass --drafter PATH (or train one with `python -m gumiho.train`).")
    return _random_drafter(target, name, seed, dtype), f"random-weights ({name})"


# ----------------------------------------------------------------------------- CLI


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
    p.add_argument("--out", default=None, metavar="FILE.json", help="write the results as JSON")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (default: fp32 on CPU, fp16 on CUDA), fp32, fp16, bf16")
    p.add_argument("--drafter-dtype", default="auto", choices=DRAFTER_DTYPES,
                   help="auto (default): the target's on a GPU; on a CPU bf16 where it has bf16 matrix "
                        "instructions (AVX512-BF16, AMX), else fp32. Never changes the output")
    p.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (default: torch's)")
    g = p.add_argument_group("draft tree (default: sized for the device)")
    g.add_argument("--total-tokens", type=_positive_int,
                   help="drafted nodes per step (with a cost-aware tree: the most per step)")
    g.add_argument("--depth", type=_positive_int, help="longest draft path")
    g.add_argument("--top-k", type=_positive_int, help="branching at the serial depths")
    g.add_argument("--mlp-top-k", type=_positive_int, help="tokens per MLP head and path")
    g.add_argument("--mlp-keep", type=_positive_int, help="paths kept at each MLP depth")
    g.add_argument("--full-tree-tokens", type=_nonneg_int, help="extra nodes of the full-tree extension")
    g.add_argument("--no-full-tree", action="store_true", help="turn the full-tree extension off")
    aware = g.add_mutually_exclusive_group()
    aware.add_argument("--cost-aware", dest="cost_aware", action="store_true", default=None,
                       help="size each step's tree by the verify cost measured on this machine, up to "
                            "--total-tokens (gumiho.verifycost)")
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


def tree_from_args(args, device, base: Optional[TreeSettings] = None) -> TreeSettings:
    """The tree flags on top of ``base`` (a registry pair's settings) or the device's defaults."""
    tree = copy.copy(base) if base is not None else TreeSettings.for_device(device)
    for name in ("total_tokens", "depth", "top_k", "mlp_top_k", "mlp_keep", "full_tree_tokens"):
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


def main(argv: Optional[list[str]] = None) -> int:
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
            CopySettings(**{**vars(base), **copy_overrides}).validate()
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
        target = load_target(model_arg, device=args.device, dtype=args.dtype)
        log(f"loaded {target.name} on {target.device} in {time.perf_counter() - t0:.1f} s")
        drafters, labels = resolve_drafters(target, methods, drafter_paths, _is_default_target(model_arg),
                                            args.seed, warn, args.drafter_dtype, copy_overrides,
                                            args.hf_lookup_tokens)
        settings = BenchSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                 top_p=args.top_p, top_k=args.sample_top_k, seed=args.seed, warmup=args.warmup,
                                 tree=tree_from_args(args, target.device, pair_tree),
                                 progress=not args.no_progress)
        record = run_benchmark(target, drafters, prompts, settings, log=log)
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


if __name__ == "__main__":
    sys.exit(main())
