"""What the ``/race`` endpoint returns: a race's texts, counts, acceptance and speedup
as JSON, the fastest run beside it."""
from __future__ import annotations

from typing import Optional

from gumiho.lab.speedmodel import predicted_run_tau

from ..views.records import RaceResult
from ..views.render import SAMPLED_TEXTS, busy_note, speedup
from .run import TIMING


def summary(result: RaceResult, prompt: str) -> dict:
    """What the /race API endpoint returns."""

    def run(r, st):
        return {"text": r.text, "tokens": [t for ev in r.events for t in ev.tokens], "new_tokens": st.new_tokens,
                "target_forwards": st.target_forwards, "tau": round(st.tau, 4), "wall_s": round(r.wall_s, 4),
                "tokens_per_s": round(st.tokens_per_s, 3), "finish_reason": r.finish_reason}

    def acceptance(st, depth):
        # As the page's plot shows them: share of verify steps whose accepted draft
        # length is >= d, that share over the one at d-1, and the part of the first
        # whose token at d was copied from the context rather than drafted by a head.
        return {"verify_steps": st.verify_steps,
                "acceptance_by_position": [round(x, 4) for x in st.acceptance_by_position(depth)],
                "conditional_acceptance_by_position":
                    [round(x, 4) for x in st.conditional_acceptance_by_position(depth)],
                "copied_acceptance_by_position": [round(x, 4) for x in st.copied_acceptance_by_position(depth)]}

    v_stats, g_stats = result.vanilla.stats(), result.gumiho.stats()
    sp = speedup(result)
    return {"ok": True, "message": "", "prompt": prompt, "prompt_tokens": result.prompt_tokens, "model": result.model,
            "drafter": result.notes[0] if result.notes else "", "drafter_note": result.drafter_note,
            "vanilla": run(result.vanilla, v_stats),
            "gumiho": {**run(result.gumiho, g_stats), **acceptance(g_stats, result.gumiho.depth)},
            "speedup": round(sp[0], 4) if sp else None, "speedup_kind": sp[1] if sp else None,
            "texts_note": SAMPLED_TEXTS if result.temperature > 0 else "",
            "timing": TIMING.get(result.scheme, result.scheme), "runtime": result.runtime, "weights": result.weights,
            "runtime_note": result.runtime_note, "fastest": fastest_summary(result),
            **prediction_summary(result.prediction, g_stats.verify_steps),
            # How busy the machine was while the race was timed, and what that means for its speedup.
            "machine": result.machine.as_record() if result.machine is not None else None,
            "machine_note": busy_note(result)}


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


def fastest_summary(result: RaceResult) -> Optional[dict]:
    """The fastest way to run the model here, timed alone after the race (None when
    the race ran on the model as loaded, or was stopped)."""
    f = result.fastest
    if f is None:
        return None
    v = result.vanilla.stats().tokens_per_s
    st = f.stats
    return {"method": "vanilla", "runtime": f.runtime, "weights": f.weights, "new_tokens": st.new_tokens,
            "wall_s": round(st.wall_s, 4), "tokens_per_s": round(st.tokens_per_s, 3),
            "over_race_vanilla": round(st.tokens_per_s / v, 4) if v > 0 else None,
            "text_same_as_race_vanilla": f.text_same}
