"""What the ``/walkthrough`` endpoint returns: a walkthrough's verify steps as JSON."""
from __future__ import annotations

from typing import Optional


def _rounded(value, places: int = 6):
    return round(float(value), places) if isinstance(value, float) else value


def check_summary(check: dict) -> dict:
    """One checked node's acceptance test (gumiho.engine.events.NodeCheck), its numbers to 6 places."""
    return {k: _rounded(v) for k, v in check.items()}


def residual_summary(residual: Optional[dict]) -> Optional[dict]:
    if residual is None:
        return None
    return {**residual, "covered": _rounded(residual["covered"]),
            "top": [{**t, "prob": _rounded(t["prob"])} for t in residual["top"]]}


def walk_summary(walk, prompt: str) -> dict:
    """What the /walkthrough API endpoint returns: per verify step, the draft tree
    (node 0 is the root, the last token the target had already chosen) with who
    proposed each node, the accepted nodes in order, the target's own choice at each
    depth (the last one is the bonus token), the acceptance test of every node the
    target checked, in order ("checks": draft_prob, rule_q, target_prob, accept_prob,
    uniform, accepted), and at temperature above 0 the residual distribution the last
    token was drawn from ("residual")."""
    steps = [{"step": s.step, "drafted": s.drafted, "accepted_length": s.accepted_length,
              "expected_accepted_length": round(s.expected, 4),
              "nodes": [{"text": s.node_text[i], "parent": s.parents[i], "depth": s.depths[i], "head": s.heads[i],
                         "draft_prob": round(float(s.probs[i]), 4)} for i in range(len(s.parents))],
              "accepted_nodes": list(s.accepted), "target_choices": list(s.choice_text),
              "checks": [check_summary(c) for c in s.checks], "residual": residual_summary(s.residual)}
             for s in walk.steps]
    return {"ok": True, "message": "", "prompt": prompt, "model": walk.model, "drafter": walk.drafter_label,
            "tree": walk.tree_label, "temperature": walk.temperature, "text": walk.text, "tokens": walk.tokens,
            "new_tokens": len(walk.tokens), "verify_steps": len(steps), "finish_reason": walk.finish_reason,
            "steps": steps}
