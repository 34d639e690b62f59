"""llama.cpp's own server and its own drafting, timed side by side: llama-server
(gumiho.serving.llamacpp_build) on the default target's 4-bit file as stored, without
drafting, with EAGLE-3 drafting by the shipped eagle3 drafter (gumiho.formats.eagle3_gguf,
a chain of 3, no probability cut-off) and with its n-gram drafting (ngram-simple, 3
tokens per draft).

    python -m gumiho.bench.engines --llamacpp-only --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 \\
        --max-new-tokens 64 --out benchmarks/engines/mt_bench_llamacpp.json

All three servers are started first; each prompt, as token ids (the same ids every
engine of the benchmark gets), goes to /completion of every server in turn, the order
rotating prompt by prompt, so that whatever else runs on the machine slows each alike.
Greedy, batch 1, the prompt cache off. A row is the new tokens over the summed wall
seconds of its requests (as the client sees them: prompt reading included, as in this
engine's rows), with the drafted and accepted tokens the server reports in
``timings``; every row's tokens are checked against the server's vanilla."""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Callable, Optional

from ..engine.metrics import SPEEDUP_THROUGHPUT, speedup
from ..errors import GumihoError
from ..serving.lifecycle import free_port, start_process, wait_until_serving
from .compare_drafters import bootstrap

ENGINE = "llama.cpp server (llama-server)"
K = 3
METHODS = (("vanilla", "none"), ("eagle3", "eagle3"), ("n-gram", "ngram"))



def complete(url: str, ids: list[int], max_new: int) -> dict:
    """One greedy /completion of ``ids``: its tokens, wall seconds and draft counts."""
    body = {"prompt": ids, "n_predict": max_new, "temperature": 0, "seed": 0, "cache_prompt": False,
            "return_tokens": True}
    request = urllib.request.Request(url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as r:
        out = json.load(r)
    seconds = time.perf_counter() - t0
    timings = out.get("timings") or {}
    return {"tokens": out["tokens"], "seconds": seconds, "drafted": int(timings.get("draft_n", 0)),
            "accepted": int(timings.get("draft_n_accepted", 0)), "timings": timings}


def server_rows(ids: list[list[int]], max_new: int, threads: int, work: Path, weights: str,
                log: Callable[[str], None], local: Optional[tuple[str, str, Callable]] = None) -> list[dict]:
    """The three rows (module docstring); with ``local`` ((engine, method, generate:
    prompt ids -> tokens)), a fourth contender timed in the same rotation: this engine's
    own row measured beside the servers, prompt by prompt, for a paired comparison."""
    from ..drafter import Drafter
    from ..formats.eagle3_gguf import write_eagle3_gguf
    from ..formats.gguf_target import default_target_file
    from ..loading import shipped_drafter_path
    from ..serving.llamacpp_build import ensure_server
    from ..serving.llamacpp_command import server_command, stop

    binary = ensure_server(log=log)
    target_file = default_target_file()
    drafter_file = str(work / "eagle3.gguf")
    write_eagle3_gguf(Drafter.load(shipped_drafter_path("eagle3")), drafter_file, target_file)
    servers = {}
    try:
        for name, kind in METHODS:
            port = free_port()
            command = server_command(binary, target_file, drafter_file if kind == "eagle3" else None, kind, K,
                                     port, threads=threads)
            servers[name] = (start_process(command, str(work / f"llama-server-{kind}.log")),
                             f"http://127.0.0.1:{port}")
        contenders = {}
        for name, (process, url) in servers.items():
            if not wait_until_serving(process, url, 300):
                raise GumihoError(f"llama-server ({name}) did not start; see {work / 'llama-server-*.log'}.")
            complete(url, ids[0][:16], 8)  # warm-up
            contenders[(ENGINE, name)] = lambda prompt, url=url: complete(url, prompt, max_new)
        if local is not None:
            engine, method, generate = local
            generate(ids[0][:16])  # warm-up
            contenders[(engine, method)] = lambda prompt: _timed(generate, prompt)
        log(f"llama-server: vanilla, eagle3 and n-gram on {len(ids)} prompts, interleaved"
            + (f" with {local[0]} {local[1]}" if local else "") + " ...")
        results = {key: [] for key in contenders}
        keys = list(contenders)
        for i, prompt in enumerate(ids):
            for key in keys[i % len(keys):] + keys[:i % len(keys)]:
                results[key].append(contenders[key](prompt))
    finally:
        for process, _ in servers.values():
            stop(process)
    vanilla = [r["tokens"] for r in results[(ENGINE, "vanilla")]]
    rows = []
    for (engine, name), runs in results.items():
        n = sum(len(r["tokens"]) for r in runs)
        seconds = sum(r["seconds"] for r in runs)
        drafted, accepted = sum(r["drafted"] for r in runs), sum(r["accepted"] for r in runs)
        row = {"engine": engine, "method": name, "batch": 1, "weights": weights, "new_tokens": n,
               "seconds": round(seconds, 3), "tokens_per_s": round(n / seconds, 2),
               "per_prompt": [[len(r["tokens"]), round(r["seconds"], 4)] for r in runs]}
        if engine == ENGINE:
            row["identical_to_vanilla"] = [r["tokens"] for r in runs] == vanilla
        if drafted:
            row.update(drafted=drafted, accepted=accepted, accepted_share=round(accepted / drafted, 3))
        rows.append(row)
    return rows


def _timed(generate: Callable, prompt: list[int]) -> dict:
    t0 = time.perf_counter()
    tokens = generate(prompt)
    return {"tokens": list(tokens), "seconds": time.perf_counter() - t0, "drafted": 0, "accepted": 0}


def paired_ratio(a: dict, b: dict, draws: int = 2000, seed: int = 0) -> dict:
    """Tokens/s of row ``a`` over row ``b`` (both timed prompt by prompt in one rotation;
    gumiho.engine.metrics.speedup's throughput ratio, ``b`` in vanilla's place), with a 95%
    bootstrap interval over prompts (compare_drafters.bootstrap: both rows resampled
    together)."""
    pa, pb = a["per_prompt"], b["per_prompt"]
    if len(pa) != len(pb) or not pa:
        raise GumihoError("A paired ratio needs the same prompts in both rows.")
    pairs = [(tb, sb, ta, sa) for (ta, sa), (tb, sb) in zip(pa, pb)]
    value, low, high = bootstrap(pairs, lambda sample: speedup(sample, SPEEDUP_THROUGHPUT), draws, seed)
    return {"value": round(value, 3), "low": round(low, 3), "high": round(high, 3), "prompts": len(pairs)}
