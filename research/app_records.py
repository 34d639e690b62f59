"""The app's JSON API answers on fixed seeds, written to a file, so that a refactor can be
checked for behaviour kept: run this on the old tree and on the new one, and diff.

    PYTHONPATH=. python research/app_records.py --out benchmarks/refactor_check/app/after.json

It builds the four endpoints (/race, /walkthrough, /compare, /lossless_check) as the page
does (``add_api`` inside a Blocks) and calls their handlers in this process, on the default
model loaded as the app tests load it (its runtime chosen by the library's "auto", not by
the environment). Every call but one is live; at least one of each endpoint has every
setting away from its default. What depends on the clock is dropped from every answer
(``CLOCK_KEYS``, and for the cost-aware race everything but the texts: a tree sized by
measured cost drafts differently from run to run, though its greedy text cannot change).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = "Explain in three sentences why bread rises in the oven."  # one of assets/examples.json
PROMPT = "Write two sentences about a cat that learns to play the piano."

# Keys whose values come from the clock (or from what ran before: the line, shared run ids).
CLOCK_KEYS = re.compile(r"(_s$|seconds|per_s|speed|time|wall|queue|run_id|recorded_on|machine|busy|fastest|"
                        r"findings|predict)")
# The only keys kept of an answer whose tree was sized by the measured cost of a verify:
# at the top, and in each decoder's part (its greedy text is the target's whatever the tree).
TEXT_KEYS = ("ok", "source", "prompt", "message", "model", "vanilla", "gumiho")
DECODER_TEXT_KEYS = ("text", "tokens", "new_tokens", "finish_reason")

# (endpoint, name of this call, its arguments). "live" everywhere but the first call, an
# example prompt at the recorded settings, which the recording answers.
CALLS = [
    ("race", "recorded example", {"prompt": EXAMPLE}),
    ("race", "defaults, live", {"prompt": PROMPT, "max_new_tokens": 16, "live": True}),
    ("race", "every setting changed", {"prompt": PROMPT, "max_new_tokens": 12, "temperature": 0.7, "top_p": 0.9,
                                       "seed": 1234, "tree_depth": 3, "tree_top_k": 2, "tree_nodes": 6,
                                       "drafter": "serial", "copy_from_context": False, "target_weights": "float32",
                                       "live": True}),
    ("race", "cost-aware tree, 4-bit file", {"prompt": PROMPT, "max_new_tokens": 12, "tree_cost_aware": True,
                                             "target_weights": "as stored", "drafter": "parallel", "live": True}),
    ("race", "refused", {"prompt": PROMPT, "temperature": 9.0, "live": True}),
    ("walkthrough", "every setting changed", {"prompt": PROMPT, "max_new_tokens": 8, "tree": "race",
                                              "drafter": "serial", "temperature": 0.6, "seed": 7, "live": True}),
    ("walkthrough", "defaults, live", {"prompt": PROMPT, "max_new_tokens": 6, "live": True}),
    ("compare", "every setting changed", {"prompt": PROMPT, "max_new_tokens": 8, "tree_shape": "sized",
                                          "tree_depth": 2, "tree_top_k": 2, "tree_nodes": 4,
                                          "tree_cost_aware": False, "target_weights": "float32", "copy_alone": True,
                                          "gumiho_with_copy": True, "live": True}),
    ("lossless_check", "every setting changed", {"prompt": PROMPT, "temperature": 0.5, "samples": 12, "tokens": 3,
                                                 "rule": "keep_drafts", "seed": 5, "live": True}),
    ("lossless_check", "refused", {"prompt": PROMPT, "tokens": 1, "live": True}),
]


def clock_free(value, text_only: bool = False):
    """``value`` without the clock's keys (recursively); only TEXT_KEYS at the top when ``text_only``."""
    if isinstance(value, dict):
        kept = {k: clock_free(v) for k, v in value.items() if not CLOCK_KEYS.search(str(k))}
        if not text_only:
            return kept
        return {k: {d: v[d] for d in DECODER_TEXT_KEYS if d in v} if isinstance(v, dict) else v
                for k, v in kept.items() if k in TEXT_KEYS}
    if isinstance(value, list):
        return [clock_free(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)  # beyond the sixth decimal a float is the printer's, not the app's
    return value


def endpoints(hub, replays) -> dict:
    """The API's handlers by name, registered as the page registers them."""
    import gradio as gr

    from app.web.api import add_api

    with gr.Blocks() as demo:
        add_api(hub, replays)
    return {fn.api_name: fn.fn for fn in demo.fns.values() if fn.api_name in {c[0] for c in CALLS}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args()
    sys.path.insert(0, os.getcwd())
    from app.models.hub import ModelHub
    from app.replays import Replays
    from gumiho.files import LibraryPaths, configure
    from gumiho.loading import load_target

    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    hub = ModelHub(default_loader=lambda: load_target(None, runtime="auto"), warmup=False).start()
    if not hub.wait_ready(600):
        raise SystemExit(f"the default model did not load: {hub.error}")
    replays = Replays(hub, os.path.join(ROOT, "assets", "recordings", "examples.pkl.gz"))
    handlers = endpoints(hub, replays)
    records = []
    try:
        for endpoint, name, kwargs in CALLS:
            answer = asyncio.run(handlers[endpoint](**kwargs))
            records.append({"endpoint": endpoint, "call": name, "arguments": kwargs,
                            "answer": clock_free(answer, text_only=bool(kwargs.get("tree_cost_aware")))})
            print(f"{endpoint:15s} {name:30s} ok={answer.get('ok', True)} source={answer.get('source')}", flush=True)
    finally:
        hub.close(5)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(records, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
