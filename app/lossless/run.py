"""The losslessness experiment as the page and the API run it: one prompt, a
temperature, N samples of the first k tokens by vanilla sampling and by speculative
sampling with the chosen drafter and acceptance rule (gumiho.lab.lossless), and the
sequences in words."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from gumiho import GumihoError
from gumiho.bench.machine_load import LoadMeter, LoadReading
from gumiho.lab.lossless import FIRST_TOKEN_ONLY, MIN_TOKENS, LosslessCheck, lossless_check
from gumiho.lab.rules import EXACT, SAMPLING_RULES

from ..core.forms import MAX_TEMPERATURE, check_prompt, check_prompt_length, real, text_field, whole
from ..core.worker import waiting_text
from ..core.zerogpu import on_gpu
from ..models.hub import ModelHub
from ..views.render import visible

MAX_SAMPLES = 1000  # per arm: about 4 minutes on two CPU cores for 2 tokens
MAX_TOKENS = 3
RULE_LABELS = {EXACT: "the engine's rule (lossless)",
               "keep_drafts": "wrong: keep every drafted token",
               "drafter_q": "wrong: min(1, p/q) with the drafter's own q (the classic bug)"}
assert set(RULE_LABELS) == set(SAMPLING_RULES)


@dataclass
class LosslessForm:
    """The experiment as the page's controls or the API's parameters give it, unchecked."""

    prompt: object = None
    temperature: object = 0.8
    samples: object = 200
    tokens: object = 2
    rule: object = EXACT
    seed: object = 0


@dataclass
class LosslessRequest:
    prompt: str
    temperature: float
    samples: int
    tokens: int
    rule: str
    seed: int


def parse_lossless(form: LosslessForm) -> LosslessRequest:
    prompt = check_prompt(form.prompt)
    temperature = real(form.temperature, "Temperature", 0.0, MAX_TEMPERATURE,
                       f"above 0 and at most {MAX_TEMPERATURE:g} (the experiment samples)",
                       lo_open=True)
    samples = whole(form.samples, "Samples", 10, MAX_SAMPLES)
    tokens = whole(form.tokens, "Tokens", 1, MAX_TOKENS, f"a whole number from {MIN_TOKENS} to {MAX_TOKENS}")
    if tokens < MIN_TOKENS:  # a test that cannot fail teaches the wrong lesson: refused, with why
        raise GumihoError(FIRST_TOKEN_ONLY)
    rule = text_field(form.rule, "The rule", f"one of {', '.join(SAMPLING_RULES)}") or EXACT
    if rule not in SAMPLING_RULES:
        raise GumihoError(f"Unknown rule {rule[:40]!r}; choose one of {', '.join(SAMPLING_RULES)}.")
    seed = whole(0 if form.seed in (None, "") else form.seed, "Seed", 0, 2**31 - 1)
    return LosslessRequest(prompt, temperature, samples, tokens, rule, seed)


@dataclass
class LosslessProgress:
    done: int = 0
    total: int = 0
    started: bool = False
    place: Callable[[], object] = lambda: None  # where the run stands in line (app.core.jobs.run_job)

    def text(self) -> str:
        if not self.started:
            return waiting_text(self.place())
        return f"Sampling: {self.done} of {self.total} generations (vanilla and speculative in turns)…"


@dataclass
class LosslessResult:
    check: LosslessCheck
    prompt: str
    model: str
    drafter: str
    texts: dict = field(default_factory=dict)  # token-id tuple -> its text as shown (unique per sequence)
    # How busy the machine was while it sampled (None where it cannot be read): the verdict
    # does not depend on the clock, only the time it took.
    machine: Optional[LoadReading] = None


@on_gpu  # on a ZeroGPU Space each call runs in a GPU worker (app/core/zerogpu.py); elsewhere unchanged
def compute_lossless(hub: ModelHub, req: LosslessRequest, stop: Optional[threading.Event] = None,
                     progress: Optional[LosslessProgress] = None) -> LosslessResult:
    progress = progress or LosslessProgress()
    res = hub.resolve("", "gumiho", "", False, "")  # the default model in float32 with its Gumiho drafter
    target = res.target
    ids = check_prompt_length(target.encode(req.prompt), target.context_length, target.name,
                              hub.settings.max_prompt_tokens)
    progress.started = True

    def step(done: int, total: int) -> None:
        progress.done, progress.total = done, total

    meter = LoadMeter()
    check = lossless_check(target, ids, res.drafter, req.temperature, req.samples, req.tokens, req.rule, req.seed,
                           progress=step, stop=stop)
    return LosslessResult(check, req.prompt, target.name, res.drafter_label,
                          sequence_texts(set(check.vanilla) | set(check.speculative), target.tokenizer),
                          meter.reading())


def sequence_texts(sequences, tokenizer) -> dict:
    """Each sequence's text as the page shows it (a space as ␣, a line break as ⏎; an
    empty one, that ended at once, as "(end)"); two sequences that read alike get
    their token ids beside them, so that no two keys are the same."""
    texts = {}
    for seq in sequences:
        text = tokenizer.decode(list(seq), skip_special_tokens=False)
        texts[seq] = visible(text) if text else "(end)"
    seen: dict = {}
    for seq, text in texts.items():
        seen.setdefault(text, []).append(seq)
    for text, seqs in seen.items():
        if len(seqs) > 1:
            for seq in seqs:
                texts[seq] = f"{text} {list(seq)}"
    return texts
