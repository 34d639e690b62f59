"""The app's GPU path, measured before a Space pays for it: on a machine with a CUDA
GPU, the app's own race and walkthrough (app.race.run.compute_race, app.walkthrough.steps.
compute_walk, through a ModelHub as the server builds it) with the paper's tree, on
the default model and its shipped Gumiho drafter.

For every prompt it checks that Gumiho's text is vanilla's, token by token (greedy),
and records each method's wall time, tau and tokens/s; then it counts the host-device
synchronisations of one generation of each method per target forward, with
``torch.cuda.set_sync_debug_mode("warn")`` (torch warns at every call that makes the
host wait for the device: ``.item()``, ``.tolist()``, a copy to the CPU, ...), so the
decode loop's cost on a GPU beyond its kernels is known. It writes one JSON record
and exits 1 if a text differs.

    python research/gpu_check.py --out gpu_check.json            # on a CUDA machine
    python research/gpu_check.py --device cpu --max-new-tokens 8  # the same path on a CPU (no sync count)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPTS = ["Write a haiku about the sea.", "Explain in two sentences why the sky is blue.",
           "List three uses of a paperclip.", "What is 17 times 23? Show your working."]


def count_syncs(fn) -> tuple[object, int]:
    """``fn()``'s result and the synchronisations torch reported while it ran (0
    where there is no CUDA: nothing to count)."""
    import torch

    if not torch.cuda.is_available():
        return fn(), 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return out, sum("synchroniz" in str(w.message).lower() for w in caught)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="how many of the built-in prompts")
    ap.add_argument("--out", help="write the record here as JSON")
    args = ap.parse_args(argv)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU here; run on a machine with one, or --device cpu", file=sys.stderr)
        return 2
    from app.core import zerogpu
    from app.core.forms import PAPER_SHAPE, RaceForm, parse_request
    from app.models.hub import ModelHub
    from app.race.run import compute_race
    from app.walkthrough.steps import compute_walk, walk_request
    from gumiho import GenerationSettings, stream
    from gumiho.files import LibraryPaths, configure
    from gumiho.loading import load_target

    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    zerogpu.model_device = lambda: args.device  # the device the hub loads on and sizes trees for
    t0 = time.perf_counter()
    hub = ModelHub(default_loader=lambda: load_target(None, device=args.device)).start()
    hub.wait_ready()
    if not hub.ready:
        print(f"error: the default model did not load: {hub.error}", file=sys.stderr)
        return 2
    record = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "load_and_warm_s": round(time.perf_counter() - t0, 2),
              "max_new_tokens": args.max_new_tokens, "races": [], "walks": [], "syncs": {}}
    failed = False
    for prompt in PROMPTS[:args.prompts]:
        req = parse_request(RaceForm(prompt, args.max_new_tokens, 0.0, 1.0, 0, 7, 10, 63, tree_shape=PAPER_SHAPE))
        res = hub.submit(lambda: compute_race(hub, req, threading.Event())).result()
        v, g = res.vanilla.stats(), res.gumiho.stats()
        same = [t for e in res.vanilla.events for t in e.tokens] == [t for e in res.gumiho.events for t in e.tokens]
        failed |= not same
        record["races"].append({"prompt": prompt, "identical": same, "tokens": g.new_tokens, "tau": round(g.tau, 3),
                                "vanilla_s": round(res.vanilla.wall_s, 4), "gumiho_s": round(res.gumiho.wall_s, 4),
                                "vanilla_tokens_per_s": round(v.tokens_per_s, 2),
                                "gumiho_tokens_per_s": round(g.tokens_per_s, 2),
                                "speedup": round(res.vanilla.wall_s / res.gumiho.wall_s, 3) if res.gumiho.wall_s else None,
                                "acceptance_by_position": [round(x, 3) for x in g.acceptance_by_position(7)],
                                "tree_nodes": req.settings.tree.total_tokens})
        print(json.dumps(record["races"][-1]), flush=True)
        wreq = walk_request(RaceForm(prompt, min(args.max_new_tokens, 48), tree_depth=7, tree_top_k=10, tree_nodes=63), "paper")
        walk = hub.submit(lambda: compute_walk(hub, wreq, threading.Event())).result()
        record["walks"].append({"prompt": prompt, "verify_steps": len(walk.steps),
                                "heads": sorted({h for s in walk.steps for h in s.heads} - {"root"})})

    # Synchronisations per target forward, one generation of each method (after the above warmed everything).
    target = hub.default
    drafter = hub.resolve("", "gumiho", "").drafter
    ids = target.encode(PROMPTS[0])
    tree = parse_request(RaceForm(PROMPTS[0], 8, 0.0, 1.0, 0, 7, 10, 63, tree_shape=PAPER_SHAPE)).settings.tree
    for name, d in (("vanilla", None), ("gumiho", drafter)):
        settings = GenerationSettings(max_new_tokens=args.max_new_tokens, tree=tree)
        events, n = hub.submit(lambda: count_syncs(lambda: list(stream(target, ids, d, settings)))).result()
        record["syncs"][name] = {"target_forwards": len(events), "syncs": n,
                                 "per_forward": round(n / max(1, len(events)), 2) if args.device == "cuda" else None}
    print(json.dumps(record["syncs"]), flush=True)
    record["all_identical"] = not failed
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
    print("every text identical to vanilla" if not failed else "A TEXT DIFFERS FROM VANILLA")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
