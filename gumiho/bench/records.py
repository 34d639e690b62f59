"""Bench records read back: the JSON files ``python -m gumiho.bench --out`` writes, named
after their prompt set (mt_bench.json, ...), in table order, and each method's speedup
as gumiho.engine.metrics computes it. The report and the paired comparisons read them alike."""
from __future__ import annotations

import json
from pathlib import Path

from ..engine.metrics import SPEEDUP_WALL_TIME, speedup, speedup_kind

SET_NAMES = {"mt_bench": "MT-Bench", "humaneval": "HumanEval", "gsm8k": "GSM8K", "alpaca": "Alpaca",
             "qa": "Natural Questions", "sum": "CNN/DM"}


def load(paths):
    """(set label, set name, record) of each bench JSON file, the six sets in SET_NAMES'
    order and any other set after them."""
    runs = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        name = Path(p).stem
        runs.append((SET_NAMES.get(name, name), name, rec))
    order = list(SET_NAMES)
    runs.sort(key=lambda r: order.index(r[1]) if r[1] in order else 99)
    return runs


def speedup_pairs(rec: dict, method: str) -> list[tuple]:
    """(vanilla new tokens, vanilla wall s, ``method``'s new tokens, its wall s) per
    prompt that both ran: what gumiho.engine.metrics.speedup takes. A token count a record
    did not keep is None (counted as equal)."""
    return [(p["methods"]["vanilla"].get("new_tokens"), p["methods"]["vanilla"]["wall_s"],
             p["methods"][method].get("new_tokens"), p["methods"][method]["wall_s"])
            for p in rec.get("per_prompt", []) if "vanilla" in p["methods"] and method in p["methods"]]


def record_speedup(rec: dict, method: str) -> tuple:
    """(speedup, kind) of ``method`` in a bench record. A record that says its kind is
    taken as it is; an older one divided wall times whatever the texts' lengths, so
    where its per-prompt token counts differ (sampling) the throughput ratio is
    recomputed from its per-prompt runs, and otherwise its own figure stands."""
    m = rec["methods"][method]
    value = m.get("speedup_vs_vanilla")
    if m.get("speedup_kind") or value is None:
        return value, m.get("speedup_kind")
    pairs = speedup_pairs(rec, method)
    kind = speedup_kind(pairs)
    return (value, kind) if kind == SPEEDUP_WALL_TIME else (speedup(pairs, kind), kind)


def drafted_depth(method: dict) -> int:
    """The deepest draft position a method's trees could reach: its tree's depth (and
    the copy proposer's longest copy, where it drafts); 99 for records that kept no
    tree. Deeper positions were never drafted: the table shows them as '-', not 0."""
    tree, copy = method.get("tree") or {}, method.get("copy") or {}
    reach = max(tree.get("depth") or 0, copy.get("max_tokens") or 0)
    return reach or 99


def save(path, record: dict) -> None:
    """Write a bench record as indented JSON, making its folder."""
    import json
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=2))
