"""The walkthrough: one generation, looked at one verify step at a time.

For every verify step it keeps the draft tree the drafter proposed, which path
the target accepted, and the token the target itself chose at each depth, so a
teacher can go forwards and backwards through the steps and explain each one.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

from gumiho import GenerationSettings, stream

from .figures import tree_figure
from .hub import ModelHub
from .inputs import Request, check_prompt_ids
from .render import esc, head_name, render_steps, visible
from .tokens import DrafterLayout, StepView, step_views

EXPLANATION = """
### What you are looking at
Each **verify step** is one forward pass of the target model. Before it, the drafter proposes a small
**tree** of guesses for the next few tokens; the target then scores every node of the tree in that one
pass, keeps the **longest path it agrees with**, and adds one token of its own (the **bonus** token).
So one step always yields at least one token, and more when the guesses were right — and the text is
exactly what the target would have written alone.

### Serial and parallel heads
Gumiho's drafter guesses positions in two ways. **Positions 1 and 2** (blue) come from a small
two-layer Transformer run **serially**: it guesses position 1, reads its own guess, then guesses
position 2. Each guess sees the one before it, which makes these guesses good, and costs one small
forward per position. **Positions 3 to 7** (orange) come from five small **MLP heads run in parallel**,
all at once from the same input: cheap, but each head guesses its position without seeing the tokens
drafted just before it, so its guesses are rougher.

### Why the early positions matter most
A path is only kept up to its first wrong token. If position 1 is wrong, positions 2–7 are thrown
away however good they were; if position 6 is wrong, only 6 and 7 are lost. Position *d* only ever
counts when positions 1…*d*−1 were all accepted, so acceptance can only fall with *d* (see the
acceptance plot in the race tab). That is why Gumiho spends its stronger, slower serial Transformer
on the first positions and the cheap parallel heads on the later ones.
"""


@dataclass
class WalkStep:
    step: int
    node_text: list[str]
    parents: list[int]
    depths: list[int]
    probs: list[float]
    full_tree: list[bool]
    accepted: list[int]
    choices: list[int]
    choice_text: list[str]
    drafted: int
    accepted_length: int
    expected: float = 0.0  # the drafter's own expectation of the accepted length: its path probabilities summed


@dataclass
class Walk:
    layout: DrafterLayout
    views: list[StepView]  # every step, the prefill (step 0) first
    steps: list[WalkStep]  # the verify steps
    model: str = ""
    note: str = ""
    finish_reason: Optional[str] = None
    drafter_label: str = ""
    notes: list[str] = field(default_factory=list)
    cost_aware_cap: int = 0  # a cost-aware tree's most drafted tokens a step; 0 for a fixed tree


def _piece(tok, ctx: list[int], token: int) -> str:
    """Text of ``token`` right after ``ctx``."""
    base = tok.decode(ctx, skip_special_tokens=False) if ctx else ""
    full = tok.decode(ctx + [int(token)], skip_special_tokens=False)
    return full[len(base):] if full.startswith(base) else full


def compute_walk(hub: ModelHub, req: Request, stop: Optional[threading.Event] = None) -> Walk:
    res = hub.resolve(req.target_id, req.drafter_kind, req.drafter_path)
    target, drafter = res.target, res.drafter
    ids = check_prompt_ids(target.encode(req.prompt), target.context_length, target.name)
    settings: GenerationSettings = req.settings
    events = list(stream(target, ids, drafter, settings, stop=stop, keep_trees=True))
    tok = target.tokenizer
    views = step_views(events, tok, ids)
    history = list(ids)
    steps: list[WalkStep] = []
    for ev in events:
        tree = ev.tree
        if ev.step > 0 and tree is not None:
            ctx = history[-3:]
            texts = []
            for i in range(len(tree)):
                if i == 0:
                    texts.append(_piece(tok, history[-4:-1], tree.tokens[0]))
                    continue
                path = [tree.tokens[j] for j in tree.path_to(tree.parents[i])] if tree.parents[i] > 0 else []
                texts.append(_piece(tok, ctx + path, tree.tokens[i]))
            choice_text = []
            acc_tokens = [tree.tokens[j] for j in ev.accepted_nodes]
            for d, c in enumerate(ev.target_choices):
                choice_text.append(_piece(tok, ctx + acc_tokens[:d], c))
            path_prob = [1.0] * len(tree)
            for i in range(1, len(tree)):  # parents come first
                path_prob[i] = path_prob[tree.parents[i]] * tree.probs[i]
            steps.append(WalkStep(ev.step, texts, list(tree.parents), list(tree.depths), list(tree.probs),
                                  list(tree.full_tree) or [False] * len(tree), list(ev.accepted_nodes),
                                  list(ev.target_choices), choice_text, ev.drafted, ev.accepted_length,
                                  sum(path_prob[1:])))
        history.extend(ev.tokens)
    tree = settings.tree
    return Walk(DrafterLayout.of(drafter), views, steps, target.name, res.note,
                events[-1].finish_reason if events else None, res.drafter_label,
                cost_aware_cap=tree.total_tokens if tree is not None and tree.cost_aware else 0)


def _children(parents: list[int]) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            out[p].append(i)
    return out


def step_header(walk: Walk, i: int) -> str:
    s = walk.steps[i]
    lay = walk.layout
    n = len(walk.steps)
    acc = s.accepted_length
    if acc:
        heads = sorted({("serial" if s.depths[j] <= lay.serial_positions else "mlp") for j in s.accepted})
        who = " and ".join("the serial Transformer" if h == "serial" else "the MLP heads" for h in heads)
        kept = f"accepted the first <b>{acc}</b> drafted token{'s' if acc > 1 else ''} (from {who})"
    else:
        kept = "accepted <b>none</b> of the drafted tokens"
    emitted = len(walk.views[s.step].tokens) if s.step < len(walk.views) else acc + 1
    bonus = s.choice_text[-1] if s.choice_text else ""
    produced = (f"This step produced <b>{emitted}</b> token{'s' if emitted != 1 else ''} for one target "
                f"forward.</div>")
    if not s.drafted:
        return (f'<div class="walk-head"><b>Verify step {i + 1} of {n}.</b> The drafter\'s guesses were too '
                "unlikely to pay for a longer target forward on this machine, so none was verified: the target "
                f"ran one plain forward and chose <code>{esc(visible(bonus))}</code>. {produced}")
    sized = (f", the best of up to {walk.cost_aware_cap} whose chances of acceptance pay for the longer verify "
             f"forward on this machine" if walk.cost_aware_cap else "")
    return (f'<div class="walk-head"><b>Verify step {i + 1} of {n}.</b> The drafter proposed a tree of '
            f"<b>{s.drafted}</b> tokens (up to depth {max(s.depths)}{sized}) and, by its own probabilities, expected "
            f"{s.expected:.2f} of them to be accepted. The target checked all of them in one forward "
            f"pass, {kept}, and added its own token <code>{esc(visible(bonus))}</code>. {produced}")


def choices_table(walk: Walk, i: int) -> str:
    """Depth by depth: what the drafter offered below the accepted path, and what
    the target chose there."""
    s = walk.steps[i]
    lay = walk.layout
    children = _children(s.parents)
    rows = []
    node = 0
    for d, choice in enumerate(s.choice_text, start=1):
        kids = sorted(children[node], key=lambda j: -s.probs[j])
        head = head_name("serial" if d <= lay.serial_positions else "mlp", d, lay)
        cands = ", ".join(f"<code>{esc(visible(s.node_text[j]))}</code> {s.probs[j]:.2f}" for j in kids[:6])
        if len(kids) > 6:
            cands += f", … ({len(kids) - 6} more)"
        match = next((j for j in kids if j in s.accepted), None)
        if match is not None:
            verdict = '<span class="ok">✓ drafted, accepted</span>'
            node = match
        elif kids:
            verdict = ('<span class="no">✗ not among the drafts: it becomes the bonus token, '
                       "the rest is discarded</span>")
        else:
            verdict = '<span class="bonus">the tree ends here: the target\'s token is the bonus token</span>'
        rows.append(f"<tr><td>{d}</td><td>{esc(head) if kids else '–'}</td><td>{cands or '–'}</td>"
                    f"<td><code>{esc(visible(choice))}</code></td><td>{verdict}</td></tr>")
        if match is None:
            break
    return ('<table class="walk-table"><thead><tr><th>depth</th><th>drafted by</th><th>drafted candidates '
            "(draft prob)</th><th>target's choice</th><th>verdict</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def text_so_far(walk: Walk, i: int) -> str:
    s = walk.steps[i]
    before = render_steps(walk.views[:s.step], walk.layout)
    current = render_steps(walk.views[s.step:s.step + 1], walk.layout, show_rejected=True)
    return f'{before}<span class="current-step" title="this verify step">{current}</span>'


def step_figure(walk: Walk, i: int):
    s = walk.steps[i]
    return tree_figure(s.node_text, s.parents, s.depths, s.probs, s.accepted, walk.layout, s.choice_text,
                       s.full_tree, title=f"Draft tree of verify step {i + 1}: accepted path highlighted")
