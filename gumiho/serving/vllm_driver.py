"""Greedy decoding by vLLM, run by the vLLM environment's python (gumiho.serving.vllm_env).

It imports nothing from gumiho, which is not installed in that environment: the
request (prompt token ids) comes in as a JSON file, the result goes out as one:

    python vllm_driver.py --model DIR --request IN.json --out OUT.json --max-tokens N
                          [--speculative-config JSON] [--enforce-eager] [--batch-size N] [--warmup]

IN.json: {"prompts": [[ids...], ...]}. OUT.json: {"tokens": [[ids...], ...] (the EOS
included where decoding stopped on it), "finish_reasons", "load_seconds",
"decode_seconds", "metrics": {name: value}, "spec_decode": {name: value} (with a
speculative config)}.

With ``"runs": [{"prompts": [[ids...], ...], "batch_size": N}, ...]`` in IN.json, one
engine start decodes each run in turn (after the warm-up), and OUT.json gets ``"runs"``:
per run its tokens, call_seconds, metrics and spec_decode, each run's counters its own.

vLLM spawns its engine and worker processes, which import this file again: all the
work is under ``if __name__ == "__main__":``.
"""
import argparse
import json
import os
import time


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="an ordinary transformers folder (its config names the architecture)")
    parser.add_argument("--request", required=True, help='JSON file: {"prompts": [[token ids], ...]}')
    parser.add_argument("--out", required=True, help="where the JSON result is written")
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--speculative-config", default=None,
                        help='JSON, e.g. {"method": "eagle3", "model": DIR, "num_speculative_tokens": 3}')
    parser.add_argument("--max-model-len", type=int, default=2048,
                        help="context length vLLM reserves for (the KV cache is sized by VLLM_CPU_KVCACHE_SPACE)")
    parser.add_argument("--dtype", default=None,
                        help="vLLM's dtype (float32, bfloat16, float16); default: the one the folder's config.json "
                             "names (vLLM's own 'auto' runs a float32 checkpoint in bfloat16 on CPU)")
    parser.add_argument("--enforce-eager", action="store_true", help="no torch.compile (a start without its ~70 s compile on 2 cores)")
    parser.add_argument("--batch-size", type=int, default=0,
                        help="requests per generate call, each call timed (1: one prompt at a time, as a single user "
                             "sends them; 0: every prompt in one call)")
    parser.add_argument("--warmup", action="store_true",
                        help="one untimed call on the first prompt first (its counters are left out of the metrics)")
    return parser.parse_args(argv)


def metric_values(metrics) -> dict:
    """vLLM's metric snapshot as {name: number or list}; the same name under several
    label sets (engines) summed."""
    values = {}
    for metric in metrics:
        if hasattr(metric, "values"):  # a Vector: accepted tokens per draft position
            old = values.get(metric.name) or [0] * len(metric.values)
            values[metric.name] = [a + b for a, b in zip(old, metric.values)]
        elif hasattr(metric, "value"):  # a Counter or Gauge
            values[metric.name] = values.get(metric.name, 0) + metric.value
        elif hasattr(metric, "count"):  # a Histogram: its count and sum
            for suffix, number in (("_count", metric.count), ("_sum", metric.sum)):
                values[metric.name + suffix] = values.get(metric.name + suffix, 0) + number
    return values


def config_dtype(model_dir) -> str:
    """The dtype the folder's config.json names ("dtype", or the older "torch_dtype")."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    return config.get("dtype") or config.get("torch_dtype") or "auto"


def load_engine(args):
    from vllm import LLM

    speculative = json.loads(args.speculative_config) if args.speculative_config else None
    # An explicit dtype: given "auto", vLLM downcasts a float32 checkpoint to bfloat16 on
    # CPU, and greedy decoding then leaves the float32 engine's tokens within 20 tokens.
    # disable_log_stats=False: LLM turns the statistics off by default, and
    # get_metrics() then has no counters to report.
    return LLM(model=args.model, tokenizer=args.model, dtype=args.dtype or config_dtype(args.model),
               max_model_len=args.max_model_len,
               seed=0, speculative_config=speculative, disable_log_stats=False,
               enforce_eager=args.enforce_eager)


def decode(llm, prompts, max_tokens):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], greedy, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs], [o.outputs[0].finish_reason for o in outputs]


def decode_in_groups(llm, prompts, max_tokens, batch_size):
    """Tokens, finish reasons and the wall seconds of each generate call over groups of
    ``batch_size`` prompts (all at once for 0)."""
    size = batch_size if batch_size > 0 else len(prompts)
    tokens, reasons, seconds = [], [], []
    for start in range(0, len(prompts), size):
        began = time.perf_counter()
        group_tokens, group_reasons = decode(llm, prompts[start:start + size], max_tokens)
        seconds.append(round(time.perf_counter() - began, 4))
        tokens += group_tokens
        reasons += group_reasons
    return tokens, reasons, seconds


def minus(after: dict, before: dict) -> dict:
    """Counters of ``after`` less those of ``before`` (lists position by position)."""
    out = {}
    for name, value in after.items():
        old = before.get(name)
        if isinstance(value, list):
            out[name] = [a - b for a, b in zip(value, old)] if isinstance(old, list) else value
        else:
            out[name] = value - (old or 0)
    return out


def decode_runs(llm, runs, max_tokens, speculative: bool) -> list:
    """Each run of the request decoded in turn, with the counters it added."""
    out = []
    for run in runs:
        before = metric_values(llm.get_metrics())
        tokens, reasons, seconds = decode_in_groups(llm, run["prompts"], max_tokens, run["batch_size"])
        metrics = minus(metric_values(llm.get_metrics()), before)
        result = {"batch_size": run["batch_size"], "tokens": tokens, "finish_reasons": reasons,
                  "call_seconds": seconds, "metrics": metrics}
        if speculative:
            result["spec_decode"] = {k: v for k, v in metrics.items() if k.startswith("vllm:spec_decode")}
        out.append(result)
    return out


def main(argv=None):
    args = parse_arguments(argv)
    with open(args.request) as f:
        request = json.load(f)
    prompts = request["prompts"]
    started = time.perf_counter()
    llm = load_engine(args)
    loaded = time.perf_counter()
    before = {}
    if args.warmup:
        decode(llm, prompts[:1], args.max_tokens)
        before = metric_values(llm.get_metrics())
    if request.get("runs"):
        result = {"runs": decode_runs(llm, request["runs"], args.max_tokens, bool(args.speculative_config)),
                  "dtype": str(llm.llm_engine.model_config.dtype), "load_seconds": round(loaded - started, 2)}
        with open(args.out, "w") as f:
            json.dump(result, f)
        return
    timed = time.perf_counter()
    tokens, reasons, seconds = decode_in_groups(llm, prompts, args.max_tokens, args.batch_size)
    decoded = time.perf_counter()
    metrics = minus(metric_values(llm.get_metrics()), before)
    result = {"tokens": tokens, "finish_reasons": reasons, "dtype": str(llm.llm_engine.model_config.dtype),
              "load_seconds": round(loaded - started, 2), "decode_seconds": round(decoded - timed, 3),
              "call_seconds": seconds, "metrics": metrics}
    if args.speculative_config:
        result["spec_decode"] = {k: v for k, v in metrics.items() if k.startswith("vllm:spec_decode")}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
