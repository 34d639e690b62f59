"""BENCHMARKS.md's main part: the table of tau and speedup per prompt set and
method, the words around it, and the acceptance-by-position figure."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..engine.metrics import SPEEDUP_THROUGHPUT
from .methods import DRAFTER_METHODS
from .records import drafted_depth, record_speedup

METHOD_ORDER = ("vanilla",) + DRAFTER_METHODS  # a record may lack any but vanilla


def speedup_cell(value, kind) -> str:
    """"1.49x", or "1.30x (throughput)" for a ratio of tokens per second."""
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f" ({SPEEDUP_THROUGHPUT})" if kind == SPEEDUP_THROUGHPUT else "")


def speedup_words(runs) -> str:
    """The metric words for the speedup column, naming the throughput ratio where a row has one."""
    words = "**speedup** = vanilla wall time / method wall time on the same prompts"
    if any(record_speedup(rec, m)[1] == SPEEDUP_THROUGHPUT for _, _, rec in runs for m in rec["methods"]):
        words += (" where both wrote the same number of tokens on every prompt; where they did not (sampling), "
                  "method tokens/s / vanilla tokens/s, marked (throughput)")
    return words + "."


def table(runs, depth=7) -> str:
    head = ["set", "method", "tau", *[f"acc@{d}" for d in range(1, depth + 1)], "tokens/s", "speedup"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, _, rec in runs:
        for m in METHOD_ORDER:
            if m not in rec["methods"]:
                continue
            r = rec["methods"][m]
            acc = r["acceptance_by_position"] + [0.0] * depth
            reach = drafted_depth(r)
            row = [label, m, f"{r['tau']:.2f}",
                   *[f"{a:.2f}" if m != "vanilla" and d <= reach else "-" for d, a in enumerate(acc[:depth], 1)],
                   f"{r['tokens_per_s']:.1f}", speedup_cell(*record_speedup(rec, m))]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def wins(runs) -> str:
    n = sum(1 for _, _, rec in runs if all(k in rec["methods"] for k in ("gumiho", "serial", "parallel"))
            and rec["methods"]["gumiho"]["tau"] > max(rec["methods"]["serial"]["tau"], rec["methods"]["parallel"]["tau"]))
    text = f"Gumiho's tau is above both ablations on {n} of {len(runs)} sets."
    # The EAGLE-2 baseline, on the sets that ran it (older records did not).
    both = [rec["methods"] for _, _, rec in runs if "gumiho" in rec["methods"] and "eagle" in rec["methods"]]
    if both:
        above = sum(m["gumiho"]["tau"] > m["eagle"]["tau"] for m in both)
        text += f" It is above the one-layer EAGLE-2 baseline's (eagle) on {above} of the {len(both)} sets that ran it."
    return text


def figure(runs, html_path: Path, png_path: Path) -> bool:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "Acceptance at position d (share of verify steps with accepted length >= d)",
        "Conditional acceptance at d (given d-1 was accepted)"))
    colours = {"gumiho": "#d9480f", "serial": "#1c7ed6", "parallel": "#2b8a3e", "eagle": "#7048e8"}
    for m in METHOD_ORDER[1:]:
        un, co = [], []
        for _, _, rec in runs:
            if m in rec["methods"]:
                un.append(rec["methods"][m]["acceptance_by_position"])
                co.append(rec["methods"][m]["conditional_acceptance_by_position"])
        if not un:
            continue
        depth = min(len(u) for u in un)
        mean_un = [sum(u[d] for u in un) / len(un) for d in range(depth)]
        mean_co = [sum(c[d] for c in co) / len(co) for d in range(depth)]
        xs = list(range(1, depth + 1))
        fig.add_trace(go.Scatter(x=xs, y=mean_un, name=m, mode="lines+markers", line=dict(color=colours[m])), 1, 1)
        fig.add_trace(go.Scatter(x=xs, y=mean_co, name=m + " (conditional)", mode="lines+markers",
                                 line=dict(color=colours[m], dash="dash"), showlegend=True), 1, 2)
    fig.update_xaxes(title_text="draft position d")
    fig.update_yaxes(range=[0, 1])
    fig.update_layout(title=f"SmolLM2-135M-Instruct drafters, mean over {len(runs)} prompt sets (CPU, greedy)",
                      width=1100, height=460, template="plotly_white")
    html_path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(html_path), include_plotlyjs=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return False
    try:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                        f"--screenshot={png_path.resolve()}", "--window-size=1120,480",
                        "--virtual-time-budget=5000", html_path.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        return png_path.exists()
    except (subprocess.SubprocessError, OSError):
        return False


def setup_words(rec: dict) -> str:
    """"; target in float32, drafters in bfloat16; draft tree ..." from a bench record
    (older records without the drafter dtype give only what they hold)."""
    methods = [m for m in rec["methods"].values() if isinstance(m, dict)]
    dtypes = sorted({m["drafter_dtype"] for m in methods if m.get("drafter_dtype")})
    words = [f"target in {rec['dtype']}" if rec.get("dtype") else ""]
    if dtypes:
        words.append(f"drafters in {', '.join(dtypes)}")
    tree = next((m["tree"] for m in methods if m.get("tree")), None)
    if tree:
        full = (f" plus up to {tree['full_tree_tokens']} full-tree node{'s' if tree['full_tree_tokens'] != 1 else ''}"
                if tree.get("full_tree") and tree.get("full_tree_tokens") else "")
        if tree.get("cost_aware"):
            means = ", ".join(f"{name} {m['mean_drafted']:.1f}" for name, m in rec["methods"].items()
                              if isinstance(m, dict) and m.get("tree") and m.get("mean_drafted") is not None)
            size = (f"draft tree sized each step by the verify cost measured on this machine (gumiho.engine.verifycost): "
                    f"at most {tree['total_tokens']} drafted nodes{full}"
                    + (f" (drafted nodes per verify step: {means})" if means else ""))
        else:
            size = f"draft tree of {tree['total_tokens']} nodes{full}"
        words.append(f"{size}, depth {tree['depth']}, top-k {tree.get('serial_top_k', tree.get('top_k'))} "
                     f"at the serial positions, {tree['mlp_top_k']} tokens per MLP head and path, "
                     f"{tree['mlp_keep']} paths kept per MLP depth")
    words = [w for w in words if w]
    return ("; " + "; ".join(words)) if words else ""
