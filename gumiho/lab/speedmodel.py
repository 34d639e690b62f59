"""Speed predicted from acceptance and cost.

Speculative decoding trades one target forward per token for, per verify step, one
drafting pass and one verify forward that yields several tokens. How many, on
average, follows from acceptance by position (gumiho.engine.metrics): with L the accepted
draft length of a step and a_d = P(L >= d),

    E[L] = sum_{d >= 1} P(L >= d) = a_1 + a_2 + ... + a_D

(a sum of tail probabilities), and every verify step also writes the target's own
bonus token, so a step yields on average

    tau_step = 1 + sum_d a_d                                   (:func:`predicted_tau`)

tokens. A whole run also has its prefill, one forward that writes one token. With S
verify steps, none cut by the token limit or an EOS, it writes 1 + S tau_step
tokens in 1 + S forwards:

    tau_run = (1 + S (1 + sum_d a_d)) / (1 + S)                (:func:`predicted_run_tau`)

which is exactly the tau gumiho.engine.metrics.summarize measures for that run, and tends
to tau_step as the run grows. A run whose last step the token limit (or an EOS, or
the context) cuts writes one token fewer than this counts: acceptance counts only
the drafts that step wrote, and its bonus was never written; the measured tau is
then lower by 1 / (1 + S).

Cost: a verify step costs draft_s + verify_s and yields tau_step tokens; vanilla
pays forward_s per token. So speculative decoding is faster by

    speedup = tau_step forward_s / (draft_s + verify_s)        (:func:`predicted_speedup`)

or, with costs as multiples of one vanilla forward (verify_ratio = verify_s /
forward_s, draft_ratio = draft_s / forward_s), tau_step / (verify_ratio +
draft_ratio) (:func:`predicted_speedup_from_ratios`). The prefill, the same in
both, is left out: the prediction is for the decoding that follows it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from ..engine.events import StepEvent
from ..engine.metrics import summarize
from ..errors import GumihoError


def predicted_tau(acceptance: Sequence[float]) -> float:
    """Expected tokens per verify step, 1 + sum_d a_d, from acceptance by position
    [a_1, a_2, ...] (a_d = the share of verify steps whose accepted length is >= d).
    A long run's tau tends to it; :func:`predicted_run_tau` counts the prefill."""
    return 1.0 + sum(acceptance)


def predicted_run_tau(acceptance: Sequence[float], verify_steps: int) -> float:
    """tau of a run of ``verify_steps`` verify steps after its prefill, none cut:
    (1 + S (1 + sum_d a_d)) / (1 + S), new tokens over target forwards with the
    prefill counted as one forward that wrote one token (as gumiho.engine.metrics does)."""
    if isinstance(verify_steps, bool) or not isinstance(verify_steps, int) or verify_steps < 0:
        raise GumihoError(f"verify_steps must be a whole number >= 0, got {verify_steps!r}.")
    return (1 + verify_steps * predicted_tau(acceptance)) / (1 + verify_steps)


def predicted_speedup(acceptance: Sequence[float], draft_s: float, verify_s: float, forward_s: float) -> float:
    """Speedup over vanilla: tau_step tokens per (draft_s + verify_s) seconds against
    one token per ``forward_s`` seconds: tau_step * forward_s / (draft_s + verify_s)."""
    cost = draft_s + verify_s
    if not cost > 0:
        raise GumihoError(f"A verify step must cost some time: draft_s + verify_s = {cost!r}.")
    return predicted_tau(acceptance) * forward_s / cost


def predicted_speedup_from_ratios(acceptance: Sequence[float], verify_ratio: float, draft_ratio: float = 0.0) -> float:
    """The same with costs in vanilla forwards: tau_step / (verify_ratio + draft_ratio),
    verify_ratio = a verify forward's time over a one-token forward's (1 when verifying
    the tree costs no more than one token), draft_ratio = drafting's over the same."""
    cost = verify_ratio + draft_ratio
    if not cost > 0:
        raise GumihoError(f"verify_ratio + draft_ratio must be above 0, got {cost!r}.")
    return predicted_tau(acceptance) / cost


@dataclass
class SpeedPrediction:
    """Speed predicted from a vanilla run's and a speculative run's measured steps.
    ``speedup`` is exactly ``tau * forward_s / (draft_s + verify_s)``: whoever shows it
    shows these four figures beside it, so that a reader can redo the division."""

    tau: float  # expected tokens per verify step, 1 + sum of acceptance (predicted_tau): tau_step
    speedup: float  # tau * forward_s / (draft_s + verify_s)
    acceptance: list[float]  # acceptance by position of the speculative run, a_1, a_2, ...
    forward_s: float  # vanilla: seconds per token (mean over its decoding steps)
    draft_s: float  # speculative: drafting seconds per verify step (mean)
    verify_s: float  # speculative: verify seconds per verify step (mean)


def _decoding_steps(events: Iterable[StepEvent]) -> list[StepEvent]:
    """Steps after the prefill that did a forward (a stop leaves an empty step behind)."""
    return [e for e in events if e.step > 0 and not (e.finish_reason == "stopped" and not e.emitted)]


def cost_steps(events: Iterable[StepEvent]) -> list[StepEvent]:
    """The steps of one run whose times a prediction averages: for a run that drafted,
    its verify steps that drafted; for vanilla (nothing ever drafted), every decoding
    step. A table that shows a run's time per step beside a prediction averages these,
    so that the prediction can be rebuilt from the table."""
    steps = _decoding_steps(events)
    drafted = [e for e in steps if e.drafted > 0]
    return drafted or steps


def mean_step_costs(events: Iterable[StepEvent]) -> Optional[tuple[float, float]]:
    """(draft_s, verify_s): the mean over :func:`cost_steps`; None when there is none."""
    steps = cost_steps(events)
    if not steps:
        return None
    return statistics.fmean(e.draft_s for e in steps), statistics.fmean(e.verify_s for e in steps)


def predict_from_runs(vanilla_events: Iterable[StepEvent], speculative_events: Iterable[StepEvent]) -> SpeedPrediction:
    """The speed model fed by two runs' StepEvents (gumiho.engine.decode.stream), the prefill
    (step 0) left out of the per-step costs.

    forward_s: a vanilla step's whole time, draft_s + verify_s. Vanilla goes through
    the same loop with a tree that is the root alone, so its draft_s is the empty
    proposal's few microseconds and verify_s holds the forward (with accepting and
    committing the token, as a speculative step's verify_s does).
    draft_s, verify_s: per verify step (a step that drafted) of the speculative run.
    acceptance: by position over the same steps (gumiho.engine.metrics).

    Which average: the mean, for both runs alike. The measured speedup is a ratio of
    totals (vanilla's wall time over speculative decoding's for the same tokens), and
    a total is steps times the mean time per step; tau is likewise the mean tokens per
    step. A median for one side and a mean for the other would compare two different
    things: on a loaded machine, where delays are one-sided and come and go, the
    median vanilla forward (63.5 ms) sat far below the mean (about 116 ms) that the
    wall time paid, and the prediction read 0.75x beside a measured 1.32x. The mean
    pays every delay on both sides, as the clock does."""
    vanilla = _decoding_steps(vanilla_events)
    speculative = [e for e in _decoding_steps(speculative_events) if e.drafted > 0]
    if not vanilla:
        raise GumihoError("The vanilla run has no decoding step after its prefill: generate at least 2 tokens.")
    if not speculative:
        raise GumihoError("The speculative run has no verify step that drafted: generate at least 2 tokens "
                          "with a drafter.")
    forward_s = statistics.fmean(e.draft_s + e.verify_s for e in vanilla)
    draft_s = statistics.fmean(e.draft_s for e in speculative)
    verify_s = statistics.fmean(e.verify_s for e in speculative)
    acceptance = summarize(speculative).acceptance_by_position()
    return SpeedPrediction(tau=predicted_tau(acceptance),
                           speedup=predicted_speedup(acceptance, draft_s, verify_s, forward_s), acceptance=acceptance, forward_s=forward_s, draft_s=draft_s, verify_s=verify_s)
