"""What running the GGUF as stored (gumiho.runtimes.llamacpp) changes, against the float32
dequantised target (the torch runtime), on the same prompts:

    python -m gumiho.bench.asstored --prompts benchmarks/prompts/alpaca.jsonl --limit 20 \\
        --out benchmarks/asstored/alpaca.json

* exactness: along the float32 target's own greedy continuation (teacher-forced, one
  token per forward, as decoding runs), the logit error of llama.cpp's rows (largest
  and mean absolute difference over the whole vocabulary) and how often its greedy
  choice differs; and free-running, where the two runtimes' greedy texts part;
* cost: seconds of a verify forward over 1..N tokens after a context, on each runtime
  (gumiho.engine.verifycost, the same measurement the cost-aware tree uses).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from ..engine.decode import GenerationSettings, generate
from ..engine.verifycost import measure_verify_cost
from ..errors import GumihoError
from ..files import LibraryPaths, configure
from ..loading import load_target
from .prompt_sets import load_prompts, prompt_ids
from .records import save


def one_token_rows(target, ids: list[int], continuation: list[int]) -> torch.Tensor:
    """Logits [len(continuation), V]: the row that chose each continuation token, the
    prompt prefilled and then one token per forward."""
    cache = target.new_cache()
    with torch.inference_mode():
        first = target.forward(ids, 0, cache, last_logits_only=True).logits
        rows = [first[-1]]
        for k, tok in enumerate(continuation[:-1]):
            lg = target.forward([tok], len(ids) + k, cache).logits
            rows.append(lg[-1])
    return torch.stack(rows).float()


def compare(torch_target, lc_target, prompts, max_new: int, log) -> dict:
    per_prompt, max_err, sum_err, cells, flips, positions = [], 0.0, 0.0, 0, 0, 0
    for p in prompts:
        ids = prompt_ids(torch_target, p)
        s = GenerationSettings(max_new_tokens=max_new)
        ref = generate(torch_target, prompt_ids=ids, settings=s).tokens
        mine = generate(lc_target, prompt_ids=ids, settings=s).tokens
        a, b = one_token_rows(torch_target, ids, ref), one_token_rows(lc_target, ids, ref)
        err = (a - b).abs()
        f = int((a.argmax(-1) != b.argmax(-1)).sum())
        max_err, sum_err, cells = max(max_err, float(err.max())), sum_err + float(err.sum()), cells + err.numel()
        flips, positions = flips + f, positions + len(ref)
        parted = next((k for k, (x, y) in enumerate(zip(ref, mine)) if x != y), None)
        if parted is None and len(ref) != len(mine):
            parted = min(len(ref), len(mine))
        per_prompt.append({"question_id": p.question_id, "tokens": len(ref), "greedy_choices_differing": f,
                           "max_abs_logit_error": round(float(err.max()), 4), "texts_part_at": parted})
        log(f"{p.question_id}: {f} of {len(ref)} greedy choices differ, texts part at {parted}")
    return {"prompts": per_prompt, "positions": positions, "greedy_choices_differing": flips,
            "share_differing": round(flips / max(positions, 1), 5), "max_abs_logit_error": round(max_err, 4),
            "mean_abs_logit_error": round(sum_err / max(cells, 1), 5),
            "texts_identical": sum(r["texts_part_at"] is None for r in per_prompt)}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.asstored", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="a bench prompt file (.jsonl)")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--verify-tokens", type=int, default=16, help="verify sizes 1..N for the cost curves")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, metavar="FILE.json")
    args = ap.parse_args(argv)
    try:
        torch.set_num_threads(args.threads)
        prompts = load_prompts(args.prompts, args.limit)
        torch_target = load_target(None, device="cpu", runtime="torch")
        lc_target = load_target(None, device="cpu", runtime="llama.cpp")
        exactness = compare(torch_target, lc_target, prompts, args.max_new_tokens, _log)
        cost = {}
        for name, t in (("torch", torch_target), ("llama.cpp", lc_target)):
            c = measure_verify_cost(t, args.verify_tokens)
            cost[name] = {"ms": [round(x * 1e3, 2) for x in c.measured],
                          "relative": [round(x / c.measured[0], 3) for x in c.measured]}
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {"prompts_file": Path(args.prompts).name, "max_new_tokens": args.max_new_tokens,
              "threads": args.threads, "exactness": exactness, "verify_cost": cost}
    ex = exactness
    print(f"greedy choices differing from float32: {ex['greedy_choices_differing']} of {ex['positions']} "
          f"({100 * ex['share_differing']:.2f}%); logit error max {ex['max_abs_logit_error']}, "
          f"mean {ex['mean_abs_logit_error']}; texts identical on {ex['texts_identical']} of {len(ex['prompts'])}")
    for name, c in cost.items():
        print(f"verify cost {name} (ms, 1..{args.verify_tokens} tokens): {c['ms']}")
    if args.out:
        save(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
