"""Is llama.cpp's own speculative decoding lossless on this machine? llama-server on the
target's 4-bit file as stored, started as ``python -m gumiho.serve --engine llama.cpp``
starts it (the same binary, the repack setting its trial chose, a chain of 3 drafts with
no probability cut-off) once without drafting and once with EAGLE-3 drafting by the
shipped eagle3 drafter; each prompt's greedy completion asked of both; the texts
compared token by token.

    PYTHONPATH=. python research/llamacpp_drafting_lossless.py --limit 8 --max-new-tokens 64 \\
        --out benchmarks/engines/llamacpp_drafting_lossless.json

Prints how many texts are identical and, for each that is not, the first new token
where they part (the token each server wrote there). Speculative decoding is lossless
when every text is identical; llama.cpp verifies a chain of drafts in one batched
forward, and its batched kernels may round a row differently from the one-token
forward its plain decoding runs, so on a near-tie the two can part (docs/llamacpp.md).

The servers come from gumiho.serving (GUMIHO_LLAMA_SERVER names a binary; otherwise the
cached build, built first when there is none: about 8 minutes on two cores). The prompt
ids are the benchmark's (gumiho.bench.prompt_sets: the target's chat template), sent to
/completion as ids with the prompt cache off, so both servers read the same tokens."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from gumiho.bench.llamacpp_served import complete
from gumiho.errors import GumihoError
from gumiho.files import LibraryPaths, configure
from gumiho.serving.lifecycle import free_port, start_process, wait_until_serving
from gumiho.serving.llamacpp_command import DEFAULT_K, server_command, stop

START_SECONDS = 300
ARMS = ("plain", "drafted")


def first_difference(a: list[int], b: list[int]) -> Optional[int]:
    """The first position where two token lists part (one ending before the other
    counts), None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(plain: list[list[int]], drafted: list[list[int]]) -> dict:
    """Per prompt: identical or not, the first differing new token and what each wrote there."""
    if len(plain) != len(drafted):
        raise GumihoError(f"{len(plain)} plain texts against {len(drafted)} drafted ones.")
    prompts = []
    for a, b in zip(plain, drafted):
        at = first_difference(a, b)
        row = {"identical": at is None, "first_difference": at, "tokens": [len(a), len(b)]}
        if at is not None:
            row["there"] = [a[at] if at < len(a) else None, b[at] if at < len(b) else None]
        prompts.append(row)
    return {"prompts": len(prompts), "identical": sum(r["identical"] for r in prompts), "per_prompt": prompts}


def measure(ids: list[list[int]], max_new: int, binary: Path, target_file: str, drafter_file: str,
            threads: int, repack: bool, k: int = DEFAULT_K, work: Optional[Path] = None,
            log: Callable[[str], None] = lambda line: None) -> dict:
    """Both servers up at once; each prompt asked of the plain one, then the drafting one.
    Returns :func:`compare`'s record with the drafted and accepted tokens the drafting
    server reported."""
    work = Path(work or tempfile.mkdtemp(prefix="llamacpp-drafting-"))
    servers = {}
    try:
        for arm in ARMS:
            port = free_port()
            kind = "eagle3" if arm == "drafted" else "none"
            command = server_command(binary, target_file, drafter_file if kind == "eagle3" else None, kind, k, port,
                                     threads=threads, repack=repack)
            servers[arm] = (start_process(command, str(work / f"llama-server-{arm}.log")), f"http://127.0.0.1:{port}")
        for arm, (process, url) in servers.items():
            if not wait_until_serving(process, url, START_SECONDS):
                raise GumihoError(f"llama-server ({arm}) did not start; see {work / f'llama-server-{arm}.log'}.")
        log(f"llama-server with and without EAGLE-3 drafting: {len(ids)} prompts, {max_new} new tokens, greedy ...")
        out = {arm: [] for arm in ARMS}
        for prompt in ids:
            for arm in ARMS:
                out[arm].append(complete(servers[arm][1], prompt, max_new))
    finally:
        for process, _ in servers.values():
            stop(process)
    record = compare([r["tokens"] for r in out["plain"]], [r["tokens"] for r in out["drafted"]])
    record.update(max_new_tokens=max_new, k=k, threads=threads, repack=repack,
                  drafted=sum(r["drafted"] for r in out["drafted"]),
                  accepted=sum(r["accepted"] for r in out["drafted"]))
    return record


def summary(record: dict) -> list[str]:
    """The record in words: the count first, then each text that parted."""
    lines = [f"llama-server with EAGLE-3 drafting (a chain of {record['k']}) against itself without: "
             f"{record['identical']} of {record['prompts']} texts identical (greedy, {record['max_new_tokens']} "
             f"new tokens, {record['threads']} threads, weight repacking {'on' if record['repack'] else 'off'}"
             + (f", {record['cpu']}" if record.get("cpu") else "") + ")."]
    for i, row in enumerate(record["per_prompt"]):
        if not row["identical"]:
            plain, drafted = row["there"]
            lines.append(f"prompt {i}: first difference at new token {row['first_difference']} "
                         f"(plain wrote {plain}, drafted wrote {drafted}).")
    if record.get("drafted"):
        lines.append(f"drafted tokens accepted: {record['accepted']} of {record['drafted']}.")
    return lines


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=8, help="prompts (N)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="threads per server (default: every core)")
    ap.add_argument("--out", default=None, help="write the record as JSON")
    args = ap.parse_args(argv)

    from gumiho.bench.prompt_sets import load_prompts, prompt_ids
    from gumiho.formats.gguf_target import default_target_file
    from gumiho.kernels.machine import cpu_info
    from gumiho.loading import load_target, shipped_drafter_path
    from gumiho.serving.llamacpp_build import build_dir, ensure_server
    from gumiho.serving.llamacpp_command import prepare_drafter
    from gumiho.serving.llamacpp_trial import check_server

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    target = load_target(None, device="cpu", runtime="llama.cpp")  # its tokenizer and chat template
    ids = [prompt_ids(target, p) for p in load_prompts(args.prompts, args.limit)]
    del target
    target_file = default_target_file()
    threads = args.threads or os.cpu_count() or 1
    binary = ensure_server(log=log)
    repack = check_server(binary, target_file, threads, build_dir(), log)
    drafter_file = prepare_drafter(str(shipped_drafter_path("eagle3")), target_file, log)
    record = measure(ids, args.max_new_tokens, binary, target_file, drafter_file, threads, repack, log=log)
    record.update(prompts_file=args.prompts, cpu=cpu_info()[0])
    print("\n".join(summary(record)))
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
