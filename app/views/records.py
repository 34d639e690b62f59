"""From the engine's StepEvents to what the app shows: the text of every token
(decoded incrementally, so a character split over several byte-level tokens
appears once, whole), which head proposed it, and when it arrived.

Nothing here touches a model: it needs only a tokenizer's ``decode``, so the
rendering can be tested with synthetic events and a toy tokenizer.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

from gumiho import GenerationStats, GumihoError, StepEvent, summarize
from gumiho.bench.machine_load import LoadReading
from gumiho.engine.target import Target
from gumiho.heads import HeadFamily
from gumiho.lab.speedmodel import SpeedPrediction, predict_from_runs, predicted_run_tau
from gumiho.proposers import CopyDrafter, Head, as_proposer

from .heads import head_label

REPLACEMENT = "\ufffd"  # what decode() gives for an incomplete UTF-8 sequence
MAX_PENDING = 4  # a UTF-8 character spans at most 4 bytes, so at most 4 byte tokens
CUT_SHORT = ("length", "context", "stopped")  # finish reasons of an answer that did not end by itself


class Detokenizer:
    """Turns token ids into text one token at a time.

    Each token's text is ``decode(context + token) - decode(context)`` over a short
    window of the tokens before it, which keeps word-initial spaces right for every
    tokenizer family. While the decoded window ends in an incomplete character the
    token's text is held back (empty) and released with the token that completes
    it."""

    def __init__(self, tokenizer, context_ids: Sequence[int] = ()):
        self.tok = tokenizer
        self.ids: list[int] = [int(i) for i in list(context_ids)[-3:]]
        self.start = 0  # first id of the decode window
        self.done = len(self.ids)  # ids before this one have had their text returned
        self.special = set(getattr(tokenizer, "all_special_ids", None) or [])

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        before = self._decode(self.ids[self.start:self.done])
        now = self._decode(self.ids[self.start:])
        pending = len(self.ids) - self.done
        if now.endswith(REPLACEMENT) and pending < MAX_PENDING and not self._is_special(token):
            return ""  # the character is not complete yet
        if now.startswith(before):
            text = now[len(before):]
        else:  # a tokenizer whose decode is not prefix-stable: keep what changed
            text = now[len(os.path.commonprefix([before, now])):]
        self.start, self.done = self.done, len(self.ids)
        if self.start > 64:  # keep the window short
            del self.ids[:self.start]
            self.done -= self.start
            self.start = 0
        return text

    def _is_special(self, token: int) -> bool:
        return int(token) in self.special

    def peek(self, token: int) -> str:
        """The text ``token`` would have right after the tokens pushed so far,
        without pushing it (for rejected drafts)."""
        ctx = self.ids[self.done - min(self.done, 3):self.done] if self.done else []
        now = self._decode(ctx + [int(token)])
        base = self._decode(ctx)
        return now[len(base):] if now.startswith(base) else now


@dataclass
class TokenView:
    """One emitted (or rejected) token as displayed."""

    text: str
    token: int
    head: str  # "serial", "mlp" or "target"
    position: int  # draft position (1 = first drafted), 0 for the target's own token
    draft_prob: Optional[float]
    step: int
    covers: int = 1  # tokens whose bytes make up ``text`` (a split character)
    special: bool = False


@dataclass
class StepView:
    step: int
    t: float  # seconds since the start of the run, at the end of this step
    tokens: list[TokenView]
    rejected: list[TokenView]
    accepted_length: int
    drafted: int
    finish_reason: Optional[str] = None


@dataclass
class DrafterLayout:
    """What the renderer needs to know of a drafter: how many positions each family
    has, and its heads (which positions each family fills, and of which kind)."""

    serial_positions: int = 2
    max_depth: int = 7  # the learned drafter's positions (0: the copy proposer alone)
    kind: str = "gumiho"
    copy: int = 0  # the copy proposer's longest guess when it drafts beside it (gumiho.proposers.copying); 0 = off
    heads: tuple[Head, ...] = ()
    # The deepest position the run's tree let the drafter's heads draft (its depth
    # setting); 0: every position the drafter has. The copy proposer is not bound by it.
    tree_depth: int = 0

    @classmethod
    def of(cls, drafter) -> Optional["DrafterLayout"]:
        if drafter is None:
            return None
        proposer = as_proposer(drafter)
        learned = proposer.learned if isinstance(proposer, CopyDrafter) else proposer
        serial = depth = copy = 0
        for h in proposer.heads:
            if h.family == HeadFamily.COPY:
                copy = max(h.positions, default=0)
            else:
                depth = max(depth, max(h.positions, default=0))
                if h.family == HeadFamily.SERIAL:
                    serial = max(serial, max(h.positions, default=0))
        return cls(serial, depth, learned.name if learned is not None else "copy", copy, proposer.heads)

    @property
    def named_heads(self) -> tuple[Head, ...]:
        """The proposer's heads, or, for a layout given by its counts alone, each
        family's positions."""
        if self.heads:
            return self.heads
        out = []
        if self.serial_positions:
            out.append(Head(HeadFamily.SERIAL, tuple(range(1, self.serial_positions + 1)), kind=self.kind))
        if self.max_depth > self.serial_positions:
            out.append(Head(HeadFamily.MLP, tuple(range(self.serial_positions + 1, self.max_depth + 1)), kind=self.kind))
        if self.copy:
            out.append(Head("copy", tuple(range(1, self.copy + 1)), kind="copy"))
        return tuple(out)

    def family_at(self, depth: int) -> str:
        """The head family that drafts position ``depth`` (as the proposer's heads say):
        where a node does not say who proposed it, and for a column with no node.
        Deeper than the drafter's heads reach only copied tokens go; 0 is the root."""
        if depth <= 0:
            return "root"
        for head in self.named_heads:
            if head.family != HeadFamily.COPY and depth in head.positions:
                return head.family
        return HeadFamily.COPY

    def label_of(self, family: str) -> str:
        """The legend's words for the head of ``family`` ("serial", "mlp", "copy")."""
        for head in self.named_heads:
            if head.family == family:
                return head_label(family, head.kind)
        return head_label(family)

    @property
    def depth(self) -> int:
        """The deepest position a guess can take: the drafter's or the copy proposer's."""
        return max(self.max_depth, self.copy)

    @property
    def drafted_depth(self) -> int:
        """The deepest position the drafter's heads drafted in this run."""
        return min(self.max_depth, self.tree_depth) if self.tree_depth > 0 else self.max_depth

    def not_drafted(self) -> tuple[int, ...]:
        """The drafter's positions its heads never drafted in this run (the tree was shallower)."""
        return tuple(range(self.drafted_depth + 1, self.max_depth + 1))

    def with_tree(self, tree_depth: int) -> "DrafterLayout":
        return dataclasses.replace(self, tree_depth=int(tree_depth or 0))


def step_views(events: Sequence[StepEvent], tokenizer, prompt_ids: Sequence[int] = ()) -> list[StepView]:
    """Decode every event's tokens in order. Tokens whose text is held back (a
    character split across tokens) are folded into the token that completes it."""
    detok = Detokenizer(tokenizer, prompt_ids)
    special = detok.special
    views: list[StepView] = []
    held = 0
    for ev in events:
        toks: list[TokenView] = []
        rejected: list[TokenView] = []
        n_acc = sum(1 for e in ev.emitted if e.head != HeadFamily.TARGET)
        for k, e in enumerate(ev.emitted):
            if k == n_acc and ev.rejected:
                # Rejected drafts compete with the bonus token: decode them where it stands.
                rejected = [TokenView(detok.peek(r.token), r.token, r.head, r.position, r.draft_prob, ev.step,
                                      special=r.token in special) for r in ev.rejected]
            text = detok.push(e.token)
            if text == "" and e.token not in special:
                held += 1
                continue
            toks.append(TokenView(text, e.token, e.head, e.position, e.draft_prob, ev.step, covers=held + 1,
                                  special=e.token in special))
            held = 0
        if ev.rejected and not rejected:
            rejected = [TokenView(detok.peek(r.token), r.token, r.head, r.position, r.draft_prob, ev.step,
                                  special=r.token in special) for r in ev.rejected]
        views.append(StepView(ev.step, ev.elapsed_s, toks, rejected, ev.accepted_length, ev.drafted,
                              ev.finish_reason))
    return views


@dataclass
class RunRecord:
    """One decoder's run: its events (``elapsed_s`` on this decoder's own clock) and
    what they look like."""

    label: str  # "vanilla" or "gumiho"
    events: list[StepEvent]
    views: list[StepView]
    layout: Optional[DrafterLayout] = None  # None for vanilla
    text: str = ""
    stopped: bool = False

    @property
    def depth(self) -> int:
        return self.layout.depth if self.layout else 0

    @property
    def wall_s(self) -> float:
        return self.events[-1].elapsed_s if self.events else 0.0

    @property
    def finish_reason(self) -> Optional[str]:
        return self.events[-1].finish_reason if self.events else None

    def steps_until(self, t: float) -> int:
        """How many events had finished ``t`` seconds into the run."""
        n = 0
        for ev in self.events:
            if ev.elapsed_s <= t:
                n += 1
            else:
                break
        return n

    def stats(self, n: Optional[int] = None):
        return summarize(self.events if n is None else self.events[:n], self.depth)

    def series(self, n: Optional[int] = None) -> list[tuple[float, int]]:
        """(seconds, tokens so far) after each of the first ``n`` steps."""
        out, total = [], 0
        for ev in self.events if n is None else self.events[:n]:
            total += len(ev.emitted)
            if ev.emitted:
                out.append((ev.elapsed_s, total))
        return out


def whole_characters(tokenizer, tokens: Sequence[int]) -> str:
    """The text of ``tokens`` without a character cut at its end: an answer cut by the
    token limit (or Stop) can end inside a multi-byte character, which decodes to
    U+FFFD. As the page's columns do (:class:`Detokenizer`), the last tokens are left
    out while the text ends in U+FFFD, as many as a character can span."""
    text = tokenizer.decode(list(tokens), skip_special_tokens=True) if tokens else ""
    for cut in range(1, min(MAX_PENDING - 1, len(tokens)) + 1):
        if not text.endswith(REPLACEMENT):
            break
        shorter = tokenizer.decode(list(tokens[:-cut]), skip_special_tokens=True)
        if not shorter.endswith(REPLACEMENT):
            return shorter
    return text


def predict(vanilla_events: list[StepEvent], events: list[StepEvent]) -> Optional[SpeedPrediction]:
    """gumiho.lab.speedmodel's prediction from two lanes' events; None where a lane has
    nothing to measure."""
    try:
        return predict_from_runs(vanilla_events, events)
    except GumihoError:
        return None


def prediction_summary(p, verify_steps: int) -> dict:
    """The speed model's figures (gumiho.lab.speedmodel), with the inputs that rebuild them:
    predicted_speedup = tau_step x forward_s / (draft_s + verify_s), all four under
    "prediction" (each a mean over the steps after the prefill: vanilla's decoding
    steps, the speculative run's verify steps that drafted). predicted_tau is the same
    tau_step, 1 + sum of acceptance by position, the tokens a verify step writes;
    predicted_run_tau is the run's tau from it, (1 + S tau_step) / (1 + S) over S
    verify steps, the measured tau's own definition (prefill included), to set beside
    the measured tau."""
    if p is None:
        return {"predicted_tau": None, "predicted_run_tau": None, "predicted_speedup": None, "prediction": None}
    return {"predicted_tau": round(p.tau, 6),
            "predicted_run_tau": round(predicted_run_tau(p.acceptance, verify_steps), 4),
            "predicted_speedup": round(p.speedup, 4),
            # Seconds to the nanosecond: rounder figures would not rebuild the speedup to its 4 decimals.
            "prediction": {"tau_step": round(p.tau, 6), "forward_s": round(p.forward_s, 9),
                           "draft_s": round(p.draft_s, 9), "verify_s": round(p.verify_s, 9),
                           "acceptance_by_position": [round(a, 6) for a in p.acceptance],
                           "formula": "predicted_speedup = tau_step * forward_s / (draft_s + verify_s); "
                                      "tau_step = 1 + sum(acceptance_by_position); each time the mean per step"}}


def record(label: str, events: list[StepEvent], tokenizer, prompt_ids, drafter=None, tree_depth: int = 0) -> RunRecord:
    views = step_views(events, tokenizer, prompt_ids)
    tokens = [t for ev in events for t in ev.tokens]
    reason = events[-1].finish_reason if events else None
    # Only an answer cut short can end inside a character; one that ended by itself keeps its last U+FFFD.
    text = (whole_characters(tokenizer, tokens) if reason in CUT_SHORT else
            tokenizer.decode(tokens, skip_special_tokens=True) if tokens else "")
    stopped = bool(events) and events[-1].finish_reason == "stopped"
    layout = DrafterLayout.of(drafter)
    return RunRecord(label, events, views, layout.with_tree(tree_depth) if layout else None, text, stopped)


@dataclass
class FastestRun:
    """Vanilla decoding of the race's prompt on the model as loaded (its 4-bit file in
    llama.cpp: the fastest way to run it on a CPU), timed alone after the race."""

    runtime: str
    weights: str
    stats: GenerationStats  # of its events (gumiho.summarize): new tokens, wall time, tokens/s
    text_same: bool  # whether its text is the race's vanilla text (two runtimes: not guaranteed)


def runtime_words(target: Target, loaded: Optional[Target] = None) -> str:
    """What ran ``target``'s weights, with the load's setting and why (Target.runtime_choice),
    and ``loaded``'s, the model as loaded, when the race ran another view of it."""
    words = f"The race ran {target.runtime_choice}."
    if loaded is not None and loaded is not target:
        words += f" The model as loaded runs {loaded.runtime_choice}."
    return words


@dataclass
class RaceResult:
    """Both runs of one race, and what the UI needs to replay them."""

    prompt_tokens: int
    vanilla: RunRecord
    gumiho: RunRecord
    model: str = ""
    drafter_note: str = ""
    temperature: float = 0.0
    notes: list[str] = field(default_factory=list)
    scheme: str = "alternating"  # how the two runs were timed (app.race.run.TIMING)
    runtime: str = "torch"  # what ran the target's forwards: its runtime's name (gumiho.runtimes)
    weights: str = "float32"  # the weights that runtime multiplies, in words
    flat_verify: bool = True  # whether a verify over a few tokens cost about one forward there
    fastest: Optional["FastestRun"] = None  # vanilla on the model as loaded, when the race ran another view
    # What ran the race's target, with the load setting and why, and the model as loaded when the
    # race ran another view of it (runtime_words): the runtime's choice on this machine, said aloud
    runtime_note: str = ""
    # How busy the machine was while the two lanes were timed (None where it cannot be read)
    machine: Optional[LoadReading] = None
    # Where this result came from: "" for a run just computed live; for a recorded example
    # (app/replays), "<CPU>, <n> cores on <date>", the machine and day it was timed on.
    recorded_on: str = ""
    run_id: str = ""  # the id a live run is shared under (app/replays SharedRuns); "" if not shared

    @property
    def duration(self) -> float:
        return max(self.vanilla.wall_s, self.gumiho.wall_s)

    @property
    def prediction(self) -> Optional[SpeedPrediction]:
        """The speedup this race's acceptance and step costs predict (gumiho.lab.speedmodel);
        None when a lane has no decoding step to measure (a stopped or one-token race)."""
        return predict(self.vanilla.events, self.gumiho.events)
