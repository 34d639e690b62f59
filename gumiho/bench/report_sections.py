"""BENCHMARKS.md's further sections, each from its own records: the copy proposer,
Gumiho against EAGLE-3, the engine peers, vLLM serving, and the 4-bit file's
exactness."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from ..engine.metrics import SPEEDUP_WALL_TIME, speedup
from .compare_drafters import bootstrap, compare
from .methods import COPY_METHODS, HF_METHODS
from .records import SET_NAMES, load, record_speedup
from .report_tables import setup_words, speedup_cell

# The copy section's rows: Gumiho alone, beside the copy proposer, the proposer alone, and the peers.
COPY_SECTION_METHODS = ("vanilla", "gumiho") + COPY_METHODS + HF_METHODS


def paired_ratio(rec: dict, num: str, den: str, n_boot: int = 2000, seed: int = 0) -> tuple:
    """``num``'s speed over ``den``'s (``den``'s summed wall time / ``num``'s, the
    same tokens on every prompt at temperature 0) with a 95% interval from a paired
    bootstrap over the record's prompts (both methods resampled together)."""
    # Rows as gumiho.engine.metrics.speedup takes them, ``den`` in vanilla's place; the wall-time
    # kind is asked for, as these records are greedy.
    rows = [(p["methods"][den].get("new_tokens"), p["methods"][den]["wall_s"],
             p["methods"][num].get("new_tokens"), p["methods"][num]["wall_s"]) for p in rec.get("per_prompt", [])
            if num in p["methods"] and den in p["methods"]]
    if not rows:
        return None, None, None
    return bootstrap(rows, lambda sample: speedup(sample, SPEEDUP_WALL_TIME), n_boot, seed)


def copy_section(folder: Path) -> list[str]:
    """BENCHMARKS.md's section on the copy proposer, from benchmarks/run_copy_benchmarks.sh's records."""
    runs = load(sorted(str(p) for p in folder.glob("*.json")))
    if not runs:
        return []
    first = runs[0][2]
    lines = ["## The copy proposer: a third guesser in the draft tree", "",
             f"`gumiho+copy` is the shipped Gumiho drafter with the copy proposer beside it "
             f"(gumiho.proposers.copying: the tokens that followed the longest earlier occurrence of the last "
             f"tokens, merged into the drafter's tree); `copy` is the proposer alone through the same loop; `hf` and `hf-lookup` are transformers' "
             f"`generate` on the same model object, plain and with its prompt-lookup decoding "
             f"(`prompt_lookup_num_tokens={first['methods'].get('hf-lookup', {}).get('hf_lookup_tokens')}`). "
             f"{first['prompts']} prompts per set, {first['max_new_tokens']} new tokens, greedy, the CPU tree, "
             f"{first.get('cpu') or first['device']}, in one process, interleaved prompt by prompt.", "",
             "| set | method | tau | tokens/s | speedup vs vanilla | accepted drafts by proposer |",
             "|---|---|---|---|---|---|"]
    for label, _, rec in runs:
        for m in COPY_SECTION_METHODS:
            r = rec["methods"].get(m)
            if r is None:
                continue
            by = r.get("accepted_by_proposer") or {}
            who = ", ".join(f"{h} {n}" for h, n in by.items())
            if r.get("copy_nodes"):
                who += f" ({by.get('copy', 0)} of {r['copy_nodes']} copied nodes)"
            lines.append(f"| {label} | {m} | {r['tau']:.2f} | {r['tokens_per_s']:.1f} | "
                         f"{speedup_cell(*record_speedup(rec, m))} | {who or '-'} |")
    lines += ["", "Paired speed ratios (wall time of the second over the first, summed over the set's prompts; "
              "95% interval from a paired bootstrap over prompts):", "",
              "| set | gumiho+copy vs gumiho | copy vs hf-lookup | gumiho+copy vs hf |", "|---|---|---|---|"]
    for label, _, rec in runs:
        cells = []
        for num, den in (("gumiho+copy", "gumiho"), ("copy", "hf-lookup"), ("gumiho+copy", "hf")):
            v, lo, hi = paired_ratio(rec, num, den)
            cells.append("-" if v is None else f"{v:.2f}x ({lo:.2f} to {hi:.2f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lossless = ", ".join(f"{label} {rec['lossless']['identical']}/{rec['lossless']['checked']}"
                         for label, _, rec in runs)
    lines += ["", f"Lossless check (every method, hf and hf-lookup included, against vanilla): {lossless}."]
    paper = load(sorted(str(p) for p in (folder / "paper_tree").glob("*.json")))
    if paper:
        p0 = paper[0][2]
        lines += ["", f"With the paper's tree (as on a GPU: "
                      f"{setup_words(p0).lstrip('; ')}), {p0['prompts']} prompts per set, tau (on a CPU such a tree "
                      f"is slow to verify, so its timings mean little; tau does not depend on the machine):", "",
                  "| set | gumiho tau | gumiho+copy tau | accepted copied tokens |", "|---|---|---|---|"]
        for label, _, rec in paper:
            g, c = rec["methods"].get("gumiho"), rec["methods"].get("gumiho+copy")
            if g and c:
                lines.append(f"| {label} | {g['tau']:.2f} | {c['tau']:.2f} | "
                             f"{(c.get('accepted_by_proposer') or {}).get('copy', 0)} |")
    lines += ["", "Reproduce: `bash benchmarks/run_copy_benchmarks.sh`, then this report.", ""]
    return lines


def _training_rows(folder: Path) -> list[str]:
    """A row per arm's training summary (training_summary_KIND.json in ``folder``)."""
    rows = []
    for path in sorted(folder.glob("training_summary_*.json")):
        t = json.loads(path.read_text())
        held = t.get("held_out") or {}
        top1 = ", ".join(f"{a:.2f}" for a in (held.get("top1_by_position") or [])[:7])
        rows.append(f"| {t['kind']} | {t['parameters'] / 1e6:.2f}M | {t['steps']} | {t['tokens_seen']:,} | "
                    f"{t['wall_s'] / 60:.0f} min | {held.get('loss', float('nan')):.3f} | {top1} |")
    if not rows:
        return []
    return ["| kind | parameters | steps | tokens seen | wall | held-out loss | held-out top-1 by position |",
            "|---|---|---|---|---|---|---|", *rows, ""]


def eagle3_section(folder: Path, resamples: int = 10000) -> list[str]:
    """BENCHMARKS.md's section comparing the gumiho and eagle3 kinds trained alike
    (benchmarks/run_eagle3_vs_gumiho.sh's records), with paired intervals."""
    paths = sorted(str(p) for p in folder.glob("*.json") if p.stem in SET_NAMES)
    if not paths:
        return []
    runs = load(paths)
    first = runs[0][2]
    lossless = ", ".join(f"{label} {rec['lossless']['identical']}/{rec['lossless']['checked']}"
                         for label, _, rec in runs)
    return ["## Gumiho vs EAGLE-3, trained alike", "",
            "The `gumiho` kind (2 serial positions + 5 MLP heads) and the `eagle3` kind (EAGLE-3's one layer over "
            "[embedding; fused state], all 7 positions serial, its own norm and LM head) trained from scratch on "
            "the same data, the same fused target layers, batches, steps, learning rate, seed and loss (EAGLE-3's "
            "cross-entropy, no hidden-state regression). Not the shipped Gumiho drafter, which saw about twenty "
            "times the tokens: this compares the two designs at one small budget.", "", *_training_rows(folder),
            f"On the six sets, {first['prompts']} prompts each, {first['max_new_tokens']} new tokens, greedy, the "
            f"CPU tree{setup_words(first)}, both drafters in one run per set, interleaved prompt by prompt "
            f"({first.get('cpu') or first['device']}). Paired tau difference, 95% interval from a bootstrap over "
            "prompts:", "",
            compare(paths, "gumiho", ("eagle3",), resamples), "",
            "tau, not speed, is the measure here: it does not depend on the machine (the engine-peer section times "
            "the shipped eagle3 drafter).", "",
            *([(folder / "notes.md").read_text().strip(), ""] if (folder / "notes.md").exists() else []),
            f"Lossless check (both against vanilla, every prompt): {lossless}.", "",
            "Reproduce: `bash benchmarks/run_eagle3_vs_gumiho.sh`, then this report.", ""]


def engines_section(path: Path) -> list[str]:
    """BENCHMARKS.md's engine-peer section, from ``python -m gumiho.bench.engines --out``."""
    from .engines import format_rows

    if not path.exists():
        return []
    rec = json.loads(path.read_text())
    rows = rec["rows"]
    single = [r for r in rows if r["batch"] == 1]
    best = max(single, key=lambda r: r["tokens_per_s"])
    ours = next((r for r in single if r["method"] == "gumiho+copy"), None)
    lines = ["## Engine peers: this engine beside vLLM and transformers", "",
             f"{rec['prompts']} prompts of {rec['prompts_file']}, {rec['max_new_tokens']} new tokens, greedy, "
             f"{rec.get('cpu') or 'CPU'}; one engine at a time, each given both cores ({rec['settings']['engine']}; "
             + (f"on the llama.cpp runtime, {rec['settings']['engine, llama.cpp runtime']}; "
                if "engine, llama.cpp runtime" in rec["settings"] else "")
             + f"vLLM: {rec['settings']['vllm']}). Batch 1 is one prompt per call, as a single user sends them; "
             "vLLM's larger batches repeat the prompts to fill each call.", "", format_rows(rows), ""]
    words = [f"At batch 1 the fastest configuration is {best['engine']} {best['method']} "
             f"({best['tokens_per_s']:.1f} tokens/s)."]
    if ours is not None:
        beaten = [r for r in single if r is not ours and r["tokens_per_s"] >= ours["tokens_per_s"]]
        four_bit = [r for r in beaten if "llama.cpp" in r["engine"]]
        others = [r for r in beaten if r not in four_bit]
        name = lambda r: f"{r['engine']} {r['method']} ({r['tokens_per_s']:.1f})"  # noqa: E731
        if not beaten:
            words.append("Gumiho with copying is ahead of every other configuration at batch 1.")
        elif not others:
            words.append("Among the engines that run the model in float32, Gumiho with copying is ahead at batch 1; "
                         "the 4-bit file run as stored is faster: " + ", ".join(map(name, four_bit)) + ".")
        else:
            words.append("Gumiho with copying is not ahead of " + ", ".join(map(name, beaten)) + " at batch 1.")
        over = [r for r in rows if r["engine"] == "vLLM" and r["batch"] > 1 and r["tokens_per_s"] > ours["tokens_per_s"]]
        if over:
            first = min(over, key=lambda r: r["batch"])
            words.append(f"vLLM overtakes it in throughput from batch {first['batch']} "
                         f"({first['tokens_per_s']:.1f} tokens/s over the batch, "
                         f"{first['tokens_per_s'] / ours['tokens_per_s']:.1f}x Gumiho with copying at batch 1).")
            if not others:
                words.append(f"So: for one user at a time on a CPU, this engine (vanilla on the llama.cpp runtime, "
                             f"its default there, for raw speed; Gumiho with copying in float32 to see drafting "
                             f"pay); once about "
                             f"{first['batch']} requests arrive together, a serving engine, where batching pays "
                             f"more than drafting does.")
    lines += [" ".join(words), ""]
    return lines


def serving_section(path: Path) -> list[str]:
    """BENCHMARKS.md's serving section: vLLM vanilla, with the shipped eagle3 drafter and
    with the shipped gumiho drafter (the vllm-gumiho plugin) at each batch size, from
    ``python -m gumiho.bench.engines --vllm-only --out``. Each row's ratio is to vLLM
    vanilla at the same batch size, in the same run."""
    if not path.exists():
        return []
    rec = json.loads(path.read_text())
    rows = [r for r in rec["rows"] if r["engine"] == "vLLM"]
    vanilla = {r["batch"]: r["tokens_per_s"] for r in rows if r["method"] == "vanilla"}
    lines = ["## Serving with vLLM: no drafter, the eagle3 drafter, the Gumiho drafter", "",
             f"{rec['prompts']} prompts of {rec['prompts_file']}, {rec['max_new_tokens']} new tokens, greedy, "
             f"{rec.get('cpu') or 'CPU'}; vLLM: {rec['settings']['vllm']}; drafters: "
             f"{rec['settings'].get('vllm drafters', '-')}. One OpenAI-compatible vLLM server per method, all "
             "started first; the same greedy requests sent to each in turn after a warm-up (gumiho.bench.served): "
             "batch 1 is one prompt per request, a batch of B is B requests at once (the prompts repeated). Ratios "
             "are to vLLM vanilla at the same batch size, in the same run."
             + (f" {rec['note']}" if rec.get("note") else ""), "",
             "| method | batch | tokens/s | vs vanilla, same batch | same tokens as vanilla | accepted per draft "
             "| accepted at positions 1.. (share of drafts) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        base = vanilla.get(r["batch"])
        ratio = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
        per = ", ".join(f"{x:.2f}" for x in r.get("accepted_per_position") or []) or "-"
        apd = f"{r['accepted_per_draft']:.2f}" if "accepted_per_draft" in r else "-"
        same = {True: "yes", False: "no", None: "-"}[r.get("identical_to_vanilla")]
        lines.append(f"| {r['method']} | {r['batch']} | {r['tokens_per_s']:.1f} | {ratio} | {same} | {apd} | {per} |")
    tps = {(r["method"], r["batch"]): r["tokens_per_s"] for r in rows}
    words = []
    for batch in sorted(vanilla):
        g, e = tps.get(("gumiho", batch)), tps.get(("eagle3", batch))
        if g is None:
            continue
        says = [f"{g / vanilla[batch]:.2f}x vanilla ({'ahead' if g > vanilla[batch] else 'not ahead'})"]
        if e:
            says.append(f"{g / e:.2f}x the eagle3 drafter ({'ahead' if g > e else 'not ahead'})")
        words.append(f"at batch {batch} the Gumiho drafter runs at {' and '.join(says)}")
    if words:
        lines += ["", "In this run, " + "; ".join(words) + "."]
    lines += ["", "Reproduce: `python -m gumiho.bench.engines --vllm-only --prompts benchmarks/prompts/mt_bench.jsonl "
              "--limit 10 --max-new-tokens 64 --out benchmarks/engines/mt_bench_vllm.json`. "
              "How to serve a drafter: [docs/serving.md](docs/serving.md).", ""]
    return lines


def llamacpp_server_section(path: Path) -> list[str]:
    """BENCHMARKS.md's section on llama.cpp's own server and drafting beside this engine
    on the 4-bit file as stored, from ``python -m gumiho.bench.engines --llamacpp-only
    --out``. Each row's ratio is to its own engine's vanilla, in the same run."""
    if not path.exists():
        return []
    from .engines import format_rows

    rec = json.loads(path.read_text())
    lines = ["## llama.cpp's own server and drafting beside this engine, the 4-bit file as stored", "",
             f"{rec['prompts']} prompts of {rec['prompts_file']}, {rec['max_new_tokens']} new tokens, greedy, batch 1, "
             f"{rec['threads']} threads everywhere, {rec.get('cpu') or 'CPU'}. "
             + " ".join(f"{k}: {v}." for k, v in rec["settings"].items())
             + " This engine's rows ran first, interleaved among themselves; then the three servers and this "
               "engine's vanilla once more, interleaved prompt by prompt (the row \"beside the servers\")."
             + (f" {rec['note']}" if rec.get("note") else ""), "", format_rows(rec["rows"]), ""]
    same = [f"{r['method']}: {'yes' if r['identical_to_vanilla'] else 'no'}" for r in rec["rows"]
            if "identical_to_vanilla" in r]
    if same:
        lines += [f"llama-server's tokens identical to its own vanilla's: {', '.join(same)}.", ""]
    for key, t in (rec.get("targets") or {}).items():
        lines += [f"This engine's {t['ours']} over llama-server's fastest row ({t['theirs']}), timed side by side: "
                  f"{t['value']:.3f}x (95% interval over prompts {t['low']:.3f}-{t['high']:.3f}); target "
                  f"{t['target']}: {'met' if t['met'] else 'not met'}.", ""]
    lines += ["Reproduce: `python -m gumiho.bench.engines --llamacpp-only --prompts benchmarks/prompts/mt_bench.jsonl "
              "--limit 10 --max-new-tokens 64 --out benchmarks/engines/mt_bench_llamacpp.json`. "
              "How to serve an eagle3 drafter with llama.cpp: [docs/serving.md](docs/serving.md).", ""]
    return lines


def _fastest_row(text: str) -> str:
    """Which row of a research/runtime_trees.py output decodes fastest, in words."""
    rows = re.findall(r"^(\S.*?)\s+([\d.]+) tokens/s", text, flags=re.M)
    if not rows:
        return "no rows"
    name, rate = max(rows, key=lambda r: float(r[1]))
    return f"fastest: {name.strip()}, {rate} tokens/s"


def asstored_section(folder: Path, engines: Optional[Path]) -> list[str]:
    """BENCHMARKS.md's section on the GGUF run as stored (gumiho.runtimes.llamacpp): the
    runtime's yardsticks from the engine-peer record, the exactness and verify-cost
    records of ``python -m gumiho.bench.asstored``, and a cost-aware bench run."""
    lines = ["## The GGUF as stored: the llama.cpp runtime", ""]
    if engines and engines.exists():
        rec = json.loads(engines.read_text())
        for weights, got in (rec.get("targets") or {}).items():
            if not got.get("runtime_vanilla_over_transformers"):
                continue
            lines += [f"From the engine-peer record above, the llama.cpp runtime on {weights}: its vanilla is "
                      f"{got['runtime_vanilla_over_transformers']:.2f}x transformers' `generate` and "
                      f"{got['runtime_vanilla_over_llamacpp_shipped']:.2f}x llama.cpp with llama-cpp-python's "
                      f"defaults on the shipped Q4_1 file.", ""]
            lines += [f"- {key.replace('_', ' ')}: {t['value']} (target {t['target']}: "
                      f"{'met' if t['met'] else 'not met'})" for key, t in got.items() if isinstance(t, dict)]
            lines.append("")
        if rec.get("verify_cost"):
            from .layouts import format_curves

            lines += ["Verify cost curves of every candidate layout (same run, 200-token context, medians):", "",
                      format_curves(rec["verify_cost"]), ""]
    for path in sorted(folder.glob("*.json")):
        rec = json.loads(path.read_text())
        if "exactness" in rec:
            ex = rec["exactness"]
            lines += [f"`{path}` (`python -m gumiho.bench.asstored`, {len(ex['prompts'])} prompts of "
                      f"{rec['prompts_file']}, {rec['max_new_tokens']} new tokens): against the float32 target along "
                      f"its own greedy continuation, one token per forward, the llama.cpp runtime's greedy choice "
                      f"differs at {ex['greedy_choices_differing']} of {ex['positions']} positions "
                      f"({100 * ex['share_differing']:.1f}%), its logits by at most {ex['max_abs_logit_error']:.2f} "
                      f"({ex['mean_abs_logit_error']:.3f} on average); free-running, the texts were identical on "
                      f"{ex['texts_identical']} of {len(ex['prompts'])} prompts.", ""]
            cost = rec["verify_cost"]
            n = len(next(iter(cost.values()))["ms"])
            lines += ["| ms of a verify over k tokens | " + " | ".join(str(k) for k in range(1, n + 1)) + " |",
                      "|---|" + "---|" * n]
            for name, c in cost.items():
                lines.append(f"| {name} runtime | " + " | ".join(f"{x:.1f}" for x in c["ms"]) + " |")
            lines.append("")
        elif "methods" in rec:
            m = rec["methods"]
            words = ", ".join(f"{name} {v['tokens_per_s']:.1f} tokens/s (tau {v['tau']:.2f}, "
                              f"{v['mean_drafted']:.2f} nodes drafted per step"
                              + (f", {v['speedup_vs_vanilla']:.2f}x vanilla" if v.get("speedup_vs_vanilla") else "")
                              + ")" for name, v in m.items())
            lines += [f"`{path}` (`python -m gumiho.bench --runtime {rec.get('runtime')}`, {rec['prompts']} prompts, "
                      f"the cost-aware tree): {words}.", ""]
    for path in sorted(folder.glob("runtime_trees-*.txt")):
        text = path.read_text().strip()
        lines += [f"`{path}` (`python research/runtime_trees.py --runtime "
                  f"{path.stem.removeprefix('runtime_trees-')}`: which tree each runtime wants; "
                  f"{_fastest_row(text)}):", "", "```", *text.splitlines(), "```", ""]
    lines += ["How it verifies a tree, why it is exact against itself and what it does not run: "
              "[docs/llamacpp.md](docs/llamacpp.md).", ""]
    return lines
