"""The recipe ablation: which training recipe makes the better Gumiho drafter, at an
equal small budget. Four arms, all of kind gumiho, same data, same steps, same seed:

    paper      the paper's loss (SmoothL1 regression + 0.1 soft cross-entropy), last layer
    fused      + fused target features (layers 2, N/2, N-3), same loss
    ce         + cross-entropy only (no regression), last layer
    fused-ce   both

``--arms`` may add ``ce-top1`` (cross-entropy only plus a hard top-1 term), ``ce-topk``
(plus HASS's top-10 distillation term), ``ce-accept`` (plus one minus the acceptance rate
of a sampled draft, sum(min(p, q))), and the
one-layer all-serial EAGLE-2 baseline the paper compares Gumiho with, trained the same
way: ``eagle`` (the paper's loss) and ``eagle-ce`` (cross-entropy only), so "Gumiho vs
EAGLE-2" is measured like for like. ``serial`` and ``parallel`` (and ``fused-serial``,
``fused-parallel``, ``fused-eagle``) train the other kinds with the same recipes.

    python research/recipe_ablation.py train --data DIRS --out runs/ablation --max-steps 300
    python research/recipe_ablation.py bench --out runs/ablation --limit 20
    python research/recipe_ablation.py report --out runs/ablation

``train`` runs ``python -m gumiho.train`` per arm (resumable: rerun to continue);
``bench`` runs ``python -m gumiho.bench`` per arm on MT-Bench with the CPU tree and the
paper's tree (records under OUT/bench/); ``report`` prints a markdown table: per-position
held-out top-1 agreement (training's held-out split, the same for every arm) and
MT-Bench tau with the difference to the ``paper`` arm and its paired 95% bootstrap
interval over prompts (every arm decodes the same prompts to the same greedy text).

``kinds`` compares the four kinds trained with one recipe: one bench run per prompt set
(default the six of benchmarks/prompts) with vanilla and all four methods interleaved
per prompt, records under OUT/kinds/ (``--name``); python -m gumiho.bench.compare_drafters gives the paired tau
differences and, with --speedup, each kind's speedup:

    python research/recipe_ablation.py train --data DIRS --out runs/kinds --max-steps 480 \
        --arms fused,fused-eagle,fused-serial,fused-parallel
    python research/recipe_ablation.py kinds --out runs/kinds --limit 20
    python -m gumiho.bench.compare_drafters runs/kinds/kinds/*.json

``check`` puts one kind's arm against the drafter it would replace (by default the shipped
one), on the six sets and the probe sets, and prints the paired tau comparison and both
speedups:

    python research/recipe_ablation.py check --out runs/kinds --kind gumiho --limit 20

``widen`` and ``continued`` continue the shipped Gumiho drafter on new data: ``widen`` widened
to fused features (layers 2, 15 and 30 of SmolLM2-135M's 30, the last being the state it
reads now, so it starts as the same drafter: gumiho.train.widen), ``continued`` reading the
last state as before, the like-for-like control. ``check --check-arms widen,continued``
checks both against the shipped drafter and prints the paired comparison of the two.
``widen-2`` continues the trained ``widen`` arm (OUT/widen) once more, on more data.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from gumiho.bench import DRAFTER_FLAGS  # each kind's method and its drafter option
from gumiho.bench.compare_drafters import speedups, tau_difference
from gumiho.bench.compare_records import compare as compare_records
from gumiho.bench.compare_records import per_prompt
from gumiho.bench.records import SET_NAMES  # the six sets, in table order
from gumiho.files import LibraryPaths, configure

ROOT = Path(__file__).resolve().parent.parent
ARMS = {
    "paper": [],
    "fused": ["--feature-layers", "default"],
    "ce": ["--reg-weight", "0", "--ce-weight", "1"],
    "fused-ce": ["--feature-layers", "default", "--reg-weight", "0", "--ce-weight", "1"],
    "ce-top1": ["--reg-weight", "0", "--ce-weight", "1", "--top1-weight", "0.5"],
    "ce-topk": ["--reg-weight", "0", "--ce-weight", "1", "--topk-weight", "1", "--topk", "10"],
    "ce-accept": ["--reg-weight", "0", "--ce-weight", "1", "--accept-weight", "1"],
    "eagle": ["--kind", "eagle"],
    "eagle-ce": ["--kind", "eagle", "--reg-weight", "0", "--ce-weight", "1"],
    # The other kinds with one recipe, for the comparison of kinds (``kinds``).
    "serial": ["--kind", "serial"],
    "parallel": ["--kind", "parallel"],
    "fused-serial": ["--kind", "serial", "--feature-layers", "default"],
    "fused-parallel": ["--kind", "parallel", "--feature-layers", "default"],
    "fused-eagle": ["--kind", "eagle", "--feature-layers", "default"],
    # The shipped Gumiho drafter continued on new data, widened to fused features or not.
    # Cross-entropy only, as the shipped drafter's last stage trained: a change of loss would
    # move both arms for a reason of its own.
    "widen": ["--init-from", "assets/drafters/smollm2-135m-gumiho", "--feature-layers", "2,15,30",
              "--reg-weight", "0", "--ce-weight", "1"],
    "continued": ["--init-from", "assets/drafters/smollm2-135m-gumiho", "--reg-weight", "0", "--ce-weight", "1"],
    # The levers of issue "drafter", each from the shipped drafter on the same new data
    # (research/drafter_levers.sh): training-time test past the drafted depth, the
    # acceptance (LK) loss -log sum min(p, q), and both.
    "continued-ttt": ["--init-from", "assets/drafters/smollm2-135m-gumiho", "--reg-weight", "0", "--ce-weight", "1",
                      "--ttt-steps", "2"],
    "continued-lk": ["--init-from", "assets/drafters/smollm2-135m-gumiho", "--reg-weight", "0", "--ce-weight", "1",
                     "--lk-weight", "1"],
    "continued-both": ["--init-from", "assets/drafters/smollm2-135m-gumiho", "--reg-weight", "0", "--ce-weight", "1",
                       "--ttt-steps", "2", "--lk-weight", "1"],
    # The shipped drafter itself, untrained here: the arm every lever must beat (never trained).
    "shipped": None,
    # The widened drafter continued once more, on more data ({out}: the arms' folder, --out).
    "widen-2": ["--init-from", "{out}/widen", "--feature-layers", "2,15,30", "--reg-weight", "0", "--ce-weight", "1"],
}
SHIPPED = "assets/drafters/smollm2-135m-gumiho"
DEFAULT_KINDS = "gumiho=fused,serial=fused-serial,parallel=fused-parallel,eagle=fused-eagle"
DEFAULT_ARMS = "paper,fused,ce,fused-ce"
TREES = {
    "cpu": [],  # TreeSettings.for_device("cpu")
    "paper": ["--total-tokens", "63", "--depth", "7", "--top-k", "10", "--mlp-top-k", "5", "--mlp-keep", "35",
              "--full-tree-tokens", "8"],
}


def arm_list(text: str) -> list[str]:
    arms = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise SystemExit(f"unknown arm(s) {bad}; choose from {', '.join(ARMS)}")
    return arms


def arm_kind(arm: str) -> str:
    """The drafter kind an arm trains (gumiho unless its options say otherwise)."""
    opts = ARMS[arm] or []
    return opts[opts.index("--kind") + 1] if "--kind" in opts else "gumiho"


def kind_arms(text: str) -> dict[str, str]:
    """``kind=arm,...`` as {kind: arm}, each arm of that kind."""
    pairs = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        kind, _, arm = item.partition("=")
        if kind not in DRAFTER_FLAGS or not arm:
            raise SystemExit(f"--kinds wants kind=arm pairs, kind one of {', '.join(DRAFTER_FLAGS)}; got {item!r}")
        arm_list(arm)
        if arm_kind(arm) != kind:
            raise SystemExit(f"arm {arm!r} trains kind {arm_kind(arm)}, not {kind}")
        pairs[kind] = arm
    return pairs


def arm_path(out: str | Path, arm: str) -> Path:
    """Where an arm's drafter lies: its training folder, or the shipped drafter's."""
    return ROOT / SHIPPED if ARMS[arm] is None else Path(out) / arm


def train(args) -> None:
    for arm in arm_list(args.arms):
        if ARMS[arm] is None:
            continue
        kind = [] if "--kind" in ARMS[arm] else ["--kind", "gumiho"]
        # An arm that names no layers reads the last state: the trainer's default (fused)
        # must not decide an arm.
        layers = [] if "--feature-layers" in ARMS[arm] else ["--feature-layers", "none"]
        cmd = [sys.executable, "-m", "gumiho.train", *kind, "--data", args.data,
               "--out", str(Path(args.out) / arm), "--max-steps", str(args.max_steps), "--epochs", "100",
               "--batch-tokens", str(args.batch_tokens), "--lr", str(args.lr), "--warmup-steps", "20",
               "--draft-vocab", "8192", "--checkpoint-every", "50", "--eval-fraction", "0.05",
               "--seed", str(args.seed), "--features", args.features, *layers,
               *(opt.format(out=args.out) for opt in ARMS[arm])]
        print("+", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)


def bench(args) -> None:
    out = Path(args.out) / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for arm in arm_list(args.arms):
        for tree in args.trees.split(","):
            method = arm_kind(arm)
            flag = DRAFTER_FLAGS[method]
            cmd = [sys.executable, "-m", "gumiho.bench", "--prompts", args.prompts, "--limit", str(args.limit),
                   "--max-new-tokens", str(args.max_new_tokens), "--methods", f"vanilla,{method}",
                   flag, str(arm_path(args.out, arm)), *TREES[tree], "--out", str(out / f"{arm}.{tree}.json"),
                   "--no-progress"]
            print("+", " ".join(cmd[1:]), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)


def kinds(args) -> None:
    """One bench run per prompt set with vanilla and every kind's drafter, interleaved per
    prompt, so that taus and speedups of the kinds are paired (records under OUT/kinds/,
    read by python -m gumiho.bench.compare_drafters, with and without --speedup)."""
    pairs = kind_arms(args.kinds)
    out = Path(args.out) / args.name
    out.mkdir(parents=True, exist_ok=True)
    drafters = [x for kind, arm in pairs.items() for x in (DRAFTER_FLAGS[kind], str(Path(args.out) / arm))]
    for name in args.sets.split(","):
        cmd = [sys.executable, "-m", "gumiho.bench", "--prompts", f"benchmarks/prompts/{name}.jsonl",
               "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens),
               "--methods", ",".join(["vanilla", *pairs]), *drafters, *TREES[args.tree],
               "--out", str(out / f"{name}.json"), "--no-progress"]
        print("+", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)


def check(args) -> None:
    """One kind's trained arm against the drafter it would replace (``--shipped``): per
    prompt set (the six and the probe sets), one bench run with vanilla for each of the
    two, so each speedup is measured in its own interleaved run, then MT-Bench with the
    paper's tree; records under OUT/check-KIND/{shipped,new}[-paper-tree]/SET.json (a
    record already there is kept, so a rerun continues). Prints the paired tau
    comparison (python -m gumiho.bench.compare_records) and both drafters' speedups. With
    ``--check-arms A,B,...`` each of those arms is checked, its records under its own
    name, and the first is also compared with each of the others."""
    if args.check_arms:
        arms = arm_list(args.check_arms)
        wrong = [a for a in arms if arm_kind(a) != args.kind]
        if wrong:
            raise SystemExit(f"arm(s) {wrong} do not train kind {args.kind}")
        named = {arm: arm for arm in arms}
    else:
        arm = kind_arms(args.kinds).get(args.kind)
        if arm is None:
            raise SystemExit(f"--kinds names no arm for kind {args.kind}")
        named = {"new": arm}
    drafters = {"shipped": args.shipped.format(kind=args.kind),
                **{who: str(Path(args.out) / arm) for who, arm in named.items()}}
    root = Path(args.out) / f"check-{args.kind}"
    sets = ([ROOT / "benchmarks/prompts" / f"{n}.jsonl" for n in SET_NAMES]
            + sorted((ROOT / "benchmarks/probe").glob("*.jsonl")))
    mt_bench = [ROOT / "benchmarks/prompts/mt_bench.jsonl"]
    for tree, files, suffix in (("cpu", sets, ""), ("paper", mt_bench, "-paper-tree")):
        for prompts in files:
            for who, drafter in drafters.items():  # the two drafters one after the other, set by set
                record = root / f"{who}{suffix}" / f"{prompts.stem}.json"
                if record.exists():
                    continue
                record.parent.mkdir(parents=True, exist_ok=True)
                cmd = [sys.executable, "-m", "gumiho.bench", "--prompts", str(prompts.relative_to(ROOT)),
                       "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens),
                       "--methods", f"vanilla,{args.kind}", DRAFTER_FLAGS[args.kind], drafter, *TREES[tree],
                       "--out", str(record), "--no-progress"]
                print("+", " ".join(cmd[1:]), flush=True)
                subprocess.run(cmd, check=True, cwd=ROOT)
        for who in named:
            print(compare_records(root / f"shipped{suffix}", root / f"{who}{suffix}", [args.kind]))
        first, *others = named
        for who in others:
            print(f"{first} (new) against {who} (old):")
            print(compare_records(root / f"{who}{suffix}", root / f"{first}{suffix}", [args.kind]))
    for who in drafters:
        print(f"speedup over vanilla, {who} {args.kind} drafter:")
        print(speedups(sorted((root / who).glob("*.json")), (args.kind,)))


def taus(args) -> None:
    """Every arm's drafter on each of the six sets in one process per set (the target loads
    once; tau and acceptance do not depend on the clock): per prompt, vanilla's greedy text,
    then each arm decoding the same prompt with the CPU tree, its new tokens and target
    forwards, and whether its text is vanilla's. Records OUT/taus/SET.json; one already
    there is kept, so a rerun continues."""
    from gumiho import GenerationSettings, TreeSettings, load_drafter, load_target, stream, summarize
    from gumiho.files.prompt_files import read_prompts

    arms = arm_list(args.arms)
    folder = Path(args.out) / "taus"
    folder.mkdir(parents=True, exist_ok=True)
    target = drafters = None
    for name in args.sets.split(","):
        record = folder / f"{name}.json"
        if record.exists():
            continue
        if target is None:
            target = load_target(None, runtime="torch")
            drafters = {arm: load_drafter(str(arm_path(args.out, arm)), target) for arm in arms}
        settings = GenerationSettings(max_new_tokens=args.max_new_tokens, tree=TreeSettings.for_device("cpu"))
        rows = []
        for i, conv in enumerate(read_prompts(str(ROOT / "benchmarks/prompts" / f"{name}.jsonl"))[:args.limit]):
            ids = target.encode(conv.user_turns[0])
            vanilla = [t for ev in stream(target, ids, None, settings) for t in ev.tokens]
            row = {"question_id": i, "arms": {}}
            for arm, drafter in drafters.items():
                steps = list(stream(target, ids, drafter, settings))
                st = summarize(steps)
                row["arms"][arm] = {"new_tokens": st.new_tokens, "target_forwards": st.target_forwards,
                                    "identical_to_vanilla": [t for ev in steps for t in ev.tokens] == vanilla}
            rows.append(row)
            print(name, i, {a: round(r["new_tokens"] / r["target_forwards"], 2) for a, r in row["arms"].items()},
                  flush=True)
        record.write_text(json.dumps({"set": name, "max_new_tokens": args.max_new_tokens, "tree": "cpu",
                                      "runtime": "torch", "arms": arms, "per_prompt": rows}, indent=1) + "\n")


def taus_report(out: Path, arms: list[str], baseline: str) -> list[str]:
    """Per set and pooled over the six: each arm's tau and its paired difference to
    ``baseline`` (95% bootstrap interval over prompts), and whether every text was vanilla's."""
    records = {n: json.loads((out / "taus" / f"{n}.json").read_text()) for n in SET_NAMES
               if (out / "taus" / f"{n}.json").exists()}
    if not records:
        return []
    lines = [f"The six sets, CPU tree: tau by set, and the pooled difference to `{baseline}` (paired 95% "
             "bootstrap interval over all prompts of the sets)", "",
             "| arm | " + " | ".join(records) + f" | pooled vs {baseline} | texts identical to vanilla |",
             "|---|" + "---|" * len(records) + "---|---|"]

    def counts(arm):
        return {(n, r["question_id"]): (r["arms"][arm]["new_tokens"], r["arms"][arm]["target_forwards"])
                for n, rec in records.items() for r in rec["per_prompt"] if arm in r["arms"]}

    base = counts(baseline)
    for arm in arms:
        mine = counts(arm)
        if not mine:
            continue
        cells = []
        for n in records:
            pairs = [v for k, v in mine.items() if k[0] == n]
            cells.append(f"{sum(x for x, _ in pairs) / sum(f for _, f in pairs):.3f}" if pairs else "")
        rows = [(*mine[k], *base[k]) for k in mine if k in base]
        diff = ""
        if arm != baseline and rows:
            d, lo, hi = tau_difference(rows)
            diff = f"{d:+.3f} ({lo:+.3f} to {hi:+.3f}), {len(rows)} prompts"
        same = [r["arms"][arm]["identical_to_vanilla"] for rec in records.values() for r in rec["per_prompt"]
                if arm in r["arms"]]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {diff} | {sum(same)}/{len(same)} |")
    return [*lines, ""]


def drafted_method(record: dict) -> str:
    """The record's speculative method (each arm's record holds vanilla and one other)."""
    return next(m for m in record["methods"] if m != "vanilla")


def report(args) -> str:
    out = Path(args.out)
    arms = arm_list(args.arms)
    lines = []
    summaries = {a: json.loads((out / a / "training_summary.json").read_text()) for a in arms
                 if (out / a / "training_summary.json").exists()}
    if summaries:
        depth = max(len(s["held_out"].get("top1_by_position", [])) for s in summaries.values())
        lines += ["Held-out top-1 agreement with the target by draft position (conditional, true prefix):", "",
                  "| arm | steps | tokens seen | " + " | ".join(f"d={d}" for d in range(1, depth + 1))
                  + " | tau estimate (chain) |",
                  "|---|---|---|" + "---|" * depth + "---|"]
        for a, s in summaries.items():
            top1 = s["held_out"].get("top1_by_position", [])
            lines.append(f"| {a} | {s['steps']} | {s['tokens_seen']:,} | " + " | ".join(f"{x:.3f}" for x in top1)
                         + f" | {s['held_out'].get('tau_estimate', float('nan')):.2f} |")
        lines.append("")
    for tree in args.trees.split(","):
        recs = {a: json.loads((out / "bench" / f"{a}.{tree}.json").read_text()) for a in arms
                if (out / "bench" / f"{a}.{tree}.json").exists()}
        if not recs:
            continue
        b = args.baseline
        lines += [f"MT-Bench, {tree} tree: tau and the difference to `{b}` (paired 95% bootstrap interval over "
                  f"prompts)", "", f"| arm | prompts | tau | acceptance at d=1..5 | vs {b} | lossless |",
                  "|---|---|---|---|---|---|"]
        base = per_prompt(recs[b], drafted_method(recs[b])) if b in recs else None
        for a, rec in recs.items():
            m = rec["methods"][drafted_method(rec)]
            acc = " ".join(f"{x:.2f}" for x in m.get("acceptance_by_position", [])[:5])
            diff = ""
            if base is not None and a != b:
                mine = per_prompt(rec, drafted_method(rec))
                rows = [(*mine[q], *base[q]) for q in mine if q in base]
                d, lo, hi = tau_difference(rows)
                diff = f"{d:+.3f} ({lo:+.3f} to {hi:+.3f})"
            lossless = rec.get("lossless")
            lines.append(f"| {a} | {len(rec['per_prompt'])} | {m['tau']:.3f} | {acc} | {diff} | {lossless} |")
        lines.append("")
    lines += taus_report(out, arms, args.baseline)
    return "\n".join(lines)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("train", "bench", "report", "kinds", "check", "taus"):
        s = sub.add_parser(name)
        s.add_argument("--out", required=True)
        s.add_argument("--arms", default=DEFAULT_ARMS)
        if name == "train":
            s.add_argument("--data", required=True,
                           help="shards with cached fused features (gumiho.train.features); arms that read the last "
                                "state alone also train on distilled shards")
            s.add_argument("--max-steps", type=int, default=300)
            s.add_argument("--batch-tokens", type=int, default=2048)
            s.add_argument("--lr", type=float, default=8e-4)
            s.add_argument("--seed", type=int, default=0)
            s.add_argument("--features", default="cached", choices=["cached", "on-the-fly"],
                           help="where the target's states come from (gumiho.train --features); on-the-fly needs "
                                "no feature cache for the fused arms")
        elif name == "check":
            s.add_argument("--kind", default="gumiho", choices=list(DRAFTER_FLAGS))
            s.add_argument("--kinds", default=DEFAULT_KINDS, help="kind=arm pairs: the arm checked for --kind")
            s.add_argument("--shipped", default="assets/drafters/smollm2-135m-{kind}",
                           help="the drafter the arm is checked against ({kind}: --kind)")
            s.add_argument("--check-arms", default=None,
                           help="arms of --kind to check (records under their names), instead of the --kinds one")
        elif name == "taus":
            s.add_argument("--sets", default=",".join(SET_NAMES), help="prompt sets of benchmarks/prompts")
        elif name == "kinds":
            s.add_argument("--kinds", default=DEFAULT_KINDS, help="kind=arm pairs: which trained arm drafts for "
                           "each kind's method")
            s.add_argument("--sets", default=",".join(SET_NAMES), help="prompt sets of benchmarks/prompts")
            s.add_argument("--tree", default="cpu", choices=list(TREES))
            s.add_argument("--name", default="kinds", help="records go to OUT/NAME/SET.json")
        else:
            s.add_argument("--trees", default="cpu,paper")
        if name == "report":
            s.add_argument("--baseline", default="paper", help="the arm every other arm is compared with")
        if name == "bench":
            s.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
        if name in ("bench", "kinds", "check", "taus"):
            s.add_argument("--limit", type=int, default=20)
            s.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args(argv)
    if args.cmd == "train":
        train(args)
    elif args.cmd == "bench":
        bench(args)
    elif args.cmd == "kinds":
        kinds(args)
    elif args.cmd == "check":
        check(args)
    elif args.cmd == "taus":
        taus(args)
    else:
        print(report(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
