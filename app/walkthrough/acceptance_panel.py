"""The acceptance test of one verify step, drawn for a class: every drafted token the
target checked, in the order it checked them, with the target's probability p beside
the drafter's own (two bars), the chance the rule keeps it, the draw it was tested
with and the verdict; then, at temperature above 0, the residual distribution the
step's last token was drawn from, with that token marked.

Why the drafter's probability is drawn but not used: this engine drafts its tree's
tokens top-k, deterministically, so each drafted token is proposed with certainty, a
point mass (q = 1). The rule min(1, p/q) then keeps it with probability p, p being the
target's distribution at that node after the siblings rejected before it were removed
and the rest renormalised; at the break the last token is drawn from what is left.
Put the drafter's own probability in place of q and the output drifts away from the
target's distribution (the Lossless? tab shows it).
"""
from __future__ import annotations

from ..views.render import esc, token_mark

GREEDY_NOTE = ("At temperature 0 the test is greedy's: a drafted token is kept if, and only if, it is the target's "
               "most likely token there (no draw). The probabilities are shown for information.")
SAMPLING_NOTE = ("At temperature {t:g} each drafted token is kept with probability min(1, p / q). This tree was "
                 "drafted top-k, not sampled, so every drafted token was certain to be proposed: q = 1, and the "
                 "token is kept with probability p, the target's probability after the siblings rejected before it "
                 "were taken out of p (and the rest scaled back to 1). A draw u below that keeps it. The drafter's "
                 "own probability is drawn beside p, but using it as q would be the classic bug: the output would "
                 "no longer follow the target's distribution.")


def _bar(value: float, kind: str) -> str:
    width = max(0.0, min(1.0, float(value))) * 100
    return (f'<div class="walk-bar {kind}"><span style="width:{width:.1f}%"></span>'
            f"<em>{value:.3f}</em></div>")


def _row(c: dict, greedy: bool) -> str:
    u = "–" if c.get("uniform") is None else f"{c['uniform']:.3f}"
    if greedy:
        verdict = ("✓ the target's top token: kept" if c["accepted"] else "✗ not the target's top token: rejected")
    elif c["accepted"]:
        verdict = f"✓ u {u} &lt; {c['accept_prob']:.3f}: kept"
    else:
        verdict = f"✗ u {u} ≥ {c['accept_prob']:.3f}: rejected, and taken out of p"
    state = "accepted" if c["accepted"] else "rejected"
    return (f'<tr data-node="{c["node"]}" data-state="{state}"><td>{c["depth"]}</td>'
            f'<td><code>{esc(token_mark(c["text"]))}</code></td>'
            f'<td>{_bar(c["target_prob"], "p")}{_bar(c["draft_prob"], "q")}</td>'
            f'<td>{c["accept_prob"]:.3f}</td><td>{u}</td><td class="{"ok" if c["accepted"] else "no"}">{verdict}</td></tr>')


def _residual(res: dict, rejected: list[str]) -> str:
    rows = []
    for t in res["top"]:
        drawn = t["token"] == res["resampled_token"]
        rows.append(f'<li data-token="{t["token"]}"{" data-resampled" if drawn else ""}>'
                    f'<code>{esc(token_mark(t["text"]))}</code>{_bar(t["prob"], "r")}'
                    f'{" <b>← drawn</b>" if drawn else ""}</li>')
    if not any(t["token"] == res["resampled_token"] for t in res["top"]):
        rows.append(f'<li data-resampled><code>{esc(token_mark(res["resampled_text"]))}</code> '
                    f"<b>← drawn</b> (outside the {len(res['top'])} likeliest)</li>")
    removed = (f" with {', '.join(f'<code>{esc(token_mark(r))}</code>' for r in rejected)} taken out"
               if rejected else "")
    return (f'<div class="walk-residual"><p>The path broke here: the last token is drawn from the residual, the '
            f"target's distribution at this node{removed}, scaled back to 1. Its {len(res['top'])} likeliest "
            f"tokens hold {res['covered']:.0%} of it:</p><ol>{''.join(rows)}</ol></div>")


def acceptance_panel(walk, i: int) -> str:
    """The step's test as HTML (a table that scrolls sideways on a narrow screen)."""
    s = walk.steps[i]
    greedy = walk.temperature == 0
    if not s.checks:
        return ('<div class="walk-test"><p>No drafted token was checked in this step: the target ran one plain '
                "forward.</p></div>")
    note = GREEDY_NOTE if greedy else SAMPLING_NOTE.format(t=walk.temperature)
    rows = "".join(_row(c, greedy) for c in s.checks)
    table = ('<div class="walk-table-wrap"><table class="walk-test-table"><thead><tr><th>depth</th><th>drafted token'
             '</th><th>p target <span class="key p"></span> · q drafter <span class="key q"></span></th>'
             "<th>keep with</th><th>draw u</th><th>verdict</th></tr></thead><tbody>" + rows + "</tbody></table></div>")
    residual = ""
    if s.residual is not None:
        broke_at = s.residual["node"]
        rejected = [c["text"] for c in s.checks if c["parent"] == broke_at and not c["accepted"]]
        residual = _residual(s.residual, rejected)
    return (f'<div class="walk-test" data-temperature="{walk.temperature:g}"><p class="walk-test-note">'
            f"{esc(note)}</p>{table}{residual}</div>")
