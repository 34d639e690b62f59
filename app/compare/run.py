"""The comparison: one prompt decoded by vanilla and by each shipped drafter (Gumiho's
hybrid, all-serial, all-parallel, EAGLE-3; the copy proposer alone and Gumiho with
copying as options) on one target and runtime, with one tree for all of them.

Timing is the race's (app/race/run.py), with more lanes: no two decoders compute at
the same instant, each keeps its own clock (the sum of its own steps), and the lane
that has produced fewest tokens goes next, so load that comes and goes lands on
every method alike, on the same stretch of the answer. Greedy decoding, so every
text must be vanilla's token for token; the page and the API say whether it was.

A drafter that cannot run with the comparison's settings (EAGLE-3 on the 4-bit
runtime, which does not hand out the inner layers it reads) is listed with the
reason, not dropped.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Optional

import torch.nn as nn

from gumiho import GenerationSettings, GenerationStats, GumihoError, TreeSettings, stream
from gumiho.bench.machine_load import LoadMeter, LoadReading
from gumiho.engine import metrics
from gumiho.lab.speedmodel import SpeedPrediction
from gumiho.proposers import with_copy

from ..core.forms import DRAFTER_LABELS, RaceForm, check_prompt_length, flag, parse_request
from ..core.turns import Lane, fewest_tokens, run_in_turns
from ..core.worker import waiting_text
from ..core.zerogpu import on_gpu
from ..models.hub import ModelHub
from ..views.records import RunRecord, predict, record

COMPARED_KINDS = ("gumiho", "serial", "parallel", "eagle3")  # always compared
COPY_ALONE, GUMIHO_COPY = "copy", "gumiho+copy"  # compared when asked for
METHOD_LABELS = {**{kind: DRAFTER_LABELS[kind] for kind in COMPARED_KINDS},
                 COPY_ALONE: "Copying alone (no learned drafter)", GUMIHO_COPY: "Gumiho + copying from the context"}
COMPARE_MAX_NEW_TOKENS = 256  # seven decoders of the same answer: a bound on one request's time

TIMING = ("vanilla and every drafter advanced one step at a time, whichever had produced fewest tokens going "
          "next; each timed on its own clock (the sum of its own steps' durations), in the same process")


@dataclass
class CompareForm:
    """A comparison as the page's controls or the /compare API's parameters give it,
    not yet checked. The tree fields are the race's (app.core.forms.RaceForm), so one tree
    serves every drafter; ``tree_shape`` "paper" takes the paper's tree whatever they say."""

    prompt: object = None
    max_new_tokens: object = 64
    tree_depth: object = None
    tree_top_k: object = None
    tree_nodes: object = None
    tree_cost_aware: object = None
    tree_shape: object = None
    target_weights: object = None
    copy_alone: object = False
    gumiho_with_copy: object = False


@dataclass
class CompareRequest:
    prompt: str
    settings: GenerationSettings  # greedy, with the comparison's one tree
    methods: tuple[str, ...]  # in the order they are shown
    target_weights: str


def parse_compare(form: CompareForm, access=None) -> CompareRequest:
    """``form`` checked, in the race's words (app.core.forms.parse_request): the default
    model, greedy, the race's tree or the paper's."""
    race = RaceForm(prompt=form.prompt, max_new_tokens=form.max_new_tokens, temperature=0.0, top_p=1.0, seed=0,
                    drafter="gumiho", copy_from_context=False, tree_depth=form.tree_depth, tree_top_k=form.tree_top_k,
                    tree_nodes=form.tree_nodes, tree_cost_aware=form.tree_cost_aware,
                    tree_shape=form.tree_shape, target_weights=form.target_weights)
    req = parse_request(race, access, max_tokens_cap=COMPARE_MAX_NEW_TOKENS)
    methods = COMPARED_KINDS
    if flag(form.copy_alone, "Copying alone", False):
        methods += (COPY_ALONE,)
    if flag(form.gumiho_with_copy, "Gumiho + copying", False):
        methods += (GUMIHO_COPY,)
    return CompareRequest(req.prompt, req.settings, methods, req.target_weights)


@dataclass
class Compared:
    """One drafter's run in a comparison."""

    method: str
    label: str
    record: RunRecord  # its events on its own clock, its text, its heads (layout)
    parameters: int  # the drafter's own weights (the target's borrowed embedding and LM head not counted)
    same_as_vanilla: bool
    trained: bool = True

    @cached_property
    def stats(self) -> GenerationStats:  # summarised once: the table, the sentences and the figures all read it
        return self.record.stats()

    @property
    def serial_positions(self) -> tuple[int, ...]:
        return self._positions("serial")

    @property
    def mlp_positions(self) -> tuple[int, ...]:
        return self._positions("mlp")

    def _positions(self, family: str) -> tuple[int, ...]:
        """The draft positions heads of ``family`` drafted in this run (the tree's depth bounds them)."""
        lay = self.record.layout
        if lay is None:
            return ()
        return tuple(p for h in lay.named_heads if h.family == family for p in h.positions
                     if p <= lay.drafted_depth)


@dataclass
class Skipped:
    method: str
    label: str
    reason: str


@dataclass
class Comparison:
    prompt_tokens: int
    model: str
    runtime: str
    weights: str
    tree: TreeSettings
    vanilla: RunRecord
    drafters: list[Compared]
    skipped: list[Skipped] = field(default_factory=list)
    # How busy the machine was while the decoders were timed (None where it cannot be read)
    machine: Optional[LoadReading] = None

    @property
    def stopped(self) -> bool:
        return self.vanilla.stopped or any(c.record.stopped for c in self.drafters)

    @property
    def depth(self) -> int:
        """The deepest draft position any drafter reached in this comparison's plots."""
        return max([c.record.layout.drafted_depth for c in self.drafters if c.record.layout] + [1])

    def prediction(self, c: Compared) -> Optional[SpeedPrediction]:
        """The speedup ``c``'s acceptance and step costs predict against this vanilla
        lane (gumiho.lab.speedmodel); None when a lane has nothing to measure."""
        return predict(self.vanilla.events, c.record.events)

    def speedup(self, c: Compared) -> Optional[float]:
        """Vanilla wall time / this drafter's for the same tokens, as gumiho.engine.metrics
        defines it (greedy: always the same tokens); None when stopped or empty."""
        if self.stopped or not self.vanilla.events or not c.record.events:
            return None
        pair = [(self.vanilla_stats.new_tokens, self.vanilla.wall_s, c.stats.new_tokens, c.record.wall_s)]
        return metrics.speedup(pair, metrics.SPEEDUP_WALL_TIME) if metrics.speedup_kind(pair) == \
            metrics.SPEEDUP_WALL_TIME else None

    @cached_property
    def vanilla_stats(self) -> GenerationStats:
        return self.vanilla.stats()


@dataclass
class CompareProgress:
    """How far the comparison has got (written between timed steps, read by the page)."""

    phase: str = "starting"  # loading, timing, done
    max_tokens: int = 0
    tokens: dict = field(default_factory=dict)  # label -> tokens produced so far
    prompt_tokens: int = 0
    reading: str = ""
    reading_since: float = 0.0
    place: Callable[[], object] = lambda: None  # where the run stands in line (app.core.jobs.run_job)

    def read(self, label: str) -> None:
        self.reading, self.reading_since = label, time.perf_counter()

    def text(self) -> str:
        if self.phase == "loading":
            return "Loading the drafters for this comparison…"
        if self.phase != "timing":
            return waiting_text(self.place())
        if self.reading:
            return (f"Reading the prompt for {METHOD_LABELS.get(self.reading, self.reading)}: "
                    f"{self.prompt_tokens:,} tokens… {time.perf_counter() - self.reading_since:.0f} s")
        done = sum(self.tokens.values())
        total = self.max_tokens * max(len(self.tokens), 1)
        return (f"Timing {len(self.tokens)} decoders in turns, a step at a time… {done}/{total} tokens "
                f"(" + ", ".join(f"{label} {n}" for label, n in self.tokens.items()) + ")")


def _drafter_parameters(drafter) -> int:
    """The drafter's own weights: a learned drafter's parameters (the copy proposer has none)."""
    base = getattr(drafter, "base", drafter)
    return sum(p.numel() for p in base.parameters()) if isinstance(base, nn.Module) else 0


@on_gpu  # on a ZeroGPU Space each call runs in a GPU worker (app/core/zerogpu.py); elsewhere unchanged
def compute_compare(hub: ModelHub, req: CompareRequest, stop: threading.Event,
                    progress: Optional[CompareProgress] = None,
                    now: Callable[[], float] = time.perf_counter) -> Comparison:
    progress = progress or CompareProgress()
    progress.max_tokens = req.settings.max_new_tokens
    progress.phase = "loading"
    target, chosen, skipped = None, [], []
    for method in req.methods:
        kind = "gumiho" if method in (COPY_ALONE, GUMIHO_COPY) else method
        try:
            res = hub.resolve("", kind, "", method == GUMIHO_COPY, req.target_weights)
        except GumihoError as e:
            skipped.append(Skipped(method, METHOD_LABELS[method], str(e)))
            continue
        target = target or res.target
        drafter = with_copy(None) if method == COPY_ALONE else res.drafter
        chosen.append((method, drafter, res.trained or method == COPY_ALONE))
    if target is None:  # nothing could run: the reasons are every drafter's, the first says it
        raise GumihoError(skipped[0].reason if skipped else "No drafter to compare.")
    settings = req.settings
    tree = settings.tree_on(target)  # the tree every drafter ran, as the decode loop chooses it
    ids = check_prompt_length(target.encode(req.prompt), target.context_length, target.name,
                              hub.settings.max_prompt_tokens)
    progress.prompt_tokens = len(ids)
    lanes = [Lane("vanilla", stream(target, ids, None, settings, stop=stop))]
    lanes += [Lane(method, stream(target, ids, drafter, settings, stop=stop)) for method, drafter, _ in chosen]
    progress.tokens = {lane.label: 0 for lane in lanes}
    progress.phase = "timing"

    def stepped():
        progress.tokens = {lane.label: lane.tokens for lane in lanes}

    meter = LoadMeter()
    try:
        run_in_turns(lanes, stop, fewest_tokens, progress.read, stepped, now)
    finally:
        progress.phase = "done"
    machine = meter.reading()
    tok = target.tokenizer
    vanilla = record("vanilla", lanes[0].events, tok, ids)
    v_tokens = [t for ev in vanilla.events for t in ev.tokens]
    drafters = []
    for lane, (method, drafter, trained) in zip(lanes[1:], chosen):
        rec = record(method, lane.events, tok, ids, drafter, tree.depth)
        same = [t for ev in rec.events for t in ev.tokens] == v_tokens
        drafters.append(Compared(method, METHOD_LABELS[method], rec, _drafter_parameters(drafter), same, trained))
    if stop.is_set():
        vanilla.stopped = True
        for c in drafters:
            c.record.stopped = True
    return Comparison(len(ids), target.name, target.runtime.name, target.runtime.weights, tree, vanilla,
                      drafters, skipped, machine)


__all__ = ["COMPARED_KINDS", "COPY_ALONE", "GUMIHO_COPY", "METHOD_LABELS", "COMPARE_MAX_NEW_TOKENS", "CompareForm",
           "CompareRequest", "Compared", "Comparison", "CompareProgress", "Skipped", "parse_compare",
           "compute_compare"]
