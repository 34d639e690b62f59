"""vLLM's methods timed side by side, interleaved: one OpenAI-compatible server per method
(vanilla, the eagle3 drafter, the gumiho drafter), all started first, then the same
requests sent to each in turn, so that whatever else runs on the machine slows every
method alike (the bench's runner interleaves this engine's methods the same way).

    python -m gumiho.bench.engines --vllm-only --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 \\
        --max-new-tokens 64 --out benchmarks/engines/mt_bench_vllm.json

Batch 1: each prompt is one request, sent to every server in turn (the order rotates
prompt by prompt). Batch B: B requests at once (the prompts repeated), to every server in
turn, ``rounds`` times. A row is the new tokens over the summed wall seconds of its
requests, with the spec-decode counters its server added over them (from /metrics).
Every row's tokens are checked against vanilla's for the same requests.

Idle servers wait on their queues; every server runs with ``OMP_WAIT_POLICY=PASSIVE`` so
that an idle one's OpenMP threads do not spin on the cores the busy one needs."""
from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from ..errors import GumihoError
from ..serving.lifecycle import free_port

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
GUMIHO_K = 4  # tokens per draft of the gumiho drafter in vLLM: 2 serial positions, then 2 MLP heads


def vllm_configs(target, work: Path) -> list[tuple]:
    """(name, speculative config, batched too) of each vLLM row: vanilla, n-gram (batch 1
    only), and the shipped eagle3 and gumiho drafters as their exports write them."""
    from ..formats.eagle3 import write_eagle3
    from ..formats.vllm_gumiho import write_gumiho
    from ..loading import load_drafter, shipped_drafter_path

    configs = [("vanilla", None, True), ("n-gram", NGRAM, False)]
    shipped = shipped_drafter_path("eagle3")
    if shipped:
        write_eagle3(load_drafter(shipped, target, dtype="fp32"), str(work / "eagle3"), target.config)
        configs.append(("eagle3", {"method": "eagle3", "model": str(work / "eagle3"), "num_speculative_tokens": 3},
                        True))
    shipped = shipped_drafter_path("gumiho")
    if shipped:
        write_gumiho(load_drafter(shipped, target, dtype="fp32"), str(work / "gumiho"), target.config)
        configs.append(("gumiho", {"method": "eagle", "model": str(work / "gumiho"),
                                   "num_speculative_tokens": GUMIHO_K}, True))
    return configs


NAME = "target"
POSITIONS = 8  # per-position counters read from /metrics (more than any chain here)



def _post(url: str, body: dict, timeout: float = 1800) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def counters(url: str) -> dict:
    """Drafts, accepted tokens and accepted tokens per position, from /metrics."""
    out = {"drafts": 0.0, "accepted": 0.0, "per_position": [0.0] * POSITIONS}
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    for line in text.splitlines():
        value = line.rsplit(" ", 1)[-1]
        if line.startswith("vllm:spec_decode_num_drafts_total"):
            out["drafts"] += float(value)
        elif line.startswith("vllm:spec_decode_num_accepted_tokens_total"):
            out["accepted"] += float(value)
        elif line.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total"):
            position = int(line.split('position="')[1].split('"')[0])
            if position < POSITIONS:
                out["per_position"][position] += float(value)
    return out


def _minus(after: dict, before: dict) -> dict:
    return {"drafts": after["drafts"] - before["drafts"], "accepted": after["accepted"] - before["accepted"],
            "per_position": [a - b for a, b in zip(after["per_position"], before["per_position"])]}


def timed_batch(url: str, prompts: list, max_new: int) -> tuple[list, float]:
    """``prompts`` sent at once (one request each, greedy): their tokens and the wall seconds."""
    body = lambda ids: {"model": NAME, "prompt": ids, "max_tokens": max_new, "temperature": 0,  # noqa: E731
                        "return_token_ids": True}
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda ids: _post(url + "/v1/completions", body(ids)), prompts))
    seconds = time.perf_counter() - began
    return [a["choices"][0]["token_ids"] for a in answers], seconds


def start_servers(python: Path, model_dir: Path, configs: list, work: Path, log: Callable) -> dict:
    """One server per (name, speculative config); {name: (url, process)} once all answer."""
    from ..serving.lifecycle import wait_until_serving
    from ..serving.vllm_command import START_TIMEOUT, start_vllm

    servers = {}
    try:
        for name, spec in configs:
            port = free_port()
            log(f"starting vLLM {name} on port {port} ...")
            process = start_vllm(python, str(model_dir), NAME, spec, port=port, log_path=work / f"{name}.log",
                                 extra_env={"OMP_WAIT_POLICY": "PASSIVE"})
            servers[name] = (f"http://127.0.0.1:{port}", process)
            if not wait_until_serving(process, servers[name][0], START_TIMEOUT):
                from ..serving.vllm_env import failure_cause

                raise GumihoError(f"vLLM {name} did not start: "
                                  f"{failure_cause((work / f'{name}.log').read_text(errors='replace'))}")
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: dict) -> None:
    from ..serving.vllm_command import stop

    for _, process in servers.values():
        stop(process, lambda message: None)


def served_rows(python: Path, model_dir: Path, configs: list, ids: list, max_new: int, batch_sizes: list[int],
                work: Path, log: Callable, rounds: int = 1) -> list[dict]:
    """The interleaved rows (module docstring): every config at batch 1 and at ``batch_sizes``."""
    servers = start_servers(python, model_dir, configs, work, log)
    names = [name for name, _ in configs]
    try:
        for name in names:  # warm-up, untimed
            timed_batch(servers[name][0], ids[:1], max_new)
        plans = [(1, [[p] for p in ids])]
        plans += [(b, [[ids[i % len(ids)] for i in range(b)]] * rounds) for b in batch_sizes]
        rows = []
        for batch, groups in plans:
            log(f"vLLM {', '.join(names)}, batch {batch}, interleaved ...")
            tokens = {n: [] for n in names}
            seconds = dict.fromkeys(names, 0.0)
            before = {n: counters(servers[n][0]) for n in names}
            for g, group in enumerate(groups):
                for n in names[g % len(names):] + names[:g % len(names)]:  # the order rotates
                    got, s = timed_batch(servers[n][0], group, max_new)
                    tokens[n] += got
                    seconds[n] += s
            for n in names:
                spec = _minus(counters(servers[n][0]), before[n])
                rows.append(_row(n, batch, tokens[n], seconds[n], tokens[n] == tokens[names[0]], spec))
        return rows
    finally:
        stop_servers(servers)


def _row(name: str, batch: int, tokens: list, seconds: float, same: bool, spec: dict) -> dict:
    n = sum(len(t) for t in tokens)
    row = {"engine": "vLLM", "method": name, "batch": batch, "new_tokens": n, "seconds": round(seconds, 3),
           "tokens_per_s": round(n / seconds, 2), "identical_to_vanilla": same}
    if spec["drafts"]:
        d = spec["drafts"]
        row["accepted_per_draft"] = round(spec["accepted"] / d, 3)
        width = max((i + 1 for i, v in enumerate(spec["per_position"]) if v), default=0)
        row["accepted_per_position"] = [round(v / d, 3) for v in spec["per_position"][:width]]
    return row


def default_configs(target, work: Path) -> list[tuple[str, Optional[dict]]]:
    """vanilla, and the shipped eagle3 and gumiho drafters as their exports write them."""
    return [(name, spec) for name, spec, batched in vllm_configs(target, work) if batched]
