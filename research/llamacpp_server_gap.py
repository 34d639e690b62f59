"""Where this engine's vanilla decoding on the 4-bit file (the llama.cpp runtime) loses
time to llama.cpp's own server on the same file: prompt reading, each one-token
forward, and the engine's own Python between forwards. The same prompt ids, greedy,
one server (no drafting, ``--parallel 1``, two threads) and the engine timed in turn,
prompt by prompt.

    PYTHONPATH=. python research/llamacpp_server_gap.py --limit 10 > benchmarks/engines/llamacpp_server_gap.txt

The engine's forwards are timed around the runtime's own llama_decode call; the server
reports its ``prompt_ms`` and ``predicted_ms``. The runtime keeps its KV cache in
bfloat16 with flash attention (a one-token forward then carries the same bits as a row
of a verify: docs/llamacpp.md), the server llama.cpp's defaults (float16)."""
import argparse
import os
import statistics
import time

from gumiho.bench.llamacpp_served import complete
from gumiho.bench.prompt_sets import load_prompts, prompt_ids
from gumiho.engine.decode import GenerationSettings, generate
from gumiho.files import LibraryPaths, configure
from gumiho.formats.gguf_target import default_target_file
from gumiho.loading import load_target
from gumiho.serving.lifecycle import free_port, start_process, wait_until_serving
from gumiho.serving.llamacpp_build import ensure_server
from gumiho.serving.llamacpp_command import server_command, stop


def main() -> None:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    target = load_target(None, device="cpu", runtime="llama.cpp")
    ids = [prompt_ids(target, p) for p in load_prompts(args.prompts, args.limit)]
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens)

    cache_class = type(target.new_cache())
    plain = cache_class._decode
    calls: list[float] = []

    def timed(self, *a, **k):
        t0 = time.perf_counter()
        out = plain(self, *a, **k)
        calls.append(time.perf_counter() - t0)
        return out

    cache_class._decode = timed
    port = free_port()
    process = start_process(server_command(ensure_server(), default_target_file(), None, "none", 1, port, threads=2),
                           None)
    url = f"http://127.0.0.1:{port}"
    ours = {"wall": 0.0, "prompt": 0.0, "decode": [], "tokens": 0}
    theirs = {"wall": 0.0, "prompt": 0.0, "decode": 0.0, "tokens": 0}
    try:
        if not wait_until_serving(process, url, 120):
            raise SystemExit("llama-server did not start")
        generate(target, prompt_ids=ids[0][:16], settings=settings)  # warm-ups
        for i, prompt in enumerate(ids):
            for who in ("engine", "server") if i % 2 == 0 else ("server", "engine"):
                if who == "engine":
                    calls.clear()
                    t0 = time.perf_counter()
                    ours["tokens"] += len(generate(target, prompt_ids=prompt, settings=settings).tokens)
                    ours["wall"] += time.perf_counter() - t0
                    ours["prompt"] += calls[0]
                    ours["decode"] += calls[1:]
                else:
                    out = complete(url, prompt, args.max_new_tokens)
                    theirs["wall"] += out["seconds"]
                    theirs["prompt"] += out["timings"]["prompt_ms"] / 1000
                    theirs["decode"] += out["timings"]["predicted_ms"] / 1000
                    theirs["tokens"] += out["timings"]["predicted_n"]
    finally:
        stop(process)
    decode_ours = sum(ours["decode"])
    python_ours = ours["wall"] - ours["prompt"] - decode_ours
    print(f"{len(ids)} prompts of {args.prompts}, {args.max_new_tokens} new tokens, greedy, 2 threads, "
          f"the shipped Q4_1 file; engine and server in turn, prompt by prompt")
    print(f"{'':34} {'engine':>10} {'llama-server':>13}")
    print(f"{'new tokens / wall s':34} {ours['tokens'] / ours['wall']:10.1f} {theirs['tokens'] / theirs['wall']:13.1f}")
    print(f"{'prompt reading, s (all prompts)':34} {ours['prompt']:10.3f} {theirs['prompt']:13.3f}")
    print(f"{'one-token forwards, ms each':34} {1000 * decode_ours / max(1, len(ours['decode'])):10.2f} "
          f"{1000 * theirs['decode'] / max(1, theirs['tokens'] - len(ids)):13.2f}")
    print(f"{'  median':34} {1000 * statistics.median(ours['decode']):10.2f}")
    print(f"{'between forwards (Python / HTTP), s':34} {python_ours:10.3f} "
          f"{theirs['wall'] - theirs['prompt'] - theirs['decode']:13.3f}")


if __name__ == "__main__":
    main()
