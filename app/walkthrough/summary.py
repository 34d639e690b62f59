"""What the ``/walkthrough`` endpoint returns: a walkthrough's verify steps as JSON."""
from __future__ import annotations


def walk_summary(walk, prompt: str) -> dict:
    """What the /walkthrough API endpoint returns: per verify step, the draft tree
    (node 0 is the root, the last token the target had already chosen) with who
    proposed each node, the accepted nodes in order and the target's own choice at
    each depth (the last one is the bonus token)."""
    steps = [{"step": s.step, "drafted": s.drafted, "accepted_length": s.accepted_length,
              "expected_accepted_length": round(s.expected, 4),
              "nodes": [{"text": s.node_text[i], "parent": s.parents[i], "depth": s.depths[i], "head": s.heads[i],
                         "draft_prob": round(float(s.probs[i]), 4)} for i in range(len(s.parents))],
              "accepted_nodes": list(s.accepted), "target_choices": list(s.choice_text)}
             for s in walk.steps]
    return {"ok": True, "message": "", "prompt": prompt, "model": walk.model, "drafter": walk.drafter_label,
            "tree": walk.tree_label, "text": walk.text, "tokens": walk.tokens, "new_tokens": len(walk.tokens),
            "verify_steps": len(steps), "finish_reason": walk.finish_reason, "steps": steps}
