"""Per-part timings of one speculative decode step on the real target.

Runs the decode loop of gumiho.engine.decode.stream by hand on a fixed prompt, timing
each part of every step separately, and a vanilla step (one target forward over
one token) for comparison:

    draft    DraftSession.propose: the drafter builds the tree
    inputs   verify_inputs: ids, positions and the tree attention mask
    forward  the target forward over the whole tree (logits included)
    accept   accept_greedy
    cache    Target.keep: the KV cache keeps the root and the accepted path
    extend   DraftSession.extend with the accepted positions' hidden states
    events   what stream() does per step besides (children lists for the events)

and a prefill over a long prompt (``--prefill-tokens``) with the logits of the last
position only, as the decode loop asks for them, against the logits of every position.

By default the drafter has random weights and a restricted draft vocabulary (as
trained drafters have), so trees have their real shape and cost but almost nothing
is accepted: every extend is one position. Medians over the steps; the machine may
be shared, so compare runs in the same process.

With ``--drafter`` (a trained drafter) and ``--prompts`` (a benchmark prompt file)
the steps are those of real decoding: accepted paths of every length, so the
extend and the cache update do their real work, contexts of the prompts' lengths.
Accepted lengths vary from step to step, so the figures are means (the bench's
wall time is their sum), and the mean new tokens per step (tau) turns the
break-even figure into the speedup these steps would give. Every prompt runs
``--steps`` steps (past its end of answer, if it comes sooner).

    python research/profile_step.py --steps 60 --threads 2
    python research/profile_step.py --threads 2 --drafter-dtype fp32,bf16   # the drafter's precision
    python research/profile_step.py --threads 2 --prefill-tokens 0 --steps 32 --rounds 2 \
        --drafter assets/drafters/smollm2-135m-gumiho --prompts benchmarks/prompts/mt_bench.jsonl --limit 10

``--verify-sizes 1,7,9,11,13`` also times target forwards over trees of those node
counts (what a bigger tree would cost); ``--ops N`` lists where the time of a
one-token forward and of a verify forward goes, operation by operation.

``--feature-layers default`` (or ``2,15,27``) gives the random drafter fused target
features (EAGLE-3), so the steps above are a fused drafter's, and times the target's
forwards (over one token, and over the tree) with and without handing those layers'
states over, interleaved:

    python research/profile_step.py --threads 2 --prefill-tokens 0 --feature-layers default

Run it as the bench runs (no OMP_WAIT_POLICY=PASSIVE: with it, every small
operation of a two-thread step pays for waking the second thread).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import time
from importlib import import_module

import torch

PROMPT = ("Explain in a few short paragraphs why the sky is blue during the day and red at sunset, "
          "and what role the atmosphere plays in both.")
PARTS = ("draft", "inputs", "forward", "accept", "cache", "extend", "events")


def make_drafter(g, target, kind="gumiho", draft_vocab=8192, seed=0, feature_layers=None):
    """A random-weight drafter of package ``g`` with a restricted draft vocabulary
    (reading the target's ``feature_layers``, fused, where given)."""
    torch.manual_seed(seed)
    fused = {"feature_layers": feature_layers} if feature_layers else {}  # older packages have no such field
    drafter = g.Drafter(g.DrafterConfig.for_target(target.config, kind, **fused)).eval().attach_target(target.model)
    with torch.no_grad():  # wake the zero-initialised residual blocks so every head really computes
        for head in drafter.heads:
            for block in head:
                block.linear.weight.normal_(0, 0.02)
    drafter.set_draft_vocab(torch.arange(draft_vocab))
    return drafter


def _parents_from_mask(mask, past: int) -> list:
    """A tree's parents read back from its additive mask [1,1,T,P+T]: a node's parent
    is its deepest visible earlier node (-1 for the root)."""
    visible = (mask[0, 0, :, past:] == 0).tolist()
    return [max((j for j in range(i) if row[j]), default=-1) for i, row in enumerate(visible)]


def _forward(target, ids, pos, mask, cache, *args, **kw):
    """A target forward from (ids, positions, mask) tensors, on either generation of the
    package: Target.forward(ids, positions, mask, cache, ...) before the runtime seam,
    Target.forward(tokens, past, cache, parents, ...) after it (a target with keep())."""
    if not hasattr(target, "keep"):
        return target.forward(ids, pos, mask, cache, *args, **kw)
    past = int(pos.reshape(-1)[0])
    parents = None if mask is None else _parents_from_mask(mask, past)
    if args:  # last_logits_only given by position
        kw["last_logits_only"] = args[0]
    out = target.forward([int(t) for t in ids.reshape(-1).tolist()], past, cache, parents, **kw)
    if hasattr(out, "drafter_states"):  # a Forward: (the states the drafter reads, the logits)
        return out.drafter_states, out.logits
    return out


def _module(g, *names):
    """The first of package ``g``'s modules ``names`` that it has (a module moved between revisions)."""
    for name in names:
        try:
            return import_module(f"{g.__name__}.{name}")
        except ModuleNotFoundError as e:
            if not f"{g.__name__}.{name}".startswith(e.name or "\0"):
                raise  # the module is there, and something it imports is not
            continue
    raise ModuleNotFoundError(f"{g.__name__} has none of {', '.join(names)}")


def _new_cache(g, target):
    """The KV cache the decode loop of package ``g`` uses: the target's own (its runtime's)
    since the runtime seam, the torch one of ``kvcache`` before it."""
    if hasattr(target, "new_cache"):
        return target.new_cache()
    from transformers import DynamicCache

    factory = getattr(_module(g, "kvcache"), "new_cache", None)
    return factory() if factory is not None else DynamicCache()


def _keep(g, target, cache, past, kept):
    """The cache keeps the prompt's ``past`` entries and the last forward's ``kept`` nodes,
    as the decode loop of package ``g`` asks for it (Target.keep since the runtime seam)."""
    if hasattr(target, "keep"):
        target.keep(cache, past, kept)
    else:
        _module(g, "kvcache").keep_tree_entries(cache, past, kept)


def _configure_paths(g):
    """The script's entry: package ``g``'s paths outside a clone (its cache folder) read from
    the environment once, where ``g`` has them to set (older packages read the environment
    themselves)."""
    try:
        files = _module(g, "files")
    except ModuleNotFoundError:
        return
    if hasattr(files, "LibraryPaths"):
        files.configure(files.LibraryPaths.from_environment(os.environ))


def _verify_inputs(g, tree, past, target):
    """(ids, positions, mask) of a verify forward over ``tree``, by package ``g``'s own
    function (in gumiho.runtimes.treemask since the runtime seam, in gumiho.tree before)."""
    module = _module(g, "runtimes.treemask", "tree")
    return module.verify_inputs(tree, past, target.device, target.dtype)


def features_kw(drafter) -> dict:
    """The keyword that makes a target forward hand over what ``drafter`` reads, as
    the decode loop asks for it: its fused layers' states, if it has any (none for
    drafters of packages older than fused features)."""
    layers = getattr(drafter.cfg, "feature_layers", None)
    return {"feature_layers": layers} if layers else {}


def _session(g, drafter, prompt_ids):
    """A drafting session of package ``g`` started on ``prompt_ids`` (packages before
    the proposer interface: ``drafter.new_session()``)."""
    if hasattr(drafter, "new_session"):
        return drafter.new_session()
    return g.as_proposer(drafter).start(prompt_ids)


def _feed(g, session, states, tokens, next_ids, tree=None, accepted=()):
    """Hand the session what the target settled: the interface's ``update``, or an
    older package's ``extend`` of (state, next token) pairs."""
    if hasattr(session, "update"):
        session.update(g.Verified(tokens=list(tokens), states=states, tree=tree, accepted=list(accepted)))
    else:
        session.extend(states, torch.tensor(next_ids))


def _propose(g, session, last, settings):
    """``session.propose`` as package ``g`` calls it (a Budget since the proposer interface)."""
    return session.propose(last, g.Budget(settings) if hasattr(g, "Budget") else settings)


def after_prompt(g, target, drafter, prompt_ids):
    """The state after the prompt's prefill: the target's cache, a drafting session
    that has read the prompt, and the first token (greedy). Call in inference mode."""
    cache = _new_cache(g, target)
    n = len(prompt_ids)
    hidden, logits = _forward(target, torch.tensor([prompt_ids]), torch.arange(n)[None], None, cache,
                                    **features_kw(drafter))
    last = int(logits[-1].argmax())
    session = _session(g, drafter, prompt_ids)
    _feed(g, session, hidden, [last], prompt_ids[1:] + [last])
    return cache, session, last


def spec_steps(g, target, drafter, prompt_ids, steps, settings, added=None):
    """Per-part times (seconds) of ``steps`` greedy speculative steps of package ``g``
    (and, appended to the list ``added`` when given, how many tokens each step added)."""
    ve = import_module(g.__name__ + ".engine.acceptance")

    times = {p: [] for p in PARTS}
    sizes = []
    clock = time.perf_counter
    fused = features_kw(drafter)
    with torch.inference_mode():
        cache, session, last = after_prompt(g, target, drafter, prompt_ids)
        past = len(prompt_ids)
        for _ in range(steps):
            t0 = clock()
            tree = _propose(g, session, last, settings)
            t1 = clock()
            ids, pos, mask = _verify_inputs(g, tree, past, target)
            t2 = clock()
            hidden, logits = _forward(target, ids, pos, mask, cache, **fused)
            t3 = clock()
            acc = ve.accept_greedy(tree, logits)
            t4 = clock()
            kept = [0] + acc.path
            _keep(g, target, cache, past, kept)
            t5 = clock()
            new_tokens = [tree.tokens[i] for i in acc.path] + [acc.bonus]
            _feed(g, session, hidden[kept], new_tokens, new_tokens, tree, acc.path)
            t6 = clock()
            stop_node = acc.path[-1] if acc.path else 0
            _ = [tree.tokens[c] for c in tree.children()[stop_node]]
            t7 = clock()
            for p, a, b in zip(PARTS, (t0, t1, t2, t3, t4, t5, t6), (t1, t2, t3, t4, t5, t6, t7)):
                times[p].append(b - a)
            sizes.append(len(tree))
            if added is not None:
                added.append(len(new_tokens))
            past += len(new_tokens)
            last = new_tokens[-1]
    return times, sizes


def vanilla_steps(g, target, prompt_ids, steps):
    """Times of ``steps`` vanilla steps: one target forward over one token (plus argmax)."""
    out = []
    with torch.inference_mode():
        cache = _new_cache(g, target)
        n = len(prompt_ids)
        _, logits = _forward(target, torch.tensor([prompt_ids]), torch.arange(n)[None], None, cache)
        last = int(logits[-1].argmax())
        for i in range(steps):
            t0 = time.perf_counter()
            _, logits = _forward(target, torch.tensor([[last]]), torch.tensor([[n + i]]), None, cache)
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
                cache = _new_cache(g, target)
                t0 = time.perf_counter()
                _forward(target, torch.tensor([prompt_ids]), torch.arange(len(prompt_ids))[None], None, cache,
                               last_logits_only=last_only)
                out[last_only].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def forward_inputs(g, target, session, last, n_prompt, settings=None):
    """(ids, positions, mask) of a target forward right after the prompt: over the
    tree the drafter proposes below ``last`` with ``settings``, or, with no settings,
    over the one token ``last`` (a vanilla step)."""
    if settings is None:
        return torch.tensor([[last]]), torch.tensor([[n_prompt]]), None
    tree = _propose(g, session, last, settings)
    return _verify_inputs(g, tree, n_prompt, target)


def op_times(g, target, drafter, prompt_ids, settings, forwards=20):
    """Self CPU time per target forward of each operation (torch.profiler), for a
    one-token forward and for a verify forward over the tree the drafter proposes
    after the prompt: {op name: (ms one token, ms tree)}, and the tree's size."""
    from torch.profiler import ProfilerActivity, profile

    n = len(prompt_ids)
    out = {}
    with torch.inference_mode():
        cache, session, last = after_prompt(g, target, drafter, prompt_ids)
        inputs = {"one": forward_inputs(g, target, session, last, n),
                  "tree": forward_inputs(g, target, session, last, n, settings)}
        for name, args in inputs.items():
            for profiled in (False, True):  # one unprofiled forward first, as a warm-up
                with profile(activities=[ProfilerActivity.CPU]) if profiled else contextlib.nullcontext() as prof:
                    for _ in range(forwards if profiled else 1):
                        _forward(target, *args, cache)
                        _keep(g, target, cache, n, [])  # back to the prompt's cache
            out[name] = {e.key: e.self_cpu_time_total / 1000 / forwards for e in prof.key_averages()}
    names = set(out["one"]) | set(out["tree"])
    return {k: (out["one"].get(k, 0.0), out["tree"].get(k, 0.0)) for k in names}, inputs["tree"][0].shape[1]


def verify_times(g, target, drafter, prompt_ids, settings, sizes, rounds=15):
    """Median seconds of a target forward over a tree of each node count in ``sizes``
    (root included; 1 = a one-token forward), the trees the drafter proposes after the
    prompt with a budget of that many nodes, the sizes interleaved round by round."""
    n_prompt = len(prompt_ids)
    with torch.inference_mode():
        cache, session, last = after_prompt(g, target, drafter, prompt_ids)
        calls = {n: (forward_inputs(g, target, session, last, n_prompt, None if n == 1 else dataclasses.replace(
            settings, total_tokens=n - 1, full_tree=False, full_tree_tokens=0)), {}) for n in sizes}
        return forward_medians(g, target, cache, n_prompt, calls, rounds)


def feature_times(g, target, drafter, prompt_ids, settings, layers, rounds=30):
    """Median seconds of a one-token target forward and of one over the tree the
    drafter proposes after the prompt, each plain and handing over the states of
    ``layers`` (a fused drafter's: Target.forward(feature_layers=...)), interleaved:
    {(name, fused): seconds} with name "one" or "tree", and the tree's size."""
    n_prompt = len(prompt_ids)
    with torch.inference_mode():
        cache, session, last = after_prompt(g, target, drafter, prompt_ids)
        inputs = {"one": forward_inputs(g, target, session, last, n_prompt),
                  "tree": forward_inputs(g, target, session, last, n_prompt, settings)}
        calls = {(name, fused): (args, {"feature_layers": layers} if fused else {})
                 for name, args in inputs.items() for fused in (False, True)}
        return forward_medians(g, target, cache, n_prompt, calls, rounds), inputs["tree"][0].shape[1]


def forward_medians(g, target, cache, n_prompt, calls, rounds):
    """Median seconds of each target forward of ``calls`` ({key: ((ids, positions,
    mask), keywords)}) after a cache of the ``n_prompt`` prompt tokens, the calls
    interleaved round by round, the cache cut back to the prompt after each."""
    out = {key: [] for key in calls}
    for _ in range(rounds):
        for key, (args, kw) in calls.items():
            t0 = time.perf_counter()
            _forward(target, *args, cache, **kw)
            out[key].append(time.perf_counter() - t0)
            _keep(g, target, cache, n_prompt, [])  # back to the prompt's cache
    return {key: statistics.median(v) for key, v in out.items()}


def print_op_times(times, tree_size, top):
    print(f"self CPU ms per target forward (torch.profiler; its own overhead included), one token vs the "
          f"{tree_size}-node tree:")
    ranked = sorted(times.items(), key=lambda kv: -max(kv[1]))[:top]
    for name, (one, tree) in ranked:
        print(f"  {name:<55} {one:7.2f} {tree:7.2f}  {tree - one:+6.2f}")
    one, tree = (sum(v[i] for v in times.values()) for i in (0, 1))
    print(f"  {'all operations':<55} {one:7.2f} {tree:7.2f}  {tree - one:+6.2f}")


def med_ms(xs):
    return 1000 * statistics.median(xs)


def mean_ms(xs):
    return 1000 * statistics.mean(xs)


def report(name, times, sizes, stat=med_ms):
    total = [sum(ts) for ts in zip(*times.values())]
    parts = "  ".join(f"{p} {stat(times[p]):6.2f}" for p in PARTS)
    print(f"{name:>10}: {parts}  | step {stat(total):6.2f} ms  (tree {statistics.median(sizes):.0f} nodes)")


def load_drafters(g, target, args, pick):
    """One drafter per requested dtype: the trained one of ``--drafter``, or random."""
    drafters = {}
    for name in [n.strip() for n in args.drafter_dtype.split(",") if n.strip()]:
        if args.drafter:
            drafters[name] = g.load_drafter(args.drafter, target, dtype=name)
        else:
            drafter = make_drafter(g, target, args.kind, feature_layers=args.feature_layers)
            drafters[name] = drafter.to(pick(target, name)) if pick else drafter
    return drafters


def prompt_list(g, target, args):
    """Token ids of the prompts to time: ``--prompts`` (the bench's reading of a
    prompt file, its chat template included) or the one fixed prompt."""
    if not args.prompts:
        return [target.encode(PROMPT)]
    bench = import_module(g.__name__ + ".bench")
    ids_of = getattr(bench, "prompt_ids", None) or bench._prompt_ids  # the private name in older packages
    return [ids_of(target, p) for p in bench.load_prompts(args.prompts, limit=args.limit)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="steps per prompt and round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating speculative/vanilla rounds")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--kind", default="gumiho", choices=["gumiho", "serial", "parallel", "eagle"],
                    help="the random drafter's kind (without --drafter)")
    ap.add_argument("--feature-layers", default=None, metavar="none|default|L1,L2,...",
                    help="the random drafter reads these target layers, fused (EAGLE-3; 'default': 2, N/2, N-3 of "
                         "N), and the target's forwards are also timed with and without handing them over")
    ap.add_argument("--drafter", default=None,
                    help="a trained drafter folder (default: a random-weight drafter, which accepts almost nothing)")
    ap.add_argument("--prompts", default=None, help="a benchmark prompt file (.jsonl) to decode instead of one "
                                                    "fixed prompt")
    ap.add_argument("--limit", type=int, default=10, help="prompts read from --prompts")
    ap.add_argument("--drafter-dtype", default="auto",
                    help="the drafter's dtype (gumiho.loading.drafter_dtype: auto, fp32, bf16); several, comma-"
                         "separated, are timed in alternating rounds of the same process")
    ap.add_argument("--total-tokens", type=int, default=None,
                    help="tree size (default: the device's tree, TreeSettings.for_device)")
    ap.add_argument("--prefill-tokens", type=int, default=800,
                    help="also time a prefill of this many tokens, logits of the last position vs all (0: skip)")
    ap.add_argument("--verify-sizes", default="",
                    help="also time target forwards over trees of these node counts, comma-separated, root "
                         "included (1: a one-token forward), interleaved in one process")
    ap.add_argument("--ops", type=int, default=0,
                    help="also list the N operations that take the most time in a one-token target forward and "
                         "in a verify forward over a tree (0: skip)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import gumiho as g

    _configure_paths(g)
    if args.feature_layers in (None, "none"):  # read as training's --feature-layers reads it
        args.feature_layers = None
    else:
        from gumiho.train.__main__ import parse_feature_layers

        try:
            args.feature_layers = parse_feature_layers(args.feature_layers)
        except g.GumihoError as e:
            ap.error(str(e))
    target = g.load_target(None, device="cpu")
    pick = getattr(_module(g, "loading", "models"), "drafter_dtype", None)
    drafters = load_drafters(g, target, args, pick)
    # The tree the engine uses on this device (what the benchmarks run), optionally resized.
    settings = g.TreeSettings.for_device(target.device)
    if args.total_tokens is not None:
        settings = dataclasses.replace(settings, total_tokens=args.total_tokens)
    prompts = prompt_list(g, target, args)
    stat, stat_name = (mean_ms, "means") if args.drafter else (med_ms, "medians")
    dtypes = ", ".join(f"{n}: {str(d.weight_dtype).replace('torch.', '')}" for n, d in drafters.items())
    who = f"drafter {args.drafter}" if args.drafter else f"random {args.kind} drafter"
    lengths = sorted(len(p) for p in prompts)
    print(f"threads {torch.get_num_threads()}, {len(prompts)} prompt(s) of {lengths[0]}-{lengths[-1]} tokens, "
          f"{args.steps} steps x {args.rounds} rounds each, {who} ({dtypes}), {settings}; {stat_name} per step")
    for drafter in drafters.values():
        spec_steps(g, target, drafter, prompts[0], 3, settings)  # warm-up
    all_times = {n: {p: [] for p in PARTS} for n in drafters}
    all_sizes = {n: [] for n in drafters}
    all_added = {n: [] for n in drafters}
    van = []
    for _ in range(args.rounds):
        for prompt_ids in prompts:
            for name, drafter in drafters.items():
                times, sizes = spec_steps(g, target, drafter, prompt_ids, args.steps, settings, all_added[name])
                for p in PARTS:
                    all_times[name][p] += times[p]
                all_sizes[name] += sizes
            van += vanilla_steps(g, target, prompt_ids, args.steps)
    print(f"{'vanilla':>10}: forward {stat(van):6.2f} ms per step")
    for name in drafters:
        report(f"spec {name}" if len(drafters) > 1 else "spec", all_times[name], all_sizes[name], stat)
        ratio = stat([sum(ts) for ts in zip(*all_times[name].values())]) / stat(van)
        line = f"{'':>10}  break-even tau (spec step / vanilla step): {ratio:.2f}"
        if args.drafter:
            tau = statistics.mean(all_added[name])
            line += f"; tau {tau:.2f}, so these steps run {tau / ratio:.2f}x as fast as vanilla's"
        print(line)
    if args.verify_sizes:
        sizes = [int(n) for n in args.verify_sizes.split(",") if n.strip()]
        times = verify_times(g, target, next(iter(drafters.values())), prompts[0], settings, sizes)
        print("target forward over a tree of N nodes (medians, ms): "
              + ", ".join(f"{n}: {1000 * t:.2f}" for n, t in times.items()))
    if args.feature_layers:
        drafter = next(iter(drafters.values()))
        layers = getattr(drafter.cfg, "feature_layers", None) or g.DrafterConfig.for_target(
            target.config, feature_layers=args.feature_layers).feature_layers
        times, tree_size = feature_times(g, target, drafter, prompts[0], settings, layers)
        print(f"target forward handing over layers {list(layers)} (medians, ms): "
              + "; ".join(f"{what}: {1000 * times[(name, False)]:.2f} plain, {1000 * times[(name, True)]:.2f} with "
                          f"them ({100 * (times[(name, True)] / times[(name, False)] - 1):+.1f}%)"
                          for name, what in (("one", "one token"), ("tree", f"{tree_size}-node tree"))))
    if args.ops:
        print_op_times(*op_times(g, target, next(iter(drafters.values())), prompts[0], settings), args.ops)
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
