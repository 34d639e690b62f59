"""The benchmark's core: every method on every prompt, interleaved prompt by prompt after a
warm-up, and the record of what each did (the keys the module docstring of
:mod:`gumiho.bench` describes). :func:`run_benchmark` takes loaded models; the command
line (gumiho.bench.cli) loads them."""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import torch

from ..drafter import Drafter
from ..engine.decode import GenerationSettings, draft_depth, stream
from ..engine.metrics import GenerationStats, speedup, speedup_kind, summarize
from ..engine.target import Target
from ..engine.verifycost import tokens_needed, verify_cost_for
from ..errors import GumihoError
from ..kernels.machine import cpu_summary
from ..proposers import split_copy
from ..tree import TreeSettings
from .machine_load import LoadMeter
from .methods import HFGenerate
from .prompt_sets import as_prompt, prompt_ids

# Acceptance positions every drafter method's record holds at least, and the table's
# columns (every drafter kind reaches 7).
TABLE_POSITIONS = 7


@dataclass(slots=True)  # an unknown setting raises (as TreeSettings)
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


def _precision(drafter) -> Optional[str]:
    """A learned drafter's precision for the record (Drafter.precision); None for others."""
    drafter = getattr(drafter, "drafter", drafter)  # a LearnedProposer's drafter
    return drafter.precision if isinstance(drafter, Drafter) else None


def _depth(drafter) -> int:
    return 0 if drafter is None or isinstance(drafter, HFGenerate) else draft_depth(drafter)


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
    handle = target.runtime_model.register_forward_pre_hook(count)
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = target.runtime_model.generate(torch.tensor([ids], device=target.device), **kw)
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
    prompts = [as_prompt(p, i) for i, p in enumerate(prompts)]
    if not prompts:
        raise GumihoError("No prompts to run.")
    log = log or (lambda msg: None)
    names = _method_order(drafters)
    spec_names = [n for n in names if drafters[n] is not None]
    tree = (settings.tree or TreeSettings.for_target(target)).validate()

    def gen_settings(i: int, max_new: int) -> GenerationSettings:
        # The same seed for every method on a prompt (sampling runs are then comparable).
        return GenerationSettings(max_new_tokens=max_new, temperature=settings.temperature, top_p=settings.top_p,
                                  top_k=settings.top_k, seed=settings.seed + i, tree=tree)

    encoded = _encode_prompts(target, prompts)
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

    meter = LoadMeter()  # how busy the machine was while the timed prompts ran
    timed = _run_prompts(target, drafters, names, prompts, encoded,
                         lambda i: gen_settings(i, settings.max_new_tokens), settings)
    machine = meter.reading()
    methods = {name: _method_record(drafters[name], timed.totals[name].stats, timed.pairs[name], tree)
               for name in names}
    return {
        "model": target.name,
        "drafter": None,
        "device": str(target.device),
        "runtime": target.runtime.name,
        "weights": target.runtime.weights,
        "temperature": settings.temperature,
        "max_new_tokens": settings.max_new_tokens,
        "prompts": len(prompts),
        "methods": methods,
        "lossless": {"checked": timed.checked, "identical": timed.identical},
        # Extra keys.
        "lossless_mismatches": timed.mismatches,
        "top_p": settings.top_p,
        "top_k": settings.top_k,
        "seed": settings.seed,
        "warmup_prompts": n_warm,
        # The cost-aware tree's view of this machine: ms of a verify over 1, 2, ... tokens.
        "verify_ms": None if verify_cost is None else {
            "measured": [round(1000 * c, 3) for c in verify_cost.measured],
            "fitted": [round(1000 * c, 3) for c in verify_cost.seconds]},
        "torch_threads": torch.get_num_threads(),
        # The share of the CPUs other processes took while the timed prompts ran (gumiho.bench.machine_load).
        "machine": machine.as_record() if machine is not None else None,
        # Speedups on a CPU depend on its vector units (see gumiho.kernels.machine).
        "cpu": cpu_summary() if str(target.device).startswith("cpu") else None,
        "torch_version": torch.__version__,
        "dtype": str(target.dtype).replace("torch.", ""),
        "per_prompt": timed.per_prompt,
        "warnings": [],
    }


def _method_order(drafters: dict) -> list[str]:
    """The methods in the dict's order, vanilla first when present."""
    names = list(drafters)
    if "vanilla" in names:
        names.remove("vanilla")
        names.insert(0, "vanilla")
    return names


def _encode_prompts(target: Target, prompts: list) -> list[list[int]]:
    """Every prompt's ids, refused with its id when it cannot be read or leaves no room to answer."""
    encoded = []
    ctx = target.context_length
    for p in prompts:
        try:
            ids = prompt_ids(target, p)
        except GumihoError as e:
            raise GumihoError(f"Prompt {p.question_id}: {e}") from None
        if len(ids) >= ctx:
            raise GumihoError(f"Prompt {p.question_id} is {len(ids)} tokens long but {target.name} reads at most "
                              f"{ctx} tokens (including the answer); drop it from the prompt file or shorten it.")
        encoded.append(ids)
    return encoded


@dataclass
class _Timed:
    """The timed runs: per method totals and (vanilla tokens, vanilla wall, method
    tokens, method wall) per prompt (the speedup's input), the per-prompt rows, and
    the greedy lossless check."""

    totals: dict
    pairs: dict
    per_prompt: list = field(default_factory=list)
    checked: int = 0
    identical: int = 0
    mismatches: list = field(default_factory=list)


def _run_prompts(target: Target, drafters: dict, names: list[str], prompts: list, encoded: list,
                 gen_settings, settings: BenchSettings) -> _Timed:
    """Every method on every prompt, interleaved per prompt; greedy outputs checked against vanilla's."""
    timed = _Timed({name: _MethodTotals() for name in names}, {name: [] for name in names})
    greedy = settings.temperature == 0
    bar = _progress(len(prompts), settings.progress)
    try:
        for i, (p, ids) in enumerate(zip(prompts, encoded)):
            row = {"question_id": p.question_id, "category": p.category, "prompt_tokens": len(ids), "methods": {}}
            runs = {}
            for name in names:
                try:
                    run = _run_one(target, ids, drafters[name], gen_settings(i))
                except GumihoError as e:
                    raise GumihoError(f"Prompt {p.question_id}, method {name}: {e}") from None
                runs[name] = run
                t = timed.totals[name]
                t.stats = t.stats.merge(run.stats)
                t.runs += 1
                row["methods"][name] = {"new_tokens": run.stats.new_tokens, "wall_s": round(run.stats.wall_s, 4),
                                        "target_forwards": run.stats.target_forwards,
                                        "finish_reason": run.finish_reason}
            if "vanilla" in runs:
                van_run = runs["vanilla"].stats
                for name in names:
                    timed.pairs[name].append((van_run.new_tokens, van_run.wall_s, runs[name].stats.new_tokens,
                                              runs[name].stats.wall_s))
            if greedy and "vanilla" in runs:
                _check_lossless(timed, row, p, runs, [n for n in names if drafters[n] is not None])
            timed.per_prompt.append(row)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return timed


def _check_lossless(timed: _Timed, row: dict, p, runs: dict, spec_names: list[str]) -> None:
    """Each drafting method's tokens against vanilla's on one prompt (greedy: they must be equal)."""
    ref = runs["vanilla"].tokens
    for name in spec_names:
        same = runs[name].tokens == ref
        timed.checked += 1
        timed.identical += same
        row["methods"][name]["identical"] = same
        if not same:
            first = next((k for k, (a, b) in enumerate(zip(ref, runs[name].tokens)) if a != b),
                         min(len(ref), len(runs[name].tokens)))
            timed.mismatches.append({"question_id": p.question_id, "method": name, "first_difference": first})


def _method_record(drafter, st, pairs: list, tree: TreeSettings) -> dict:
    """One method's entry of the record, from its merged stats and speedup pairs."""
    sp = speedup(pairs) if pairs else None
    depth = max(_depth(drafter), TABLE_POSITIONS) if _depth(drafter) else 0
    # The learned drafter (None for vanilla, the copy proposer alone and the HF peers) and copy settings.
    learned, copy_settings = split_copy(None if isinstance(drafter, HFGenerate) else drafter)
    return {
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
        "speedup_kind": speedup_kind(pairs) if sp is not None else None,
        # Extra keys (not part of the fixed contract above).
        "verify_steps": st.verify_steps,
        "mean_drafted": round(st.mean_drafted, 3),
        "draft_s": round(st.draft_s, 4),
        "verify_s": round(st.verify_s, 4),
        "tree": asdict(tree) if learned is not None else None,
        "drafter_kind": getattr(getattr(drafter, "cfg", None), "kind", None),
        "drafter_dtype": _precision(learned),
        # Who proposed the accepted draft tokens ("serial", "mlp", "copy"), as the events carry it, and the
        # copy proposer's settings and drafted nodes (its acceptance: accepted "copy" tokens / copy_nodes).
        "accepted_by_proposer": dict(sorted(st.accepted_by_head.items())),
        "copy": asdict(copy_settings) if copy_settings is not None else None,
        "copy_nodes": st.copy_nodes,
        # The copy proposer's part of acceptance_by_position (the rest is the drafter's heads').
        "copied_acceptance_by_position": ([round(a, 4) for a in st.copied_acceptance_by_position(depth)]
                                          if copy_settings is not None else None),
        "hf_lookup_tokens": drafter.lookup_tokens if isinstance(drafter, HFGenerate) else None,
    }


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="prompts", unit="prompt", file=sys.stderr, dynamic_ncols=True)
