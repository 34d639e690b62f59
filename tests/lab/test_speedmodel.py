"""Speed predicted from acceptance and cost (gumiho.lab.speedmodel): the run-level tau it
predicts is the tau gumiho.engine.metrics measures, and its arithmetic is the formula's."""
import pytest
import torch

from gumiho import (
    GenerationSettings,
    GumihoError,
    StepEvent,
    predict_from_runs,
    predicted_run_tau,
    predicted_speedup,
    predicted_speedup_from_ratios,
    predicted_tau,
    stream,
    summarize,
)
from gumiho.engine.events import EmittedToken
from gumiho.heads import HeadFamily
from gumiho.lab.speedmodel import cost_steps, mean_step_costs
from helpers import OracleDrafter, tiny_target

DEPTH = 7


def run(target, prompt, drafter=None, **kw):
    steps = list(stream(target, prompt, drafter, GenerationSettings(**kw)))
    return [t for s in steps for t in s.tokens], steps


def test_predicted_run_tau_is_the_measured_tau():
    """Greedy runs whose last step ends exactly at the token limit (no step cut):
    (1 + S (1 + sum_d a_d)) / (1 + S) from the run's own acceptance is its tau. When
    the limit cuts the last step, the formula counts exactly one token more than was
    written: the cut step's bonus (acceptance counts only the drafts it wrote)."""
    target = tiny_target("llama")
    g = torch.Generator().manual_seed(5)
    checked = cut_checked = 0
    for i in range(6):
        prompt = torch.randint(2, 96, (8,), generator=g).tolist()
        ref, _ = run(target, prompt, max_new_tokens=60)
        drafter = OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=i)
        _, free = run(target, prompt, drafter, max_new_tokens=60)
        written = [sum(len(s.emitted) for s in free[:k + 1]) for k in range(len(free))]
        # A limit at a step's end: the same steps up to it, none cut (greedy is deterministic).
        for limit in {written[len(free) // 2], written[-2]}:
            _, steps = run(target, prompt, OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=i),
                           max_new_tokens=limit)
            assert all(not s.cut_nodes and len(s.emitted) == s.accepted_length + 1 for s in steps[1:])
            st = summarize(steps, DEPTH)
            assert st.verify_steps == len(steps) - 1
            assert predicted_run_tau(st.acceptance_by_position(DEPTH), st.verify_steps) == pytest.approx(st.tau)
            checked += 1
        # A limit one token into a step that accepted drafts: that step is cut.
        k = next((k for k, s in enumerate(free) if k > 0 and s.accepted_length >= 1), None)
        if k is not None:
            limit = written[k - 1] + 1
            _, steps = run(target, prompt, OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=i),
                           max_new_tokens=limit)
            if steps[-1].cut_nodes or len(steps[-1].emitted) == steps[-1].accepted_length:
                st = summarize(steps, DEPTH)
                predicted_tokens = predicted_run_tau(st.acceptance_by_position(DEPTH), st.verify_steps) * (
                    1 + st.verify_steps)
                assert predicted_tokens - st.new_tokens == pytest.approx(1.0)
                cut_checked += 1
    assert checked >= 6 and cut_checked >= 2


def test_formulas():
    a = [0.8, 0.6, 0.4]
    assert predicted_tau(a) == pytest.approx(2.8)
    assert predicted_tau([]) == 1.0
    assert predicted_run_tau(a, 0) == 1.0  # the prefill alone
    assert predicted_run_tau(a, 9) == pytest.approx((1 + 9 * 2.8) / 10)
    assert predicted_speedup(a, draft_s=0.01, verify_s=0.02, forward_s=0.015) == pytest.approx(2.8 * 0.015 / 0.03)
    assert predicted_speedup_from_ratios(a, verify_ratio=1.2, draft_ratio=0.3) == pytest.approx(2.8 / 1.5)
    assert predicted_speedup_from_ratios(a, 1.0) == pytest.approx(2.8)
    with pytest.raises(GumihoError):
        predicted_speedup(a, 0.0, 0.0, 0.01)
    with pytest.raises(GumihoError):
        predicted_run_tau(a, -1)


def _event(step, accepted=0, drafted=0, draft_s=0.0, verify_s=0.0, **kw):
    emitted = [EmittedToken(7, k + 1, HeadFamily.SERIAL, 0.5) for k in range(accepted)]
    emitted.append(EmittedToken(7, 0, HeadFamily.TARGET, None))
    return StepEvent(step=step, emitted=emitted, accepted_length=accepted, rejected=[], drafted=drafted,
                     draft_s=draft_s, verify_s=verify_s, elapsed_s=0.0, **kw)


def test_predict_from_runs_measures_what_it_says():
    # Vanilla: the prefill (left out) and five steps, one of them a stall: the wall time
    # pays it, and so does the mean (a median would ignore it, and the speculative
    # side's mean would not: the two sides on one average).
    vanilla = [_event(0, verify_s=5.0)] + [_event(k, draft_s=0.001, verify_s=v)
                                           for k, v in enumerate([0.019, 0.020, 0.019, 0.5, 0.021], start=1)]
    # Speculative: the prefill, four verify steps accepting 2, 0, 1, 1, and a stopped empty step.
    spec = [_event(0, verify_s=5.0)] + [_event(k, accepted=n, drafted=4, draft_s=ds, verify_s=vs)
                                        for k, (n, ds, vs) in enumerate([(2, 0.010, 0.030), (0, 0.012, 0.026),
                                                                         (1, 0.008, 0.030), (1, 0.010, 0.028)],
                                                                        start=1)]
    spec.append(StepEvent(step=5, emitted=[], accepted_length=0, rejected=[], drafted=0, draft_s=0.0, verify_s=0.0,
                          elapsed_s=0.0, finished=True, finish_reason="stopped"))
    p = predict_from_runs(vanilla, spec)
    assert p.forward_s == pytest.approx(0.584 / 5)  # mean of 0.020, 0.021, 0.020, 0.501, 0.022
    assert p.draft_s == pytest.approx(0.010) and p.verify_s == pytest.approx(0.0285)
    assert p.acceptance == pytest.approx([0.75, 0.25])  # lengths 2, 0, 1, 1
    assert p.tau == pytest.approx(2.0)
    assert p.speedup == pytest.approx(2.0 * 0.1168 / 0.0385)
    # The steps a table averages are the prediction's own: it can be rebuilt from the table.
    assert mean_step_costs(spec) == (pytest.approx(p.draft_s), pytest.approx(p.verify_s))
    assert sum(mean_step_costs(vanilla)) == pytest.approx(p.forward_s)
    assert len(cost_steps(spec)) == 4 and len(cost_steps(vanilla)) == 5 and mean_step_costs(vanilla[:1]) is None
    with pytest.raises(GumihoError, match="vanilla"):
        predict_from_runs(vanilla[:1], spec)
    with pytest.raises(GumihoError, match="speculative"):
        predict_from_runs(vanilla, spec[:1])


def test_predict_from_real_runs():
    target = tiny_target("llama")
    prompt = [5, 17, 33, 2, 9]
    ref, vanilla = run(target, prompt, max_new_tokens=30)
    _, spec = run(target, prompt, OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.2), max_new_tokens=30)
    p = predict_from_runs(vanilla, spec)
    assert p.forward_s > 0 and p.verify_s > 0 and p.draft_s >= 0 and p.speedup > 0
    assert p.tau == pytest.approx(1 + sum(summarize(spec).acceptance_by_position()))
