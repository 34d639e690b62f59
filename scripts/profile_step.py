"""Per-part timings of one speculative decode step on the real target.

Runs the decode loop of gumiho.decode.stream by hand on a fixed prompt, timing
each part of every step separately, and a vanilla step (one target forward over
one token) for comparison:

    draft    DraftSession.propose: the drafter builds the tree
    inputs   verify_inputs: ids, positions and the tree attention mask
    forward  the target forward over the whole tree (logits included)
    accept   accept_greedy
    cache    keep_tree_entries: the KV cache keeps the root and the accepted path
    extend   DraftSession.extend with the accepted positions' hidden states
    events   what stream() does per step besides (children lists for the events)

and a prefill over a long prompt (``--prefill-tokens``) with the logits of the last
position only, as the decode loop asks for them, against the logits of every position.

The drafter has random weights and a restricted draft vocabulary (as trained
drafters have), so trees have their real shape and cost but almost nothing is
accepted. Medians over the steps; the machine may be shared, so compare runs in
the same process.

    python scripts/profile_step.py --steps 60 --threads 2
    python scripts/profile_step.py --threads 2 --drafter-dtype fp32,bf16   # the drafter's precision

Run it as the bench runs (no OMP_WAIT_POLICY=PASSIVE: with it, every small
operation of a two-thread step pays for waking the second thread).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

PROMPT = ("Explain in a few short paragraphs why the sky is blue during the day and red at sunset, "
          "and what role the atmosphere plays in both.")
PARTS = ("draft", "inputs", "forward", "accept", "cache", "extend", "events")


def make_drafter(g, target, kind="gumiho", draft_vocab=8192, seed=0):
    """A random-weight drafter of package ``g`` with a restricted draft vocabulary."""
    torch.manual_seed(seed)
    drafter = g.Drafter(g.DrafterConfig.for_target(target.config, kind)).eval().attach_target(target.model)
    with torch.no_grad():  # wake the zero-initialised residual blocks so every head really computes
        for head in drafter.heads:
            for block in head:
                block.linear.weight.normal_(0, 0.02)
    drafter.set_draft_vocab(torch.arange(draft_vocab))
    return drafter


def _new_cache(g):
    """The KV cache the decode loop of package ``g`` uses."""
    from importlib import import_module

    from transformers import DynamicCache

    factory = getattr(import_module(g.__name__ + ".kvcache"), "new_cache", None)
    return factory() if factory is not None else DynamicCache()


def spec_steps(g, target, drafter, prompt_ids, steps, settings):
    """Per-part times (seconds) of ``steps`` greedy speculative steps of package ``g``."""
    from importlib import import_module

    kv = import_module(g.__name__ + ".kvcache")
    tr = import_module(g.__name__ + ".tree")
    ve = import_module(g.__name__ + ".verify")

    times = {p: [] for p in PARTS}
    sizes = []
    clock = time.perf_counter
    with torch.inference_mode():
        cache = _new_cache(g)
        n = len(prompt_ids)
        hidden, logits = target.forward(torch.tensor([prompt_ids]), torch.arange(n)[None], None, cache)
        last = int(logits[-1].argmax())
        session = drafter.new_session()
        session.extend(hidden, torch.tensor(prompt_ids[1:] + [last]))
        past = n
        for _ in range(steps):
            t0 = clock()
            tree = session.propose(last, settings)
            t1 = clock()
            ids, pos, mask = tr.verify_inputs(tree, past, target.device, target.dtype)
            t2 = clock()
            hidden, logits = target.forward(ids, pos, mask, cache)
            t3 = clock()
            acc = ve.accept_greedy(tree, logits)
            t4 = clock()
            kept = [0] + acc.path
            kv.keep_tree_entries(cache, past, kept)
            t5 = clock()
            new_tokens = [tree.tokens[i] for i in acc.path] + [acc.bonus]
            session.extend(hidden[kept], torch.tensor(new_tokens))
            t6 = clock()
            stop_node = acc.path[-1] if acc.path else 0
            _ = [tree.tokens[c] for c in tree.children()[stop_node]]
            t7 = clock()
            for p, a, b in zip(PARTS, (t0, t1, t2, t3, t4, t5, t6), (t1, t2, t3, t4, t5, t6, t7)):
                times[p].append(b - a)
            sizes.append(len(tree))
            past += len(new_tokens)
            last = new_tokens[-1]
    return times, sizes


def vanilla_steps(g, target, prompt_ids, steps):
    """Times of ``steps`` vanilla steps: one target forward over one token (plus argmax)."""
    out = []
    with torch.inference_mode():
        cache = _new_cache(g)
        n = len(prompt_ids)
        _, logits = target.forward(torch.tensor([prompt_ids]), torch.arange(n)[None], None, cache)
        last = int(logits[-1].argmax())
        for i in range(steps):
            t0 = time.perf_counter()
            _, logits = target.forward(torch.tensor([[last]]), torch.tensor([[n + i]]), None, cache)
            last = int(logits[-1].argmax())
            out.append(time.perf_counter() - t0)
    return out


def prefill_times(g, target, prompt_ids, rounds):
    """Median seconds of a prefill over ``prompt_ids`` with the logits of the last
    position only (what the decode loop does) and with the logits of every position."""
    out = {True: [], False: []}
    with torch.inference_mode():
        for _ in range(rounds):
            for last_only in (True, False):
                cache = _new_cache(g)
                t0 = time.perf_counter()
                target.forward(torch.tensor([prompt_ids]), torch.arange(len(prompt_ids))[None], None, cache,
                               last_logits_only=last_only)
                out[last_only].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def med_ms(xs):
    return 1000 * statistics.median(xs)


def report(name, times, sizes):
    total = [sum(ts) for ts in zip(*times.values())]
    parts = "  ".join(f"{p} {med_ms(times[p]):6.2f}" for p in PARTS)
    print(f"{name:>10}: {parts}  | step {med_ms(total):6.2f} ms  (tree {statistics.median(sizes):.0f} nodes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3, help="alternating speculative/vanilla rounds")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--kind", default="gumiho", choices=["gumiho", "serial", "parallel"])
    ap.add_argument("--drafter-dtype", default="auto",
                    help="the drafter's dtype (gumiho.models.drafter_dtype: auto, fp32, bf16); several, comma-"
                         "separated, are timed in alternating rounds of the same process")
    ap.add_argument("--total-tokens", type=int, default=None,
                    help="tree size (default: the device's tree, TreeSettings.for_device)")
    ap.add_argument("--prefill-tokens", type=int, default=800,
                    help="also time a prefill of this many tokens, logits of the last position vs all (0: skip)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import gumiho as g

    target = g.load_target(None, device="cpu")
    from importlib import import_module

    pick = getattr(import_module(g.__name__ + ".models"), "drafter_dtype", None)
    drafters = {}
    for name in [n.strip() for n in args.drafter_dtype.split(",") if n.strip()]:
        drafter = make_drafter(g, target, args.kind)
        drafters[name] = drafter.to(pick(target, name)) if pick else drafter
    # The tree the engine uses on this device (what the benchmarks run), optionally resized.
    settings = g.TreeSettings.for_device(target.device)
    if args.total_tokens is not None:
        settings = dataclasses.replace(settings, total_tokens=args.total_tokens)
    prompt_ids = target.encode(PROMPT)
    dtypes = ", ".join(f"{n}: {str(d.fc.weight.dtype).replace('torch.', '')}" for n, d in drafters.items())
    print(f"threads {torch.get_num_threads()}, prompt {len(prompt_ids)} tokens, {args.steps} steps x {args.rounds}, "
          f"{args.kind} drafter ({dtypes}), {settings}")
    for drafter in drafters.values():
        spec_steps(g, target, drafter, prompt_ids, 3, settings)  # warm-up
    all_times = {n: {p: [] for p in PARTS} for n in drafters}
    all_sizes = {n: [] for n in drafters}
    van = []
    for _ in range(args.rounds):
        for name, drafter in drafters.items():
            times, sizes = spec_steps(g, target, drafter, prompt_ids, args.steps, settings)
            for p in PARTS:
                all_times[name][p] += times[p]
            all_sizes[name] += sizes
        van += vanilla_steps(g, target, prompt_ids, args.steps)
    print(f"{'vanilla':>10}: forward {med_ms(van):6.2f} ms per step")
    for name in drafters:
        report(f"spec {name}" if len(drafters) > 1 else "spec", all_times[name], all_sizes[name])
        step = med_ms([sum(ts) for ts in zip(*all_times[name].values())])
        print(f"{'':>10}  break-even tau (spec step / vanilla step): {step / med_ms(van):.2f}")
    if args.prefill_tokens:
        text = PROMPT
        while len(target.encode(text)) < args.prefill_tokens:
            text = text + " " + PROMPT
        long_ids = target.encode(text)[: args.prefill_tokens]
        pre = prefill_times(g, target, long_ids, args.rounds)
        print(f"prefill of {len(long_ids)} tokens: {1000 * pre[True]:.0f} ms with the last position's logits only "
              f"(the decode loop), {1000 * pre[False]:.0f} ms with every position's ({pre[False] / pre[True]:.2f}x)")


if __name__ == "__main__":
    main()
