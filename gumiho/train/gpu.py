"""Make the training data and train all three drafter kinds on one GPU, inside a
fixed wall-time budget.

1. Distil: several writer processes share the GPU (one small model leaves most of
   the chip idle between kernel launches, so they overlap well). Each answers its
   slice of the prompts; the slices are one seeded shuffle dealt round-robin, so
   each holds the same mix. At the distillation deadline any writer still running
   is stopped: it loses only the shard it was writing (finished shards are complete
   files, see gumiho.train.shards).
2. Probe: the drafter kinds train side by side for a few warm-up steps and pause
   with a checkpoint (--stop-at-step). The slowest kind's seconds per step, measured
   while all of them share the GPU, sets the step count that fits the time left.
3. Train: every kind continues to that same step count (same data, same batches,
   same token budget); since the probe paused inside warm-up, the result is the run
   that was given that length from the start (tests/train/test_train.py checks this).

With --init-from, each kind continues a saved drafter of its kind (for instance the
shipped ones) on the new data instead of starting from random weights.

Usage (the embedded SmolLM2-135M-Instruct target, everything under one folder)::

    python -m gumiho.train.gpu --prompts a.jsonl,b.jsonl --work runs/gpu --minutes 8

It writes runs/gpu/<kind>/ (the drafters), runs/gpu/logs/ and runs/gpu/run.json
(timings, data and step counts of each phase).

What one H200 did in an 8.5-minute run (--writers 4 --batch-size 512 --batches-per-shard 1
--distill-share 0.45 --batch-tokens 16384; its run.json): distillation wrote 16,384 answers,
2.16M answer tokens, in 227 s. The three kinds, side by side, took 0.23 (gumiho), 0.67
(serial) and 0.05 (parallel) s per 16,384-token step; starting a trainer (loading the
target and 3.4M tokens of hidden states) took 47 s. The serial kind sets the pace, so
the 236 steps that fit were far too few for drafters trained from scratch; with a budget
that short, give the steps more of it (--distill-share) or use --train-steps with the
step times above, which saves the probe's restart.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..files import LibraryPaths, configure
from ..files.prompt_files import PromptFileError, read_prompts
from .sources.prompts import write_jsonl

# The folder that holds the gumiho package (a clone's root, or site-packages): the
# processes this command starts import the same package as it does.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def deal_prompts(files: list[str], work: Path, n: int, seed: int) -> dict:
    """One seeded shuffle of the distinct prompts of ``files`` (any format
    gumiho.train.sources.distill reads), dealt into ``n`` JSONL files."""
    seen, convs = set(), []
    for f in files:
        for c in read_prompts(f):
            key = (c.system, tuple(c.user_turns))
            if key not in seen:
                seen.add(key)
                convs.append(c)
    random.Random(seed).shuffle(convs)
    for k in range(n):
        write_jsonl([{"id": c.id, "source": c.source, "turns": c.user_turns,
                      **({"system": c.system} if c.system is not None else {})} for c in convs[k::n]],
                    work / f"prompts-{k}.jsonl")
    return {"files": files, "distinct_prompts": len(convs)}


def launch(args: list[str], log: Path, threads: int) -> subprocess.Popen:
    # Several processes share the host's cores. With OpenMP's default spin-waiting and
    # every process sized for all cores they slow each other down (distillation decode
    # steps ran over 10x slower that way on a 2-core machine): give each process its
    # share of the cores and let idle threads sleep. OpenMP reads these at start-up.
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    # A writer's batches differ in length, so its allocator keeps freed blocks of the
    # wrong sizes: the writer that ran out of memory on an H200 held 5.3 GiB reserved
    # but unused when it failed to get 2 GiB. Expandable segments let freed memory be
    # reused for a block of another size.
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    # The processes run in this command's working folder, so the relative paths it
    # hands them (--work, --init-from) name the same folders for both.
    return subprocess.Popen([sys.executable, *args], env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def share_of_cores(n_procs: int) -> int:
    return max(1, (os.cpu_count() or 2) // max(1, n_procs))


def wait_all(procs: dict[str, subprocess.Popen], deadline: float, grace: float = 20) -> dict[str, int | str]:
    """Wait for every process until ``deadline`` (time.time()); stop the rest there
    with SIGTERM, and with SIGKILL after ``grace`` seconds. (A trainer stops on SIGTERM
    after its current step, with a checkpoint and its drafter saved.)"""
    while time.time() < deadline and any(p.poll() is None for p in procs.values()):
        time.sleep(1.0)
    status: dict[str, int | str] = {}
    for name, p in procs.items():
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=grace)
                status[name] = f"stopped at the deadline, exit {p.returncode}"
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                status[name] = "killed at the deadline"
        else:
            status[name] = p.returncode
    return status


def distil(a, work: Path, logs: Path, deadline: float) -> dict:
    procs = {}
    for k in range(a.writers):
        cmd = ["-m", "gumiho.train.sources.distill", "--prompts", str(work / f"prompts-{k}.jsonl"),
               "--out", str(work / f"distill-{k}"), "--device", a.device, "--batch-size", str(a.batch_size),
               "--shard-size", str(a.batch_size * a.batches_per_shard), "--max-new-tokens", str(a.max_new_tokens),
               "--hidden-batch-tokens", str(a.hidden_batch_tokens), "--write-dtype", a.write_dtype,
               "--threads", str(share_of_cores(a.writers))]
        if a.limit_per_writer:
            cmd += ["--limit", str(a.limit_per_writer)]
        procs[f"writer-{k}"] = launch(cmd, logs / f"distill-{k}.log", share_of_cores(a.writers))
    status = wait_all(procs, deadline)
    folders, seqs, tokens, answer_tokens = [], 0, 0, 0
    for k in range(a.writers):
        folder = work / f"distill-{k}"
        manifest = folder / "manifest.json"
        if not manifest.exists() or not list(folder.glob("shard_*.safetensors")):
            continue
        m = json.loads(manifest.read_text())
        done = {s: v for s, v in m["shards"].items() if (folder / s).exists()}
        if done:
            folders.append(str(folder))
            seqs += sum(v["n_seq"] for v in done.values())
            tokens += sum(v["n_tokens"] for v in done.values())
            answer_tokens += sum(v["n_answer_tokens"] for v in done.values())
    return {"status": status, "folders": folders, "sequences": seqs, "tokens": tokens,
            "answer_tokens": answer_tokens}


def init_folder(template: str, kind: str) -> str:
    return template.replace("{kind}", kind)


def check_init_from(template: str, kinds: list[str]) -> str | None:
    """What is wrong with --init-from, if anything: checked before distillation starts,
    since a trainer would find it only after the distillation's minutes. Each kind's
    folder must load (Drafter.load's checks) and hold a drafter of that kind."""
    from ..drafter import Drafter
    from ..errors import GumihoError

    if "{kind}" not in template:
        return "--init-from needs {kind} in the folder name, e.g. assets/drafters/smollm2-135m-{kind}"
    missing = [k for k in kinds if not Path(init_folder(template, k)).is_dir()]
    if missing:
        return f"--init-from: no saved drafter for {', '.join(missing)} at {template}"
    for k in kinds:
        try:
            have = Drafter.load(init_folder(template, k)).cfg.kind
        except GumihoError as e:
            return f"--init-from: {e}"
        if have != k:
            return f"--init-from: {init_folder(template, k)} holds a {have} drafter, not a {k} one"
    return None


def train_cmd(a, kind: str, data: list[str], work: Path, extra: list[str]) -> list[str]:
    init = ["--init-from", init_folder(a.init_from, kind)] if a.init_from else []
    return ["-m", "gumiho.train", "--data", ",".join(data), "--out", str(work / kind), "--kind", kind,
            "--batch-tokens", str(a.batch_tokens), "--lr", str(a.lr), "--warmup-steps", str(a.warmup_steps),
            "--epochs", str(a.max_epochs), "--eval-fraction", str(a.eval_fraction), "--precision", a.precision,
            "--checkpoint-every", "100000", "--seed", str(a.seed), *init, *shlex.split(a.train_options or ""), *extra]


def step_time(history: Path) -> float:
    """Seconds per step over a run's logged steps, leaving out the first few (the
    device's one-time set-up lands there)."""
    if not history.exists():
        return float("inf")
    times = [json.loads(line)["wall_s"] for line in history.read_text().splitlines() if line.strip()]
    if len(times) < 2:
        return float("inf")
    skip = min(len(times) - 2, max(1, len(times) // 5))
    return (times[-1] - times[skip]) / (len(times) - 1 - skip)


def summary_of(work: Path, kind: str) -> dict:
    p = work / kind / "training_summary.json"
    return json.loads(p.read_text()) if p.exists() else {}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho.train.gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", required=True, help="prompt .jsonl files, separated by commas")
    p.add_argument("--work", required=True, help="output folder")
    p.add_argument("--minutes", type=float, required=True, help="wall-time budget of the whole run")
    p.add_argument("--distill-share", type=float, default=0.4, help="share of the budget for distillation")
    p.add_argument("--kinds", default="gumiho,serial,parallel")
    p.add_argument("--init-from", default=None, metavar="TEMPLATE",
                   help="continue saved drafters instead of starting from random weights: a folder name with "
                        "{kind} in it, e.g. assets/drafters/smollm2-135m-{kind} (see gumiho.train --init-from)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--writers", type=int, default=3,
                   help="distillation processes sharing the device. On an H200, four writers with --batch-size 512 "
                        "filled its memory and one of them ran out of it on a batch of long prompts")
    p.add_argument("--batch-size", type=int, default=384, help="prompts answered per generate call")
    p.add_argument("--batches-per-shard", type=int, default=4,
                   help="generate calls per shard. A shard's prompts are sorted by length before batching, so "
                        "larger shards pad less (the KV cache of a batch is as wide as its longest prompt); a "
                        "writer stopped at the deadline loses its unfinished shard")
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--hidden-batch-tokens", type=int, default=65536)
    p.add_argument("--limit-per-writer", type=int, default=None)
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup-steps", type=int, default=60)
    p.add_argument("--probe-steps", type=int, default=30)
    p.add_argument("--train-steps", type=int, default=None,
                   help="train every kind for this many steps, without the probe (use a step time measured "
                        "before; the probe costs a second start of every trainer)")
    p.add_argument("--load-allowance", type=float, default=90,
                   help="with --train-steps: seconds a trainer may take to start (load the target and the data), "
                        "kept free when its --max-minutes safety net is set")
    p.add_argument("--write-dtype", default="bfloat16", choices=("float32", "bfloat16"),
                   help="precision of the copy of the target that writes the answers (see "
                        "gumiho.train.sources.distill; the hidden states always come from the float32 target). "
                        "On an H200, float32 batched "
                        "generation ran at only 0.8-1.4k tokens/s per writer (four writers, batch 384); its KV "
                        "cache, read whole at every step, is the likely limit. In bfloat16, four writers with batch 512 wrote "
                        "2.16M answer tokens in 227 s, 9.5k tokens/s together")
    p.add_argument("--max-epochs", type=float, default=3.0)
    p.add_argument("--eval-fraction", type=float, default=0.02)
    p.add_argument("--precision", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-options", default="", metavar="'OPTIONS'",
                   help="more python -m gumiho.train options for every kind, in one quoted string: the recipe, e.g. "
                        "'--feature-layers default --reg-weight 0 --ce-weight 1 --features on-the-fly'")
    p.add_argument("--safety", type=float, default=0.9, help="share of the measured time left that steps may use")
    return p


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    p = build_parser()
    a = p.parse_args(argv)
    if not a.train_steps and a.probe_steps >= a.warmup_steps:
        p.error("--probe-steps must be below --warmup-steps (the probe must pause inside warm-up)")
    if a.init_from:
        problem = check_init_from(a.init_from, a.kinds.split(","))
        if problem:
            p.error(problem)

    t0 = time.time()
    end = t0 + 60 * a.minutes
    work = Path(a.work)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    kinds = a.kinds.split(",")
    run = {"settings": vars(a), "phases": {}}

    def save():
        run["elapsed_s"] = round(time.time() - t0, 1)
        (work / "run.json").write_text(json.dumps(run, indent=2))

    try:
        run["prompts"] = deal_prompts(a.prompts.split(","), work, a.writers, a.seed)
    except PromptFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t = time.time()
    run["phases"]["distill"] = dist = distil(a, work, logs, t0 + 60 * a.minutes * a.distill_share)
    dist["wall_s"] = round(time.time() - t, 1)
    save()
    print(f"distill: {dist['sequences']} sequences, {dist['tokens']} tokens ({dist['answer_tokens']} answer "
          f"tokens) in {dist['wall_s']} s; {dist['status']}", flush=True)
    if not dist["folders"]:
        print("no shard was finished; see the distill logs", file=sys.stderr)
        return 1

    threads = share_of_cores(len(kinds))
    if a.train_steps:
        return train_phase(a, run, save, kinds, dist["folders"], work, logs, a.train_steps, a.load_allowance, end,
                           threads)
    probed = probe_phase(a, run, save, kinds, dist["folders"], work, logs, end, threads)
    if probed is None:
        return 1
    ok, steps, overhead = probed
    return train_phase(a, run, save, ok, dist["folders"], work, logs, steps, overhead, end, threads)


def probe_phase(a, run: dict, save, kinds: list[str], folders: list[str], work: Path, logs: Path, end: float,
                threads: int) -> tuple[list[str], int, float] | None:
    """Phase 2: the kinds train side by side for --probe-steps and pause. Returns the
    kinds that got through, the step count that fits the time left at the slowest
    kind's pace, and what a trainer's restart costs; None when no kind got through."""
    t = time.time()
    probe = {k: launch(train_cmd(a, k, folders, work, ["--stop-at-step", str(a.probe_steps)]),
                       logs / f"probe-{k}.log", threads) for k in kinds}
    status = wait_all(probe, end - 60)
    pace = {k: step_time(work / k / "training_history.jsonl") for k in kinds}
    ok = [k for k in kinds if status[k] == 0 and summary_of(work, k).get("steps") == a.probe_steps]
    run["phases"]["probe"] = {"status": status, "wall_s": round(time.time() - t, 1), "s_per_step": pace}
    save()
    if not ok:
        print(f"no drafter kind got through the probe: {status}; see the probe logs", file=sys.stderr)
        return None
    # The probe's total time less its stepping time is what a restart costs (loading).
    overhead = max((time.time() - t) - min(summary_of(work, k)["wall_s"] for k in ok), 0.0)
    slowest = max(pace[k] for k in ok)
    left = end - time.time() - overhead - 30  # 30 s: held-out evaluation and saving
    steps = max(a.probe_steps + 1, int(a.probe_steps + a.safety * left / slowest))
    run["phases"]["probe"].update({"restart_overhead_s": round(overhead, 1), "planned_steps": steps})
    save()
    print(f"probe: {pace} s/step; restart overhead {overhead:.0f} s; planning {steps} steps", flush=True)

    for k in ok:  # phase 3 rewrites these two files; keep the probe's
        for name in ("training_summary.json", "training_history.jsonl"):
            f = work / k / name
            if f.exists():
                f.rename(f.with_name(name.replace("training_", "probe_")))
    return ok, steps, overhead


def train_phase(a, run: dict, save, ok: list[str], folders: list[str], work: Path, logs: Path, steps: int,
                overhead: float, end: float, threads: int) -> int:
    t = time.time()
    # --max-minutes: a safety net; a kind that runs slower than planned pauses with a
    # checkpoint and is still saved and evaluated.
    budget = max(0.5, (end - time.time() - overhead - 30) / 60)
    procs = {k: launch(train_cmd(a, k, folders, work, ["--max-steps", str(steps), "--max-minutes", f"{budget:.2f}"]),
                       logs / f"train-{k}.log", threads) for k in ok}
    status = wait_all(procs, end, grace=60)
    run["phases"]["train"] = {"status": status, "wall_s": round(time.time() - t, 1),
                              "result": {k: {f: summary_of(work, k).get(f) for f in
                                             ("steps", "total_steps", "stopped_early", "wall_s", "tokens_seen",
                                              "train_tokens_per_epoch", "held_out")} for k in ok}}
    save()
    for k in ok:
        s = summary_of(work, k)
        top1 = s.get("held_out", {}).get("top1_by_position", [])
        print(f"{k}: {s.get('steps')} steps, {s.get('tokens_seen')} tokens trained in this phase, "
              f"held-out top-1 {' '.join(f'{x:.3f}' for x in top1)}", flush=True)
    return 0 if all(v == 0 for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
