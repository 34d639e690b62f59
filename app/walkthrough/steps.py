"""The walkthrough: one generation, looked at one verify step at a time.

For every verify step it keeps the draft tree the drafter proposed, who proposed
each node, which path the target accepted, and the token the target itself chose
at each depth, so a teacher can go forwards and backwards through the steps (or
let them play) and explain each one.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from gumiho import GenerationSettings, GumihoError, stream
from gumiho.heads import HeadFamily

from ..core.access import Access
from ..core.forms import (
    DEVICE_TREE,
    PAPER_SHAPE,
    PAPER_TREE_SETTINGS,
    WALK_MAX_NEW_TOKENS,
    RaceForm,
    Request,
    check_prompt_length,
    parse_request,
)
from ..core.worker import waiting_text
from ..core.zerogpu import on_gpu
from ..models.hub import ModelHub
from ..views.records import DrafterLayout, StepView, step_views, whole_characters
from ..views.render import esc, render_steps, token_mark, visible
from .treeplot import head_colour, proposer, tree_figure

# The walkthrough's own tree: the paper's shape (app.core.forms.PAPER_TREE_SETTINGS). The
# race sizes its tree for speed on this machine, and on a CPU that is 5 tokens to
# depth 3: one MLP head at most, so a class would almost never see positions 4-7,
# the parallel heads that are half of what this tab teaches. A step-through has no
# clock to protect, and the larger verify forward costs little here: 24 tokens of the
# default model take about 1.3 s on two CPU cores with this tree (some 3 s the first
# time, while the larger shapes warm up), against 0.6 s with the race's.
WALK_TREE = PAPER_TREE_SETTINGS

PAPER_TREE = "paper"
RACE_TREE = "race"
TREE_CHOICES = [("the paper's shape (depth 7, all heads)", PAPER_TREE),
                ("the race's tree (fast, sized for this machine)", RACE_TREE)]
TREE_LABELS = {PAPER_TREE: "the paper's tree shape", RACE_TREE: "the race's tree"}
PLAY_INTERVAL_S = 1.5  # autoplay: time to read one step before the next

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

### The tree in this tab
Unless you pick the race's tree, this tab drafts the paper's tree: up to 63 tokens (plus 8 full-tree
ones) down to depth 7, so every step shows all seven positions. Each depth is a column, headed by
the head that proposed it (**S1**, **S2**: the serial Transformer's two steps; **M1**…**M5**: the MLP
heads) and shaded in its family's colour. The table below the tree goes through the depths in order:
where the accepted path holds, where it breaks, and the nodes below the break that were never checked.
The race's tree is sized for speed on this machine ({race_nodes} tokens, depth {race_depth}).

### A third guesser: copying from the context
With **Copy from the context** on (the Race tab's settings), one more guess joins every tree: where the
last few tokens already occurred earlier in the prompt or the answer, the tokens that followed them
there. Summaries, answers about a given passage and code repeat long runs of their context, which a
lookup finds whole where the drafter would guess them one by one. These nodes are **green** (**C** in
the tree); where a copied token is one the drafter proposed too, the node stays the drafter's. The
target checks them in the same forward, by the same rule, so the text is still exactly its own.

### Why the early positions matter most
A path is only kept up to its first wrong token. If position 1 is wrong, positions 2–7 are thrown
away however good they were; if position 6 is wrong, only 6 and 7 are lost. Position *d* only ever
counts when positions 1…*d*−1 were all accepted, so acceptance can only fall with *d* (see the
acceptance plot in the race tab). That is why Gumiho spends its stronger, slower serial Transformer
on the first positions and the cheap parallel heads on the later ones.
"""
# The race's tree is the machine's (small on a CPU, the paper's on a GPU).
EXPLANATION = EXPLANATION.format(race_nodes=DEVICE_TREE.total_tokens, race_depth=DEVICE_TREE.depth)


@dataclass
class WalkProgress:
    """How far the walkthrough's generation has got (written on the model thread, read
    by the page's: plain fields)."""

    max_tokens: int = 0
    tokens: int = 0
    started: bool = False  # the model thread has taken the job
    place: Callable[[], object] = lambda: None  # where the run stands in line (app.core.jobs.run_job)

    def text(self, tree_label: str) -> str:
        if not self.started:
            return waiting_text(self.place())
        return f"Generating with {tree_label}: {self.tokens} of at most {self.max_tokens} tokens…"


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
    heads: list[str] = field(default_factory=list)  # proposer per node: "root", "serial", "mlp" or "copy"
    # The acceptance test of every node the target checked, in the order it checked them
    # (gumiho.engine.events.NodeCheck as a dict, with the token's "text"), and at temperature > 0
    # the residual the step's last token was drawn from (gumiho.engine.events.Residual as a dict:
    # "top" as {"token", "text", "prob"}, "resampled_text").
    checks: list[dict] = field(default_factory=list)
    residual: Optional[dict] = None


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
    tree_label: str = ""  # which tree the walk drafted (TREE_LABELS)
    tokens: list[int] = field(default_factory=list)  # every token generated, in order
    text: str = ""  # their text
    temperature: float = 0.0  # 0: greedy's test (the target's argmax); above: speculative sampling's


def walk_request(form: RaceForm, tree_choice, access: Optional[Access] = None) -> Request:
    """The walkthrough's request: ``form`` (the walkthrough's prompt, token count,
    temperature and seed, the race's drafter and tree settings), at most WALK_MAX_NEW_TOKENS tokens,
    with the paper's tree (WALK_TREE) or, for ``tree_choice == RACE_TREE``, the tree
    the race's settings give."""
    choice = tree_choice or PAPER_TREE  # an old page or an API call may leave it out
    if choice not in TREE_LABELS:
        raise GumihoError(f"Unknown tree {str(tree_choice)[:40]!r}; choose {PAPER_TREE!r} or {RACE_TREE!r}.")
    # With the paper's tree the race's tree controls are not used, so they are not checked
    # either: a value the race would refuse must not refuse a walkthrough that ignores it.
    shape = PAPER_SHAPE if choice == PAPER_TREE else form.tree_shape
    form = dataclasses.replace(form, top_p=1.0, tree_shape=shape)
    return parse_request(form, access, max_tokens_cap=WALK_MAX_NEW_TOKENS)


def tree_choice_of(req: Request) -> str:
    return PAPER_TREE if req.settings.tree == WALK_TREE else RACE_TREE


def _piece(tok, ctx: list[int], token: int) -> str:
    """Text of ``token`` right after ``ctx``."""
    base = tok.decode(ctx, skip_special_tokens=False) if ctx else ""
    full = tok.decode(ctx + [int(token)], skip_special_tokens=False)
    return full[len(base):] if full.startswith(base) else full


@on_gpu  # on a ZeroGPU Space each call runs in a GPU worker (app/core/zerogpu.py); elsewhere unchanged
def compute_walk(hub: ModelHub, req: Request, stop: Optional[threading.Event] = None,
                 progress: Optional["WalkProgress"] = None) -> Walk:
    progress = progress or WalkProgress()
    progress.max_tokens = req.settings.max_new_tokens
    res = hub.resolve(req.target, req.drafter, req.drafter_path, req.copy_from_context)
    target, drafter = res.target, res.drafter
    ids = check_prompt_length(target.encode(req.prompt), target.context_length, target.name,
                              hub.settings.max_prompt_tokens)
    settings: GenerationSettings = req.settings
    progress.started = True
    events = []
    for ev in stream(target, ids, drafter, settings, stop=stop, keep_trees=True, records=True):
        events.append(ev)
        progress.tokens += len(ev.tokens)
    tok = target.tokenizer
    views = step_views(events, tok, ids)
    layout = DrafterLayout.of(drafter) or DrafterLayout()
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
                                  list(tree.full_tree), list(ev.accepted_nodes),
                                  list(ev.target_choices), choice_text, ev.drafted, ev.accepted_length,
                                  sum(path_prob[1:]),
                                  # Who proposed each node, as the tree records it (the root's word is the page's).
                                  ["root"] + list(tree.heads[1:]),
                                  [{**dataclasses.asdict(c), "text": texts[c.node]} for c in ev.checks],
                                  _residual(ev.residual, tok, ctx, tree)))
        history.extend(ev.tokens)
    tree = settings.tree
    generated = [t for ev in events for t in ev.tokens]
    return Walk(layout, views, steps, target.name, res.note,
                events[-1].finish_reason if events else None, res.drafter_label,
                cost_aware_cap=tree.total_tokens if tree is not None and tree.cost_aware else 0,
                tree_label=TREE_LABELS[tree_choice_of(req)], tokens=generated,
                text=whole_characters(tok, generated),  # an answer cut inside an emoji ends before it
                temperature=settings.temperature)


def _residual(residual, tok, ctx: list[int], tree) -> Optional[dict]:
    """A step's residual (gumiho.engine.events.Residual) with each token's text where it stands:
    after the context and the path down to the node where the path broke."""
    if residual is None:
        return None
    before = ctx + [tree.tokens[j] for j in tree.path_to(residual.node)]
    return {"node": residual.node, "covered": residual.covered, "resampled_token": residual.resampled_token,
            "resampled_text": _piece(tok, before, residual.resampled_token),
            "top": [{"token": t, "text": _piece(tok, before, t), "prob": p} for t, p in residual.top]}


def _children(parents: list[int]) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            out[p].append(i)
    return out


def family_name(family: str, lay: DrafterLayout) -> str:
    """Who proposed a token, in the proposer's words, as a sentence names it."""
    return "copies from the context" if family == HeadFamily.COPY else "the " + lay.label_of(family)


def step_header(walk: Walk, i: int) -> str:
    s = walk.steps[i]
    lay = walk.layout or DrafterLayout()
    heads = s.heads
    n = len(walk.steps)
    acc = s.accepted_length
    if acc:
        who = " and ".join(family_name(h, lay) for h in dict.fromkeys(heads[j] for j in s.accepted))
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
    deepest = max(s.depths)
    families = [family_name(h, lay) for h in dict.fromkeys(heads[1:])]
    by = f" by {' and '.join(families)}" if families else ""
    return (f'<div class="walk-head"><b>Verify step {i + 1} of {n}.</b> The drafter proposed a tree of '
            f"<b>{s.drafted}</b> tokens{by} (up to depth {deepest}{sized}) and, by its own probabilities, "
            f"expected {s.expected:.2f} of them to be accepted. The target checked all of them in one forward "
            f"pass, {kept}, and added its own token <code>{esc(visible(bonus))}</code>. {produced}")


def _swatch(colour: str) -> str:
    return (f'<span style="display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;'
            f'background:{colour}"></span>')


def choices_table(walk: Walk, i: int) -> str:
    """Depth by depth, for every depth of the tree: who proposed its nodes and how
    many there are; along the accepted path, what the drafter offered below it, the
    target's choice and the verdict; below the depth where the path broke, that the
    nodes there were never checked. Rows carry data-depth, data-head (the proposers,
    space-separated) and data-state ("accepted", "broke", "bonus" or "unchecked")."""
    s = walk.steps[i]
    lay = walk.layout or DrafterLayout()
    heads = s.heads
    children = _children(s.parents)
    at_depth: dict[int, list[int]] = {}
    for j in range(1, len(s.depths)):
        at_depth.setdefault(s.depths[j], []).append(j)
    rows = []
    node = 0  # the accepted path so far ends here
    broke = 0  # the depth where the path stopped (its bonus token's), once passed
    for d in range(1, max([len(s.choice_text), *at_depth]) + 1):
        nodes = at_depth.get(d, [])
        proposers = list(dict.fromkeys(heads[j] for j in nodes))
        shown = proposers or [lay.family_at(d)]
        who = "<br>".join(_swatch(head_colour(h, d, lay)) + esc(proposer(h, d, lay)[1]) for h in shown)
        count = str(len(nodes)) if nodes else "–"
        if not broke and d <= len(s.choice_text):
            kids = sorted(children[node], key=lambda j: -s.probs[j])
            cands = " · ".join(f"<code>{esc(token_mark(s.node_text[j]))}</code> "
                              + (HeadFamily.COPY if heads[j] == HeadFamily.COPY else f"{s.probs[j]:.2f}") for j in kids[:6])
            if len(kids) > 6:
                cands += f", … ({len(kids) - 6} more)"
            choice = f"<code>{esc(token_mark(s.choice_text[d - 1]))}</code>"
            match = next((j for j in kids if j in s.accepted), None)
            if match is not None:
                state, verdict = "accepted", '<span class="ok">✓ drafted, accepted</span>'
                node = match
            elif kids:
                state, verdict = "broke", ('<span class="no">✗ not among the drafts: it becomes the bonus token, '
                                           "the rest is discarded</span>")
            else:
                state, verdict = "bonus", ('<span class="bonus">the tree ends here: the target\'s token is the '
                                           "bonus token</span>")
            if match is None:
                broke = d
            style = ""
        else:
            # Drafted, but below the break: the target's verdict on them never counted.
            state, cands, choice = "unchecked", "–", "–"
            verdict = (f"not checked: discarded with the path's break at depth {broke}" if broke
                       else "not checked: the answer ended")
            style = ' style="opacity:0.6"'
        rows.append(f'<tr data-depth="{d}" data-head="{esc(" ".join(proposers) or "none")}" data-state="{state}"'
                    f"{style}><td>{d}</td><td>{who}</td><td>{count}</td><td>{cands or '–'}</td><td>{choice}</td>"
                    f"<td>{verdict}</td></tr>")
    # In a box of its own that scrolls sideways on a narrow screen (style.css), not the page.
    return (f'<div class="walk-table-wrap"><table class="walk-table" data-max-depth="{max(s.depths)}"><thead><tr>'
            "<th>depth</th><th>drafted by</th><th>nodes</th><th>drafted after the accepted path (draft prob)</th>"
            "<th>target's choice</th><th>verdict</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def text_so_far(walk: Walk, i: int) -> str:
    s = walk.steps[i]
    before = render_steps(walk.views[:s.step], walk.layout)
    current = render_steps(walk.views[s.step:s.step + 1], walk.layout, show_rejected=True)
    return f'{before}<span class="current-step" title="this verify step">{current}</span>'


def step_figure(walk: Walk, i: int):
    s = walk.steps[i]
    return tree_figure(s.node_text, s.parents, s.depths, s.probs, s.accepted, walk.layout, s.choice_text,
                       s.full_tree, title=f"Draft tree of verify step {i + 1}: {s.drafted} drafted tokens, the "
                                          "accepted path drawn thick", heads=s.heads)
