"""What a comparison says: each decoder's figures (tau, tokens/s, speedup, where a
step's time goes, acceptance by position, size), a few sentences written from those
figures, and the /compare API's JSON. Nothing here runs a model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gumiho.lab.speedmodel import mean_step_costs

from ..views.records import RunRecord, prediction_summary
from .run import COPY_ALONE, GUMIHO_COPY, TIMING, Compared, Comparison


@dataclass(frozen=True)
class StepTime:
    """Mean milliseconds of a verify step (the prompt's prefill left out: it is the same
    work for every decoder): drafting the tree, and the target's forward over it. The
    steps are those the speed prediction averages (gumiho.lab.speedmodel.cost_steps: the
    verify steps that drafted; vanilla's every decoding step), so that the table's
    predicted column is its tokens/step x vanilla's ms / (drafting + verify ms)."""

    draft_ms: float
    verify_ms: float

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms


def step_time(run: RunRecord) -> Optional[StepTime]:
    costs = mean_step_costs(run.events)
    return StepTime(1000 * costs[0], 1000 * costs[1]) if costs is not None else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _by_method(cmp: Comparison) -> dict[str, Compared]:
    return {c.method: c for c in cmp.drafters}


def findings(cmp: Comparison) -> list[str]:
    """Sentences written from the measured figures: whether every text was vanilla's,
    where the serial heads accept more than the MLP heads, what an MLP position costs
    against a serial step, and which drafter was fastest and why. Where the prompt
    does not bear the paper's argument out, they say so."""
    out = [_texts(cmp)]
    if cmp.stopped:
        return out
    by = _by_method(cmp)
    for sentence in (_early_positions(cmp, by), _drafting_cost(by), _fastest(cmp)):
        if sentence:
            out.append(sentence)
    return out


def _texts(cmp: Comparison) -> str:
    if cmp.stopped:
        return "Stopped: the figures cover what each decoder produced until then."
    differ = [c.label for c in cmp.drafters if not c.same_as_vanilla]
    if differ:  # greedy decoding on one runtime: this would be a bug, so it is said loudly
        return (f"The text of {', '.join(differ)} differs from vanilla's: that should never happen with greedy "
                f"decoding on one runtime. Please report this prompt.")
    return (f"All {len(cmp.drafters) + 1} texts are identical to vanilla's, token for token: the drafters change "
            f"how fast the answer comes, never what it says.")


def _early_positions(cmp: Comparison, by: dict[str, Compared]) -> str:
    """Positions 1-2 (the serial part of Gumiho): the all-serial drafter against the
    all-parallel one, with Gumiho's own figures beside them."""
    serial, parallel = by.get("serial"), by.get("parallel")
    if serial is None or parallel is None or not serial.stats.verify_steps or not parallel.stats.verify_steps:
        return ""
    k = min(2, cmp.depth)
    s = serial.stats.acceptance_by_position(k)
    p = parallel.stats.acceptance_by_position(k)
    where = "at the first draft position" if k == 1 else "at the first two draft positions"
    figures = (f"{where.capitalize()} the all-serial drafter's guesses were accepted in "
               f"{' and '.join(_pct(x) for x in s)} of verify steps, the all-parallel drafter's in "
               f"{' and '.join(_pct(x) for x in p)}")
    gumiho = by.get("gumiho")
    if gumiho is not None and gumiho.stats.verify_steps:
        figures += f" (Gumiho, serial there: {' and '.join(_pct(x) for x in gumiho.stats.acceptance_by_position(k))})"
    if sum(s) > sum(p) + 0.02:
        return figures + ": the serial Transformer's early guesses are the better ones, as the paper argues."
    if sum(p) > sum(s) + 0.02:
        return (figures + ": on this prompt the parallel heads accepted more at the early positions, which is not "
                          "what the paper argues; one prompt is a small sample.")
    return figures + ": about the same on this prompt, so it does not show the paper's point about early positions."


def _drafting_cost(by: dict[str, Compared]) -> str:
    """Drafting time per step: all-serial (a Transformer pass per position) against
    all-parallel (every MLP head from one input)."""
    serial, parallel = by.get("serial"), by.get("parallel")
    ts = step_time(serial.record) if serial else None
    tp = step_time(parallel.record) if parallel else None
    if ts is None or tp is None:
        return ""
    text = (f"Drafting took {ts.draft_ms:.1f} ms a step for the all-serial drafter "
            f"({len(serial.serial_positions)} serial positions, one pass each) and {tp.draft_ms:.1f} ms for the "
            f"all-parallel one ({len(parallel.mlp_positions)} MLP positions from one input)")
    gumiho = by.get("gumiho")
    tg = step_time(gumiho.record) if gumiho else None
    if tg is not None:
        text += f"; Gumiho's {len(gumiho.serial_positions)} serial and {len(gumiho.mlp_positions)} MLP " \
                f"positions took {tg.draft_ms:.1f} ms"
    if tp.draft_ms < ts.draft_ms:
        text += f". The MLP heads cost {ts.draft_ms / max(tp.draft_ms, 1e-6):.1f}x less to draft than serial steps."
    else:
        text += ". Here the MLP heads were not cheaper to draft than serial steps."
    return text


def _fastest(cmp: Comparison) -> str:
    """Which drafter was fastest, and why: its tau against its cost per step, set
    against the drafter that accepted most when that is another one."""
    runs = [c for c in cmp.drafters if c.record.events and c.stats.tokens_per_s > 0]
    if not runs:
        return ""
    fastest = max(runs, key=lambda c: c.stats.tokens_per_s)
    most = max(runs, key=lambda c: c.stats.tau)
    sp = cmp.speedup(fastest)
    t = step_time(fastest.record)
    cost = f" at {t.total_ms:.1f} ms a step ({t.draft_ms:.1f} drafting + {t.verify_ms:.1f} verifying)" if t else ""
    v = step_time(cmp.vanilla)
    if sp is not None and sp < 1:
        text = (f"No drafter beat vanilla on this prompt: the fastest, {fastest.label}, ran at {sp:.2f}x vanilla's "
                f"speed, tau {fastest.stats.tau:.2f}{cost}")
        if v is not None:
            text += f", against {v.total_ms:.1f} ms for one plain forward"
        return text + "."
    text = (f"Fastest on this prompt: {fastest.label}, "
            + (f"{sp:.2f}x vanilla" if sp is not None else f"{fastest.stats.tokens_per_s:.1f} tokens/s")
            + f", tau {fastest.stats.tau:.2f}{cost}")
    if most is not fastest and most.stats.tau > fastest.stats.tau:
        tm = step_time(most.record)
        extra = f", but its steps cost {tm.total_ms - t.total_ms:.1f} ms more" if tm and t and \
            tm.total_ms > t.total_ms else ""
        text += f". {most.label} accepted more (tau {most.stats.tau:.2f}){extra}"
    if fastest.method == COPY_ALONE:
        text += ". Copying alone won: this answer repeats its context"
    gumiho = _by_method(cmp).get("gumiho")
    if gumiho is not None and fastest.method not in ("gumiho", GUMIHO_COPY, COPY_ALONE):
        g_sp, tg = cmp.speedup(gumiho), step_time(gumiho.record)
        text += (". Gumiho ran at " + (f"{g_sp:.2f}x" if g_sp is not None else
                                        f"{gumiho.stats.tokens_per_s:.1f} tokens/s")
                 + f", tau {gumiho.stats.tau:.2f}" + (f" at {tg.total_ms:.1f} ms a step" if tg else ""))
        if g_sp is not None and sp is not None and sp <= g_sp * 1.05:
            text += ": within 5% of the fastest, about what the clock varies by on one prompt"
    return text + "."


def compare_summary(cmp: Comparison, prompt: str) -> dict:
    """What the /compare API endpoint returns."""

    def speed(run: RunRecord) -> dict:
        st = run.stats()
        t = step_time(run)
        return {"text": run.text, "new_tokens": st.new_tokens, "target_forwards": st.target_forwards,
                "tau": round(st.tau, 4), "wall_s": round(run.wall_s, 4), "tokens_per_s": round(st.tokens_per_s, 3),
                "drafting_s": round(st.draft_s, 4), "verify_s": round(st.verify_s, 4),
                "draft_ms_per_step": round(t.draft_ms, 3) if t else None,
                "verify_ms_per_step": round(t.verify_ms, 3) if t else None, "finish_reason": run.finish_reason}

    def drafter(c: Compared) -> dict:
        st, depth = c.stats, cmp.depth  # one axis of positions for every drafter
        sp, p = cmp.speedup(c), cmp.prediction(c)
        return {"method": c.method, "label": c.label, **speed(c.record), "same_as_vanilla": c.same_as_vanilla,
                "trained": c.trained, "speedup": round(sp, 4) if sp is not None else None,
                # From its acceptance and step costs (gumiho.lab.speedmodel), beside the measured ones.
                # tau_step, forward_s, draft_s and verify_s under "prediction" rebuild it.
                **prediction_summary(p, st.verify_steps),
                "parameters": c.parameters, "verify_steps": st.verify_steps,
                "serial_positions": list(c.serial_positions), "mlp_positions": list(c.mlp_positions),
                "acceptance_by_position": [round(x, 4) for x in st.acceptance_by_position(depth)],
                "conditional_acceptance_by_position":
                    [round(x, 4) for x in st.conditional_acceptance_by_position(depth)]}

    tree = cmp.tree
    return {"ok": True, "message": "", "prompt": prompt, "prompt_tokens": cmp.prompt_tokens, "model": cmp.model,
            "runtime": cmp.runtime, "weights": cmp.weights, "timing": TIMING,
            "tree": {"total_tokens": tree.total_tokens, "depth": tree.depth, "serial_top_k": tree.serial_top_k,
                     "mlp_top_k": tree.mlp_top_k, "full_tree": tree.full_tree, "cost_aware": tree.cost_aware},
            "stopped": cmp.stopped, "vanilla": speed(cmp.vanilla), "drafters": [drafter(c) for c in cmp.drafters],
            "skipped": [{"method": s.method, "label": s.label, "reason": s.reason} for s in cmp.skipped],
            "findings": findings(cmp)}
