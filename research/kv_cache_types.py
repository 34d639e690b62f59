"""What the llama.cpp runtime's bfloat16 KV cache costs against llama.cpp's default
float16 one (gumiho/runtimes/llamacpp.py, KV_TYPE): the prompt's prefill and the median
one-token forward after it, at a few context lengths, and whether a verify row keeps the
one-token forward's bits there. Both cache types in one run, interleaved per length.

    PYTHONPATH=. python research/kv_cache_types.py --lengths 200,2000
"""
import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from gumiho.files import LibraryPaths, configure
from gumiho.loading import load_target
from gumiho.runtimes import llamacpp

TYPES = {"bfloat16 (the runtime's)": 30, "float16 (llama.cpp's default)": 1}


def measure(target, ids: list[int], n: int) -> dict:
    cache = target.new_cache()
    t0 = time.perf_counter()
    target.forward(ids[:n], 0, cache, last_logits_only=True)
    prefill = time.perf_counter() - t0
    tree_logits = target.forward(ids[n:n + 3], n, cache, parents=[-1, 0, 0]).logits
    target.keep(cache, n, [])
    one = []
    for k in range(8):
        t0 = time.perf_counter()
        lg = target.forward([ids[n + k]], n + k, cache).logits
        one.append(time.perf_counter() - t0)
        if k == 0:
            same = torch.equal(lg[0], tree_logits[0])
    return {"prefill_s": round(prefill, 3), "one_token_ms": round(1000 * statistics.median(one), 2),
            "verify_row_bits_equal": same}


def main() -> None:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="200,2000")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    target = load_target(runtime="llama.cpp")
    target.runtime.threads = args.threads
    docs = Path(__file__).resolve().parents[1] / "docs"
    text = "\n\n".join(f.read_text(encoding="utf-8") for f in sorted(docs.glob("*.md")))
    ids = target.tokenizer(text)["input_ids"]
    out = {}
    for n in [int(x) for x in args.lengths.split(",")]:
        for name, kv in TYPES.items():
            llamacpp.KV_TYPE = kv
            target.runtime._free.clear()  # contexts of this cache type only
            measure(target, ids, 50)  # a warm context
            out[f"{name}, context {n}"] = r = measure(target, ids, n)
            print(f"{name:30s} context {n:5d}: prefill {r['prefill_s']:.2f} s, one-token forward "
                  f"{r['one_token_ms']:.1f} ms, verify row = one-token row: {r['verify_row_bits_equal']}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
