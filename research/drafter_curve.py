"""The curve of training against acceptance for the shipped Gumiho drafter: every stage it
went through, as shipped in the repository's history, benched the same way today.

For each stage the weights are read from the commit that shipped them (``git show``), then
``gumiho.bench`` runs the Gumiho method alone (tau and acceptance by position do not depend on
the clock) on MT-Bench with the default CPU tree and with the paper's tree, float32 target,
greedy. The x axes are the stage's cumulative training tokens and cumulative training
core-hours (wall time times the torch threads of that run; the target's answers, written once
per stage, are not counted); the held-out top-1 by position is each stage's own training
record (each stage held out 2% of its own new data, so those splits differ from stage to
stage; the bench figures are on one fixed prompt set).

    python research/drafter_curve.py run  [--limit 10 --max-new-tokens 64]   # resumable
    python research/drafter_curve.py report        # benchmarks/drafter_curve/curve.{json,md}, docs/img/drafter_curve.svg

``--extra NAME=FOLDER:TOKENS:CORE_HOURS`` adds a drafter trained after the last stage (for
example an arm of research/drafter_levers.sh), its tokens and core-hours counted on top of
stage 7's.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAFTER = "assets/drafters/smollm2-135m-gumiho"
RECORDS = ROOT / "benchmarks/training/smollm2-135m-gumiho"
OUT = ROOT / "benchmarks/drafter_curve"
# stage -> (the commit that shipped its weights, its training summary, torch threads of its run:
# research/train_shipped_drafters.sh runs the kinds side by side on one thread each; stage 5
# ran alone on two, training_stages.json's wall_note)
STAGES = {
    1: ("215339b", "training_summary_stage1.json", 1),
    2: ("467679d", "training_summary_stage2.json", 1),
    3: ("89b28bd", "training_summary_stage3.json", 1),
    4: ("0ba6431", "training_summary_stage4.json", 1),
    5: ("ecc7157", "training_summary_stage5.json", 2),
    6: ("78859f3", "training_summary_stage6.json", 1),
    7: ("0a900ae", "training_summary.json", 1),
}
TREES = {
    "cpu": [],
    "paper": ["--total-tokens", "63", "--depth", "7", "--top-k", "10", "--mlp-top-k", "5", "--mlp-keep", "35",
              "--full-tree-tokens", "8"],
}


def stage_folder(work: Path, stage: int) -> Path:
    """The stage's shipped weights and config, written out of its commit."""
    folder = work / f"stage{stage}"
    if not (folder / "model.safetensors").exists():
        folder.mkdir(parents=True, exist_ok=True)
        commit = STAGES[stage][0]
        for name in ("config.json", "model.safetensors"):
            blob = subprocess.run(["git", "show", f"{commit}:{DRAFTER}/{name}"], cwd=ROOT, check=True,
                                  capture_output=True).stdout
            (folder / name).write_bytes(blob)
    return folder


def parse_extra(items: list[str]) -> dict[str, tuple[Path, int, float]]:
    extra = {}
    for item in items:
        name, _, rest = item.partition("=")
        try:
            folder, tokens, hours = rest.rsplit(":", 2)
            extra[name] = (Path(folder), int(tokens), float(hours))
        except ValueError:
            raise SystemExit(f"--extra wants NAME=FOLDER:TOKENS:CORE_HOURS, got {item!r}") from None
    return extra


def points(extra: dict) -> list[dict]:
    """One row per drafter: cumulative tokens and core-hours, held-out top-1 by position."""
    rows, tokens, hours = [], 0, 0.0
    for stage, (_, summary, threads) in STAGES.items():
        s = json.loads((RECORDS / summary).read_text())
        tokens += s["tokens_seen"]
        hours += s["wall_s"] * threads / 3600
        rows.append({"name": f"stage{stage}", "tokens": tokens, "core_hours": round(hours, 3),
                     "top1_by_position": [round(x, 4) for x in s["held_out"]["top1_by_position"]]})
    for name, (folder, more_tokens, more_hours) in extra.items():
        summary = folder / "training_summary.json"
        top1 = json.loads(summary.read_text())["held_out"]["top1_by_position"] if summary.exists() else []
        rows.append({"name": name, "tokens": tokens + more_tokens, "core_hours": round(hours + more_hours, 3),
                     "top1_by_position": [round(x, 4) for x in top1]})
    return rows


def run(args) -> None:
    work = ROOT / args.work
    folders = {f"stage{n}": stage_folder(work, n) for n in STAGES}
    folders.update({name: f for name, (f, _, _) in parse_extra(args.extra).items()})
    for tree, opts in TREES.items():
        for name, folder in folders.items():
            record = OUT / "bench" / f"{name}.{tree}.json"
            if record.exists():
                continue
            record.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "gumiho.bench", "--prompts", "benchmarks/prompts/mt_bench.jsonl",
                   "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens), "--methods", "gumiho",
                   "--drafter", str(folder), "--runtime", "torch", *opts, "--out", str(record), "--no-progress"]
            print("+", " ".join(cmd[1:]), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)


def svg(rows: list[dict]) -> str:
    """A small line plot: tau (both trees) and top-1 at position 1 against cumulative tokens."""
    w, h, left, right, top, bottom = 640, 360, 60, 60, 30, 50
    xs = [r["tokens"] / 1e6 for r in rows]
    x0, x1 = 0.0, max(xs) * 1.05

    def px(x):
        return left + (x - x0) / (x1 - x0) * (w - left - right)

    def py(y, lo, hi):
        return top + (1 - (y - lo) / (hi - lo)) * (h - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{w - right}" y1="{top}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">training tokens (millions, cumulative)</text>',
             f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">tau (MT-Bench)</text>',
             f'<text x="{w - 14}" y="{h / 2}" transform="rotate(90 {w - 14} {h / 2})" text-anchor="middle">'
             'held-out top-1 at position 1</text>']
    for t in range(0, int(x1) + 1):
        parts.append(f'<text x="{px(t):.1f}" y="{h - bottom + 16}" text-anchor="middle">{t}</text>')
    tau_lo, tau_hi = 1.0, 3.0
    for t in (1.0, 1.5, 2.0, 2.5, 3.0):
        parts.append(f'<text x="{left - 6}" y="{py(t, tau_lo, tau_hi) + 4:.1f}" text-anchor="end">{t}</text>')
    for t in (0.3, 0.4, 0.5, 0.6, 0.7):
        parts.append(f'<text x="{w - right + 6}" y="{py(t, 0.3, 0.7) + 4:.1f}">{t}</text>')
    series = [("tau_cpu", "#1f77b4", tau_lo, tau_hi, "tau, CPU tree"),
              ("tau_paper", "#d62728", tau_lo, tau_hi, "tau, paper's tree"),
              ("top1_1", "#2ca02c", 0.3, 0.7, "top-1 at position 1 (right axis)")]
    for i, (key, colour, lo, hi, label) in enumerate(series):
        pts = [(px(x), py(r[key], lo, hi)) for x, r in zip(xs, rows) if r.get(key) is not None]
        if pts:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                         + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
            parts += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>' for a, b in pts]
        parts.append(f'<rect x="{left + 10}" y="{top + 6 + 16 * i}" width="12" height="3" fill="{colour}"/>'
                     f'<text x="{left + 28}" y="{top + 11 + 16 * i}">{label}</text>')
    return "\n".join([*parts, "</svg>"]) + "\n"


# The targets on MT-Bench: tau with the default CPU tree and with the paper's tree.
TARGETS = {"cpu": 1.88, "paper": 2.5}


def extrapolation(rows: list[dict]) -> list[str]:
    """Least squares of tau on log(tokens) over the stages (a data-scaling line: each stage
    added new data, so the later points sit where returns flatten); where it reaches the
    target, in tokens and in core-hours at the stages' mean rate. A trend, not a promise."""
    import math

    out = []
    stages = [r for r in rows if r["name"].startswith("stage")]
    rate = stages[-1]["core_hours"] / stages[-1]["tokens"]  # core-hours per token over all stages
    for tree, target in TARGETS.items():
        pts = [(math.log(r["tokens"]), r[f"tau_{tree}"]) for r in stages if r.get(f"tau_{tree}") is not None]
        if len(pts) < 3:
            continue
        n = len(pts)
        mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
        b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        a = my - b * mx
        line = f"{tree} tree: tau = {a:.3f} + {b:.3f} ln(tokens) over {n} stages"
        if b > 0:
            need = math.exp((target - a) / b)
            line += (f"; tau {target} at about {need / 1e6:.0f}M tokens ({need / stages[-1]['tokens']:.1f} times "
                     f"the {stages[-1]['tokens'] / 1e6:.1f}M so far, about {need * rate:.0f} core-hours at the "
                     "stages' rate)")
        out.append(f"- {line}")
    return out


def report(args) -> str:
    rows = points(parse_extra(args.extra))
    for r in rows:
        for tree in TREES:
            f = OUT / "bench" / f"{r['name']}.{tree}.json"
            if f.exists():
                m = json.loads(f.read_text())["methods"]["gumiho"]
                r[f"tau_{tree}"] = round(m["tau"], 3)
                r[f"acceptance_{tree}"] = [round(x, 3) for x in m.get("acceptance_by_position", [])[:5]]
        r["top1_1"] = r["top1_by_position"][0] if r["top1_by_position"] else None
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "curve.json").write_text(json.dumps(rows, indent=1) + "\n")
    (ROOT / "docs/img").mkdir(parents=True, exist_ok=True)
    (ROOT / "docs/img/drafter_curve.svg").write_text(svg(rows))
    lines = ["| drafter | tokens (cumulative) | core-hours (cumulative) | top-1 d=1..3 (own held-out split) | "
             "tau, CPU tree | acceptance d=1..5, CPU tree | tau, paper's tree |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        top = " ".join(f"{x:.2f}" for x in r["top1_by_position"][:3])
        acc = " ".join(f"{x:.2f}" for x in r.get("acceptance_cpu", []))
        lines.append(f"| {r['name']} | {r['tokens']:,} | {r['core_hours']:.2f} | {top} | {r.get('tau_cpu', '')} | "
                     f"{acc} | {r.get('tau_paper', '')} |")
    lines += ["", *extrapolation(rows)]
    text = "\n".join(lines) + "\n"
    (OUT / "curve.md").write_text(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "report"):
        s = sub.add_parser(name)
        s.add_argument("--extra", action="append", default=[], help="NAME=FOLDER:TOKENS:CORE_HOURS")
        if name == "run":
            s.add_argument("--work", default="runs/curve", help="where the stages' weights are written")
            s.add_argument("--limit", type=int, default=10)
            s.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args(argv)
    if args.cmd == "run":
        run(args)
    else:
        print(report(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
