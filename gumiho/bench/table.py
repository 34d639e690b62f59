"""The benchmark's plain-text table: one row per method (the metric words of
:mod:`gumiho.engine.metrics`), then what the speedup column divides, who proposed the
accepted tokens, and the lossless verdict."""
from __future__ import annotations

from ..engine.metrics import SPEEDUP_THROUGHPUT
from .records import drafted_depth
from .runner import TABLE_POSITIONS


def _speedup_words(record: dict) -> str:
    """How the table's speedups were computed, in the words the record's kinds call for."""
    kinds = {m.get("speedup_kind") for m in record["methods"].values()}
    if SPEEDUP_THROUGHPUT not in kinds:
        return "speedup = vanilla wall time / method wall time (the same tokens on every prompt)."
    return ("speedup (tok/s) = method tokens/s / vanilla tokens/s: sampling wrote texts of other lengths, so "
            "wall times are not compared.")


def format_table(record: dict) -> str:
    """A plain-text table of the record's methods."""
    head = ["method", "new tok", "wall s", "tok/s", "fwd", "tau"]
    head += [f"a{d}" for d in range(1, TABLE_POSITIONS + 1)] + ["speedup"]
    rows = [head]
    for name, m in record["methods"].items():
        acc = list(m["acceptance_by_position"][:TABLE_POSITIONS])
        reach = drafted_depth(m)  # positions the tree never drafts read '-', not 0.00
        acc_cells = [f"{a:.2f}" if d <= reach else "-" for d, a in enumerate(acc, 1)]
        acc_cells += ["-"] * (TABLE_POSITIONS - len(acc))
        sp = m["speedup_vs_vanilla"]
        # A throughput ratio is marked, so that a glance at the table tells it from a wall-time one.
        mark = " (tok/s)" if m.get("speedup_kind") == SPEEDUP_THROUGHPUT else ""
        rows.append([name, str(m["new_tokens"]), f"{m['wall_s']:.2f}", f"{m['tokens_per_s']:.1f}",
                     str(m["target_forwards"]), f"{m['tau']:.2f}"] + acc_cells
                    + ["-" if sp is None else f"{sp:.2f}x{mark}"])
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ll = record["lossless"]
    proposers = []
    for name, m in record["methods"].items():
        by = m.get("accepted_by_proposer") or {}
        if m.get("copy") is not None:
            copied = by.get("copy", 0)
            nodes = m.get("copy_nodes", 0)
            rate = f" ({copied / nodes:.0%})" if nodes else ""
            proposers.append(f"{name}: accepted draft tokens by proposer: "
                             + ", ".join(f"{h} {n}" for h, n in by.items())
                             + f"; copied nodes accepted: {copied} of {nodes}{rate}")
    notes = proposers + [f"a1..a{TABLE_POSITIONS}: acceptance by position (share of verify steps with accepted draft "
             f"length >= d; '-' where the tree does not draft d); tau = new tokens / target forwards; " + _speedup_words(record)]
    if record["temperature"] == 0:
        verdict = "OK" if ll["identical"] == ll["checked"] else "MISMATCH"
        notes.append(f"lossless (greedy): {ll['identical']}/{ll['checked']} speculative runs identical to vanilla "
                     f"[{verdict}]")
    else:
        notes.append("lossless: not checked token for token at temperature > 0 (sampling).")
    return "\n".join(lines + [""] + notes)
