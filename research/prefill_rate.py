"""How fast the default model reads a prompt (its prefill) on each runtime the race
offers: float32 weights in PyTorch and the 4-bit file in llama.cpp. Prompt tokens
per second at a few prompt lengths, the best of a few tries each (a shared machine
only ever slows a run down). docs/app.md quotes it for the race's longest prompt.

    PYTHONPATH=. python research/prefill_rate.py --lengths 256,2048
"""
import argparse
import json
import os
import time

import torch

from gumiho.files import LibraryPaths, configure
from gumiho.loading import load_target


def prefill_s(target, ids: list[int]) -> float:
    cache = target.new_cache()
    t0 = time.perf_counter()
    target.forward(ids, 0, cache, last_logits_only=True)
    return time.perf_counter() - t0


def main() -> None:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="256,2048", help="prompt lengths in tokens, comma-separated")
    ap.add_argument("--tries", type=int, default=2)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    out = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "runtimes": {}}
    for runtime in ("torch", "llama.cpp"):
        target = load_target(runtime=runtime)
        text = "The river runs past the old mill and under the stone bridge. " * 400
        ids = target.encode(text)
        rows = {}
        with torch.inference_mode():
            prefill_s(target, ids[:32])  # first-call setup is not reading
            for n in lengths:
                best = min(prefill_s(target, ids[:n]) for _ in range(args.tries))
                rows[n] = {"prefill_s": round(best, 2), "tokens_per_s": round(n / best)}
        out["runtimes"][f"{runtime} ({target.runtime.weights})"] = rows
        del target
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
