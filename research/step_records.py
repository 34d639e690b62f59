"""What the acceptance records cost: the greedy and the sampled decode step timed with
records off (the default) and on (what the walkthrough and the lab ask for), in one run.

    PYTHONPATH=. python research/step_records.py --limit 3 --max-new-tokens 32 --threads 1

The records (NodeCheck per tested child, the Residual a sampled bonus was drawn from)
are built from numbers the rule has already read back, plus, greedy, one log-softmax of
every visited row and one more read from the device. Each prompt runs records off and
on in turn, greedy and sampled, with the same seed, so both write the same tokens (the
script checks it) and take the same steps. Two figures per mode, means over every
verify step of every prompt:

  step     the whole verify step (the events' draft_s + verify_s: draft, the target's
           forward, acceptance, commit)
  accept   the acceptance alone (gumiho.engine.verify.accept, timed around the loop's
           own function, which the loop looks up at each call)

and the ratio on / off of each. On a GPU every read back is a device sync; on a CPU
the records cost their arithmetic only.
"""
import argparse
import os
import statistics
import time

import torch

import gumiho.engine.decode as decode
from gumiho import GenerationSettings, stream
from gumiho.bench.prompt_sets import load_prompts, prompt_ids
from gumiho.files import LibraryPaths, configure
from gumiho.kernels.machine import cpu_summary
from gumiho.loading import load_drafter, load_target, shipped_drafter_path


class AcceptTimer:
    """Wraps the loop's accept (decode_steps looks it up in gumiho.engine.decode at each call)."""

    def __init__(self):
        self.times: list[float] = []
        self.original = decode.accept
        decode.accept = self._timed

    def _timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.original(*args, **kwargs)
        if args[0].target.device.type == "cuda":
            torch.cuda.synchronize(args[0].target.device)
        self.times.append(time.perf_counter() - t0)
        return out


def run(target, drafter, ids, settings, records, timer):
    timer.times.clear()
    events = list(stream(target, ids, drafter, settings, records=records))[1:]
    steps = [e.draft_s + e.verify_s for e in events]
    return [t for e in events for t in e.tokens], steps, list(timer.times)


def main():
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--rounds", type=int, default=2, help="off/on pairs per prompt and mode")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_target()
    drafter = load_drafter(shipped_drafter_path("gumiho"), target)
    prompts = [prompt_ids(target, p) for p in load_prompts(args.prompts, args.limit)]
    timer = AcceptTimer()
    modes = {"greedy": 0.0, "sampled": args.temperature}
    print(f"{target.name} on {target.device} ({target.runtime.describe()}); {cpu_summary()}")
    print(f"{len(prompts)} prompts of {args.prompts}, {args.max_new_tokens} new tokens, {args.rounds} off/on "
          f"rounds each, sampled at temperature {args.temperature}")
    for temperature in modes.values():  # first calls off the clock, each mode with records off and on
        for records in (False, True):
            list(stream(target, prompts[0], drafter, GenerationSettings(max_new_tokens=16, temperature=temperature,
                                                                       seed=0), records=records))
    for mode, temperature in modes.items():
        got = {records: {"step": [], "accept": []} for records in (False, True)}
        for i, ids in enumerate(prompts):
            settings = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=temperature, seed=i)
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)  # neither always goes first
                tokens = {}
                for records in order:
                    tokens[records], steps, accepts = run(target, drafter, ids, settings, records, timer)
                    got[records]["step"] += steps
                    got[records]["accept"] += accepts
                assert tokens[False] == tokens[True], f"{mode}, prompt {i}: records changed the tokens"
        off, on = ({k: 1e3 * statistics.mean(v) for k, v in got[records].items()} for records in (False, True))
        print(f"{mode:8s} step   off {off['step']:8.3f} ms  on {on['step']:8.3f} ms  on/off {on['step'] / off['step']:.3f}"
              f"   ({len(got[False]['step'])} steps each)")
        print(f"{mode:8s} accept off {off['accept']:8.3f} ms  on {on['accept']:8.3f} ms  "
              f"on/off {on['accept'] / off['accept']:.3f}")
    print("tokens identical with records off and on: yes (checked for every prompt, mode and round)")


if __name__ == "__main__":
    main()
