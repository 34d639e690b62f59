"""Turn `python -m gumiho.bench` JSON files into BENCHMARKS.md tables and an
acceptance-by-position figure (plotly HTML, plus a PNG when a headless Chromium is
available to render it): the main part (gumiho.bench.report_tables) and the
sections of the other records (gumiho.bench.report_sections).

    python -m gumiho.bench.report benchmarks/results/*.json --out BENCHMARKS.md
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..files import LibraryPaths, configure
from .records import load
from .report_sections import (
    asstored_section,
    copy_section,
    eagle3_section,
    engines_section,
    llamacpp_server_section,
    serving_section,
)
from .report_tables import figure, setup_words, speedup_words, table, wins


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.report",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument("--figure", default="assets/acceptance_by_position")
    ap.add_argument("--commands", default=None, help="file with the exact commands that produced the results")
    ap.add_argument("--notes", default=None, help="markdown appended at the end (how to read the numbers)")
    ap.add_argument("--copy", default=None, metavar="DIR",
                    help="records of benchmarks/run_copy_benchmarks.sh: adds the copy proposer's section")
    ap.add_argument("--engines", default=None, metavar="FILE.json",
                    help="a record of python -m gumiho.bench.engines: adds the engine-peer section")
    ap.add_argument("--serving", default=None, metavar="FILE.json",
                    help="a record of python -m gumiho.bench.engines --vllm-only: adds the vLLM serving section")
    ap.add_argument("--eagle3", default=None, metavar="DIR",
                    help="records of benchmarks/run_eagle3_vs_gumiho.sh: adds the Gumiho-vs-EAGLE-3 section")
    ap.add_argument("--llamacpp-server", default=None, metavar="FILE.json",
                    help="a record of python -m gumiho.bench.engines --llamacpp-only: adds llama.cpp's server section")
    ap.add_argument("--asstored", default=None, metavar="DIR",
                    help="records of python -m gumiho.bench.asstored (and bench runs on the llama.cpp runtime)")
    args = ap.parse_args(argv)
    runs = load(args.results)
    if not runs:
        print("no results", file=sys.stderr)
        return 2
    first = runs[0][2]
    has_png = figure(runs, Path(args.figure + ".html"), Path(args.figure + ".png"))
    lossless = [(label, rec["lossless"]) for label, _, rec in runs]
    cmds = Path(args.commands).read_text().strip() if args.commands else ""
    parts = [
        "# Benchmarks",
        "",
        f"Target **{first['model']}** on **{first['device']}** ("
        f"{first['cpu'] + '; ' if first.get('cpu') else ''}{first.get('torch_threads')} torch threads), "
        f"temperature {first['temperature']}, max_new_tokens {first['max_new_tokens']}, "
        f"{first['prompts']} prompts per set (the first turn of each"
        f"{'; taken category by category in turn, so MT-Bench covers all of its categories' if first.get('prompt_selection', '').startswith('spread') else ''}"
        f"), drafters from `assets/drafters/`{setup_words(first)}. "
        "Every method runs on every prompt in the same process, interleaved prompt by prompt, after a warm-up.",
        "",
        "Metric words: **tau** = new tokens / target forwards (bonus tokens count, vanilla = 1); "
        "**acc@d** = share of verify steps whose accepted draft length is >= d ('-' where the method's tree "
        "does not draft position d); "
        + speedup_words(runs),
        "",
        table(runs),
        "",
        wins(runs),
        "",
        "Lossless check (greedy: speculative tokens identical to vanilla's, per prompt and method): "
        + ", ".join(f"{label} {l['identical']}/{l['checked']}" for label, l in lossless) + ".",
        "",
        (f"![acceptance by position]({args.figure}.png)" if has_png else "")
        + f"\n\nInteractive figure: [{args.figure}.html]({args.figure}.html)",
        "",
        "## Reproduce",
        "",
        "```bash",
        cmds or "# see benchmarks/run_benchmarks.sh",
        "```",
        "",
    ]
    if args.copy:
        parts += copy_section(Path(args.copy))
    if args.eagle3:
        parts += eagle3_section(Path(args.eagle3))
    if args.engines:
        parts += engines_section(Path(args.engines))
    if args.serving:
        parts += serving_section(Path(args.serving))
    if args.llamacpp_server:
        parts += llamacpp_server_section(Path(args.llamacpp_server))
    if args.asstored:
        parts += asstored_section(Path(args.asstored), Path(args.engines) if args.engines else None)
    if args.notes:
        parts += [Path(args.notes).read_text().strip(), ""]
    Path(args.out).write_text("\n".join(parts))
    print(f"wrote {args.out}" + (f" and {args.figure}.png" if has_png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
