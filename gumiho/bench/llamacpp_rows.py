"""The engine-peer rows on the 4-bit GGUF files (gumiho.bench.engines): this engine on
its llama.cpp runtime with each file it offers, and llama-cpp-python's own greedy loop
on the same file, prompt ids and threads, checked token for token against the
runtime's vanilla."""
from __future__ import annotations

import time

from ..engine.decode import GenerationSettings, generate
from ..loading import load_target
from ..runtimes.llamacpp import KV_TYPE
from ..runtimes.llamacpp_files import DEFAULT_LAYOUT, LAYOUTS
from .methods import resolve_drafters
from .runner import BenchSettings, run_benchmark

LLAMACPP_METHODS = ["vanilla", "gumiho", "gumiho+copy"]  # eagle3 reads inner layers, which llama.cpp keeps


def runtime_engine(layout) -> str:
    """The rows' engine name of this engine on the llama.cpp runtime with ``layout``."""
    return "gumiho engine, llama.cpp runtime" + ("" if layout.key == DEFAULT_LAYOUT else f", {layout.quant}")


def llamacpp_rows(prompts, ids: list, max_new: int, threads: int, log) -> tuple[list[dict], dict]:
    """The 4-bit files: this engine on the llama.cpp runtime with each file it offers
    (gumiho.runtimes.llamacpp_files), and llama-cpp-python itself on each; with the bench records
    of the runtime's rows."""
    rows, records = [], {}
    for layout in LAYOUTS.values():
        more, records[layout.key] = llamacpp_layout_rows(layout, prompts, ids, max_new, threads, log)
        rows += more
    return rows, records


def llamacpp_layout_rows(layout, prompts, ids, max_new, threads, log):
    from llama_cpp import Llama

    target = load_target(None, device="cpu", runtime="llama.cpp", layout=layout.key)
    drafters, _ = resolve_drafters(target, LLAMACPP_METHODS, {}, True, 0, warn=log)
    record = run_benchmark(target, drafters, prompts, BenchSettings(max_new_tokens=max_new, progress=False),
                           log=log)
    rows = []
    for name, m in record["methods"].items():
        rows.append({"engine": runtime_engine(layout), "method": name, "batch": 1,
                     "weights": target.runtime.weights, "new_tokens": m["new_tokens"], "seconds": m["wall_s"],
                     "tokens_per_s": m["tokens_per_s"], "tau": m["tau"]})
    runtime_tokens = [generate(target, prompt_ids=p, settings=GenerationSettings(max_new_tokens=max_new)).tokens
                      for p in ids]
    eos = target.eos_ids
    # As a user runs it (llama-cpp-python's defaults: flash attention off, a float16 cache),
    # and with the runtime's cache settings, which must give the runtime's tokens (the same kernels).
    runs = [(target.runtime.path, target.runtime.weights, "defaults", {}),
            (target.runtime.path, target.runtime.weights, "the runtime's cache",
             {"flash_attn": True, "type_k": KV_TYPE, "type_v": KV_TYPE})]
    if not target.runtime.extra_buffers:
        # llama-cpp-python's Llama loads with llama.cpp's weight repack and takes no setting
        # for it; where the runtime's trial or this CPU's rule turned the repack off
        # (gumiho.runtimes.llamacpp_trust), that load may die by a signal: not run.
        log("llama.cpp (llama-cpp-python) rows skipped: its Llama repacks weights at load, which this CPU's "
            "rule or trial turned off.")
        runs = []
    for path, weights, label, extra in runs:
        log(f"llama.cpp (llama-cpp-python, {weights}, {label}) ...")
        llm = Llama(model_path=path, n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False, **extra)
        _llama_greedy(llm, ids[0][:16], max_new, eos)  # warm-up
        tokens, seconds = [], 0.0
        for p in ids:
            t0 = time.perf_counter()
            tokens.append(_llama_greedy(llm, p, max_new, eos))
            seconds += time.perf_counter() - t0
        n = sum(len(t) for t in tokens)
        row = {"engine": "llama.cpp (llama-cpp-python)", "method": f"vanilla, {label}", "batch": 1,
               "weights": weights, "new_tokens": n, "seconds": round(seconds, 3), "tokens_per_s": round(n / seconds, 2)}
        if extra:
            row["identical_to_runtime_vanilla"] = tokens == runtime_tokens
        rows.append(row)
        del llm
    return rows, record


def _llama_greedy(llm, prompt_ids: list[int], max_new: int, eos: set) -> list[int]:
    """llama-cpp-python's own loop: greedy tokens after ``prompt_ids``, its cache reset."""
    llm.reset()
    out = []
    for tok in llm.generate(prompt_ids, temp=0.0, top_k=1, reset=True):
        out.append(int(tok))
        if tok in eos or len(out) >= max_new:
            break
    return out
