"""HTML for the token columns, the legend, the live figures and the messages.

The model's output is text, never markup: every piece of it goes through
:func:`esc`, which also neutralises the characters template engines react to.
Colours come from :mod:`app.views.palette` (inline, so the shade can follow the
drafter's own layout); the classes (``h-serial``, ``h-mlp``, ``h-target``,
``p<d>``, ``ghost``) say the same thing for CSS and for tests.
"""
from __future__ import annotations

from typing import Iterable, Optional

from gumiho.bench.machine_load import BUSY_EFFECT
from gumiho.engine import metrics
from gumiho.heads import HeadFamily

from . import palette
from .escape import esc
from .heads import HEAD_LABELS, head_label
from .provenance import provenance, share_line
from .records import DrafterLayout, RaceResult, RunRecord, StepView, TokenView


def esc_plot(text) -> str:
    """Escape text for a plotly label or hover text. plotly.js reads a few HTML tags
    there, so markup must be escaped, but of the named entities it decodes only a
    handful (&amp; &lt; &gt;, not &quot;, which would show literally); numeric ones
    it decodes all."""
    return esc(text).replace("&quot;", "&#34;")


def visible(text: str) -> str:
    """Whitespace made visible (for ghosts, labels and tables)."""
    if text == "":
        return "∅"
    return text.replace("\r", "").replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣")


def token_mark(text: str) -> str:
    """A token as the walkthrough shows it, the same in its tree and its table:
    whitespace made visible, and a token of punctuation or space alone in guillemets
    (a bare "," is a speck beside a marker, and in a list it reads as the list's own comma)."""
    shown = visible(text)
    return shown if any(ch.isalnum() for ch in shown) else f"‹{shown}›"


def head_name(head: str, position: int, layout: Optional[DrafterLayout]) -> str:
    if head == HeadFamily.SERIAL:
        return f"{(layout or DrafterLayout()).label_of('serial')} (step {position})"
    if head == HeadFamily.MLP:
        first_mlp = (layout.serial_positions if layout else 0)
        label = (layout or DrafterLayout()).label_of(HeadFamily.MLP)
        own = "" if label == HEAD_LABELS["mlp"] else f"{label}: "  # a format's own words (Medusa heads)
        return f"{own}MLP head {position - first_mlp}"
    if head == HeadFamily.COPY:
        return "copied from the context (prompt or answer so far)"
    return HeadFamily.TARGET


def token_title(tv: TokenView, layout: Optional[DrafterLayout], rejected: bool = False) -> str:
    if tv.head == HeadFamily.TARGET:
        if layout is None:
            parts = ["target token (vanilla: one token per target forward)"]
        else:
            parts = ["target's own token: the bonus token of this verify step"]
    else:
        what = "rejected draft" if rejected else "accepted draft"
        parts = [what, f"draft position {tv.position}", head_name(tv.head, tv.position, layout)]
        if tv.draft_prob is not None and tv.head == HeadFamily.COPY:
            # Not a drafter's probability: the copy proposer's running share of accepted guesses.
            parts.append(f"copied guesses accepted so far {tv.draft_prob:.0%}")
        elif tv.draft_prob is not None:
            parts.append(f"draft prob {tv.draft_prob:.3f}")
    parts.append(f"step {tv.step}")
    if tv.covers > 1:
        parts.append(f"{tv.covers} tokens make up this character")
    parts.append(f"token id {tv.token}: {visible(tv.text)}")
    return " · ".join(parts)


def _classes_and_style(tv: TokenView, layout: Optional[DrafterLayout]) -> tuple[str, str]:
    cls = ["tok", f"h-{tv.head}", f"p{tv.position}"]
    style = ""
    if tv.head in (HeadFamily.SERIAL, HeadFamily.MLP) and layout is not None:
        head, rank, count = palette.family_rank(tv.position, layout.serial_positions, layout.max_depth)
        cls.append(f"r{rank}")
        style = f"background:{palette.token_background(head, rank, count)}"
    elif tv.head == HeadFamily.COPY:
        style = f"background:{palette.COPY_BG}"
    if tv.special:
        cls.append("special")
    if style and _is_narrow(tv.text):
        cls.append("narrow")  # a comma's colour box would be a sliver: style.css pads it
    return " ".join(cls), style


def _is_narrow(text: str) -> bool:
    """A token drawn only a few pixels wide: one or two marks and no letter or digit."""
    core = text.strip()
    return 0 < len(core) <= 2 and not any(c.isalnum() for c in core)


def token_span(tv: TokenView, layout: Optional[DrafterLayout]) -> str:
    if tv.text == "":
        return ""
    cls, style = _classes_and_style(tv, layout)
    style_attr = f' style="{style}"' if style else ""
    return f'<span class="{cls}"{style_attr} title="{esc(token_title(tv, layout))}">{esc(tv.text)}</span>'


def ghost_span(tv: TokenView, layout: Optional[DrafterLayout]) -> str:
    cls, _ = _classes_and_style(tv, layout)
    colour = (palette.COPY_PLOT if tv.head == HeadFamily.COPY else
              palette.position_colour(tv.position, layout.serial_positions, layout.max_depth) if layout else "")
    style = f' style="text-decoration-color:{colour};border-color:{colour}"' if colour else ""
    return (f'<s class="ghost {cls}"{style} title="{esc(token_title(tv, layout, rejected=True))}">'
            f'{esc(visible(tv.text))}</s>')


def render_steps(views: Iterable[StepView], layout: Optional[DrafterLayout], show_rejected: bool = False) -> str:
    """The token column: accepted drafts coloured by head and position, the
    target's bonus tokens neutral, and (on demand) each step's rejected drafts as
    struck-through ghosts. A ghost group is drawn after the word it was rejected in
    (a ghost inside a word would split it: "Sc att oc rad ast attering"), and a
    zero-width mark (:data:`GHOST_MARK`) keeps the exact place: between the step's
    accepted drafts and its bonus token. Steps only ever append, so a growing column
    streams as a growing string (a word still open at the end has its ghosts last)."""
    out: list[str] = []
    pending: list[str] = []  # ghost groups waiting for the end of their word
    for v in views:
        bonus_at = sum(1 for t in v.tokens if t.head != HeadFamily.TARGET)
        for k, tv in enumerate(v.tokens):
            if pending and _starts_a_word_break(tv.text):
                out.extend(pending)
                pending.clear()
            if k == bonus_at and show_rejected and v.rejected:
                out.append(GHOST_MARK)
                pending.append(_ghosts(v, layout))
            out.append(token_span(tv, layout))
        if show_rejected and v.rejected and bonus_at >= len(v.tokens):
            out.append(GHOST_MARK)
            pending.append(_ghosts(v, layout))
    return "".join(out + pending)


GHOST_MARK = '<span class="ghost-at" title="rejected drafts of this step: after the word"></span>'


GHOSTS_SHOWN = 3  # per step: a wide tree rejects a dozen drafts at one depth, and a wall of them hides the text


def _ghosts(v: StepView, layout) -> str:
    """A step's rejected drafts, the likeliest GHOSTS_SHOWN of them, and how many more
    (their tokens in the tooltip)."""
    ranked = sorted(v.rejected, key=lambda r: -(r.draft_prob or 0.0))
    shown, more = ranked[:GHOSTS_SHOWN], ranked[GHOSTS_SHOWN:]
    tail = ""
    if more:
        names = ", ".join(visible(r.text) for r in more[:12]) + (", …" if len(more) > 12 else "")
        tail = (f'<span class="ghost-more" title="{esc(f"{len(more)} more rejected drafts at this depth: {names}")}">'
                f'+{len(more)}</span>')
    return '<span class="ghosts">' + "".join(ghost_span(r, layout) for r in shown) + tail + "</span>"


def _starts_a_word_break(text: str) -> bool:
    """Does a token with this text begin after a word's end (a space, punctuation, a line)?"""
    return bool(text) and not (text[0].isalnum() or text[0] in "_'’")


def render_run(run: RunRecord, n_steps: Optional[int] = None, show_rejected: bool = False) -> str:
    views = run.views if n_steps is None else run.views[:n_steps]
    return render_steps(views, run.layout, show_rejected)


def render_legend(layout: Optional[DrafterLayout]) -> str:
    if layout is None:
        return ""
    skipped = set(layout.not_drafted())
    items = []
    for head in layout.named_heads:  # in the proposer's order, in its words
        label = head_label(head.family, head.kind)
        name = esc(label[:1].upper() + label[1:])
        if head.family == HeadFamily.COPY:
            items.append(f'<span class="lg-group"><b>{name}</b> <span class="sw h-copy" style="background:'
                         f'{palette.COPY_BG}" title="a run of tokens found earlier in the prompt or the answer">'
                         f'copy</span></span>')
        else:
            sw = "".join(_swatch(head.family, d, layout, d in skipped) for d in head.positions)
            items.append(f'<span class="lg-group"><b>{name}</b> {sw}</span>')
    items.append('<span class="lg-group"><span class="sw h-target">bonus</span> the target\'s own token</span>')
    items.append('<span class="lg-group"><s class="ghost sw-ghost">ghost</s> rejected draft (shown with '
                 '"Show rejected drafts")</span>')
    return ('<div class="gm-legend"><span class="lg-title">Colour = who guessed the token; '
            'shade = draft position (numbers):</span> ' + " ".join(items) + _not_drafted_note(layout)
            + NOTATION_NOTE + "</div>")


# How a token's text is written where it would be invisible (visible() and token_mark() below).
NOTATION_NOTE = ('<div class="lg-note gm-notation">In drafts and the tree: <code>␣</code> a space, <code>⏎</code> a '
                 'new line, <code>‹,›</code> a token of punctuation alone.</div>')


def positions_text(positions) -> str:
    """"4", "4–7": a run of draft positions as the page writes it."""
    positions = list(positions)
    return str(positions[0]) if len(positions) == 1 else f"{positions[0]}–{positions[-1]}"


def not_drafted_reason(layout: DrafterLayout) -> str:
    """Why the drafter's deeper positions were not drafted, in one sentence."""
    return (f"this race's tree stops at depth {layout.drafted_depth}: on a CPU every drafted token makes the "
            f"target's verify forward longer, so the tree is kept small")


def _not_drafted_note(layout: DrafterLayout) -> str:
    skipped = layout.not_drafted()
    if not skipped:
        return ""
    return (f'<div class="lg-note"><span class="sw nd">{positions_text(skipped)}</span> not drafted: '
            f"{esc(not_drafted_reason(layout))}. The Walkthrough tab, or <i>Race with the paper's tree</i>, "
            f"drafts all {layout.max_depth} positions.</div>")


def _swatch(head: str, position: int, layout: DrafterLayout, skipped: bool = False) -> str:
    if skipped:
        return (f'<span class="sw nd h-{head} p{position}" title="draft position {position}: not drafted in '
                f'this race ({esc(not_drafted_reason(layout))})">{position}</span>')
    colour = palette.position_colour(position, layout.serial_positions, layout.max_depth, plot=False)
    return (f'<span class="sw h-{head} p{position}" style="background:{colour}" '
            f'title="draft position {position}">{position}</span>')


def _fmt_s(x: float) -> str:
    return f"{x:.2f} s"


def render_stats(run: Optional[RunRecord], n_steps: Optional[int] = None, clock: Optional[float] = None,
                 status: str = "") -> str:
    """Live figures of one column: tokens/s, tau, target forwards, elapsed."""
    if run is None:
        cells = [("tokens/s", "–"), ("tau", "–"), ("target forwards", "–"), ("elapsed", "–"), ("tokens", "–")]
    else:
        st = run.stats(n_steps)
        # During a replay the column's clock runs until its own run ended.
        elapsed = st.wall_s if clock is None else min(clock, run.wall_s)
        rate = st.new_tokens / elapsed if elapsed > 0 else 0.0
        cells = [("tokens/s", f"{rate:.1f}"), ("tau", f"{st.tau:.2f}"), ("target forwards", str(st.target_forwards)),
                 ("elapsed", _fmt_s(elapsed)), ("tokens", str(st.new_tokens))]
    body = "".join(f'<div class="cell"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
                   for k, v in cells)
    note = f'<div class="stat-note">{esc(status)}</div>' if status else ""
    return f'<div class="gm-stats">{body}</div>{note}'


def speedup(result: RaceResult) -> Optional[tuple[float, str]]:
    """(speedup, kind) of a finished race, as gumiho.engine.metrics defines both and in its
    words, so that the page, the /race answer and the benchmark's JSON agree: vanilla
    wall time / Gumiho wall time when both wrote as many tokens (greedy), else the
    ratio of tokens/s ("throughput"). None for a stopped or empty race."""
    v, g = result.vanilla, result.gumiho
    if v.stopped or g.stopped or not v.events or not g.events:
        return None
    pair = [(v.stats().new_tokens, v.wall_s, g.stats().new_tokens, g.wall_s)]
    kind = metrics.speedup_kind(pair)
    value = metrics.speedup(pair, kind)
    return (value, kind) if value is not None else None


# Why a sampled race's two texts differ (the page's result line and the /race answer).
SAMPLED_TEXTS = ("With temperature above 0 each column samples its own text: speculative sampling draws from the "
                 "target's own distribution (the acceptance rule keeps it exact), not the same draws, so the two "
                 "texts differ while being equally likely.")


def render_result(result: Optional[RaceResult]) -> str:
    if result is None:
        return ""
    v, g = result.vanilla, result.gumiho
    if v.stopped or g.stopped:
        if not g.events:
            return ('<div class="gm-result stopped">Stopped while vanilla decoding was being timed: its column shows '
                    f"the {v.stats().new_tokens if v.events else 0} tokens it produced; Gumiho did not run.</div>")
        return ('<div class="gm-result stopped">Stopped. Both columns and the figures show what was produced until '
                "then.</div>")
    sp = speedup(result)
    if sp is None:
        return ""
    value, kind = sp
    vs, gs = v.stats(), g.stats()
    by = gs.accepted_by_head
    lay = g.layout or DrafterLayout()
    who = ("; accepted drafts: " + ", ".join(f"{lay.label_of(h)} {by[h]}" for h in (HeadFamily.SERIAL, HeadFamily.MLP, HeadFamily.COPY)
                                             if by.get(h))) if by else ""
    skipped = lay.not_drafted()
    if skipped:
        who += f"; positions {positions_text(skipped)} not drafted (tree depth {lay.drafted_depth})"
    if kind == metrics.SPEEDUP_WALL_TIME:
        detail = (f"{_fmt_s(v.wall_s)} vanilla vs {_fmt_s(g.wall_s)} Gumiho for the same {vs.new_tokens} tokens; "
                  f"tau {gs.tau:.2f}{who}")
    else:
        detail = (f"sampling gave different lengths ({vs.new_tokens} vs {gs.new_tokens} tokens), so this is the "
                  f"ratio of tokens/s ({gs.tokens_per_s:.1f} vs {vs.tokens_per_s:.1f}); tau {gs.tau:.2f}{who}")
    word = "faster" if value >= 1 else "slower"
    shown = value if value >= 1 else 1 / value
    same = ""
    if result.temperature > 0:
        same = " " + SAMPLED_TEXTS
    elif kind == metrics.SPEEDUP_WALL_TIME:
        same = (" The two texts are identical token for token, as they must be." if v.events and
                [t for e in v.events for t in e.tokens] == [t for e in g.events for t in e.tokens]
                else " The two texts differ: please report this, greedy speculative decoding must match vanilla.")
    # What ran and the fastest way here, one click away: inline, the line ran to five lines (issue 60).
    note = runtime_note(result, value).strip()
    summary = "What ran the target" + (", and the fastest way to run it here" if result.fastest else "")
    more = f'<details class="gm-more"><summary>{summary}</summary>{esc(note)}</details>' if note else ""
    busy = busy_note(result)
    warning = f'<div class="gm-busy" role="note">{esc(busy)}</div>' if busy else ""
    return (f'<div class="gm-result {"win" if value >= 1 else "lose"}">{provenance(result)}'
            f'<span class="big">Speedup {value:.2f}×</span> '
            f"Gumiho was {shown:.2f}× {word} than vanilla ({esc(detail)}).{esc(same)}"
            f"{predicted_line(result.prediction)}{warning}{more}{share_line(result)}</div>")


def predicted_line(p) -> str:
    """The speedup the race's own acceptance and step costs predict, with its arithmetic
    (gumiho.lab.speedmodel), beside the measured one."""
    if p is None:
        return ""
    # Short in the line (issue 60: the line stays short); the arithmetic in its hover, the
    # formula in the page's "numbers, exactly" note.
    arithmetic = (f"{p.tau:.2f} tokens per verify step × {1000 * p.forward_s:.1f} ms per plain forward / "
                  f"({1000 * p.draft_s:.1f} ms drafting + {1000 * p.verify_s:.1f} ms verifying per step)")
    return (f' <span class="gm-predicted" title="{esc(arithmetic)}">Predicted from acceptance and cost: '
            f"<b>{p.speedup:.2f}×</b>.</span>")


def busy_note(result: RaceResult) -> str:
    """Why this race's speedup cannot be trusted, when the machine was busy while it was
    timed ("" when it was quiet, or when that could not be read)."""
    return machine_busy_note(result.machine, "this speedup cannot be trusted; tau and acceptance can (they do not "
                                             "depend on the clock). Run the race again")


def machine_busy_note(m, what: str) -> str:
    """The busy sentence of every tab that times something: what the load did, and
    ``what`` follows for this tab's figures ("" when the machine was quiet, or when its
    load could not be read)."""
    if m is None or not m.busy:
        return ""
    return f"This machine was busy: {m.note()}. {BUSY_EFFECT} So {what} when the machine is quiet."


def runtime_note(result: RaceResult, value: float) -> str:
    """What ran the target, and why that decides the speedup (docs/llamacpp.md); then
    the fastest way to run the model here, when the race ran on another view of it."""
    note = f" Both lanes ran the target's {result.weights} weights in {result.runtime}."
    if not result.flat_verify:
        if value < 1:
            note += (" On a CPU those 4-bit products are bound by arithmetic, not by memory: each extra token a "
                     "verify carries costs about half a plain forward on two cores, so guessing ahead does not pay "
                     "for itself (the least slow tree here is the first guess alone: tree depth 1, node budget 1). "
                     "With float32 weights (Settings) a verify over a few tokens costs about one forward, as on a "
                     "GPU, and drafting pays; vanilla is slower there.")
    f = result.fastest
    if f is not None:
        v = result.vanilla.stats().tokens_per_s
        tps = f.stats.tokens_per_s
        ratio = f" ({tps / v:.2f}× this race's vanilla)" if v > 0 else ""
        note += (f" The fastest way to run this model on this machine is vanilla decoding of its {f.weights} weights "
                 f"in {f.runtime}: {tps:.1f} tokens/s on this prompt{ratio}, timed alone after the race. "
                 f"Drafting does not pay there on two cores: each extra token a verify carries costs about half a "
                 f"plain forward, where on these float32 weights, as on a GPU, a few tokens cost about one.")
    return note


def render_banner(text: str, level: str = "info") -> str:
    """A status line: level is info, loading, ready, warn or error."""
    if not text:
        return ""
    # The warning sign drawn by CSS, not U+26A0 (an emoji font's glyph where there is one, a box elsewhere).
    icon = {"loading": '<span class="spinner"></span>', "error": '<span class="sign">!</span>',
            "warn": '<span class="sign">!</span>'}.get(level, "")
    return f'<div class="gm-banner {esc(level)}">{icon}{esc(text)}</div>'
