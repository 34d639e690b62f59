"""Self-distillation: the target answers prompts, and its hidden states are cached.

The drafter is trained to predict the target's own continuations from the
target's last hidden state, so the training text must come from the target
(greedy, through its chat template) rather than from a human-written dataset.
For every prompt the target writes its answer with batched greedy decoding, and
the last hidden state of every token of prompt + answer is kept, as an unpadded
forward over that text gives it (up to float rounding). By default the states
come from the generation's own forwards (``generate_with_hidden``); when another
copy of the target writes the answers (``--write-dtype bfloat16``), or with
``--separate-hidden-pass``, a second forward over prompt + answer computes them.

Results go to shards (see ``gumiho.train.shards``) plus a ``manifest.json``.
A restarted run skips finished shards, so an interruption costs at most one
shard of work.

Usage::

    python -m gumiho.train.sources.distill --prompts prompts.jsonl --out data/distill \\
        --limit 2400 --batch-size 16 --max-new-tokens 192

Several processes (one per GPU, or CPU processes of a thread or two each) share the
prompts: under ``torchrun --nproc_per_node N -m gumiho.train.sources.distill ... --out
data/distill`` process K answers every N-th prompt from the K-th into
``data/distill/part-K``, and ``--data data/distill`` gives training all the parts.
"""

from __future__ import annotations

# When several data runs (or a data run and other work) share a few CPU cores,
# start them with OMP_WAIT_POLICY=PASSIVE in the environment: OpenMP's default
# spin-waiting burns the core share in barriers (measured >10x slower per decode
# step under oversubscription). It must be in the environment before the process
# starts: OpenMP reads it when torch loads, which `import gumiho` already does
# before this module runs. gumiho.train.gpu sets it for its processes.
import argparse
import collections
import os
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from gumiho.files import LibraryPaths, configure, file_sha256
from gumiho.files.prompt_files import Conversation, PromptFileError, read_prompts
from gumiho.kernels.machine import cpu_has_native_bf16
from gumiho.loading import DEFAULT_TARGET_LABEL
from gumiho.train import launched_processes, shards
from gumiho.train.sources.answers import generate_greedy, generate_with_hidden, last_hidden, last_hidden_batched
from gumiho.train.sources.conversation import ConversationTokens

# --------------------------------------------------------------------------- one shard


def distill_conversations(model, tokenizer, convs: list[Conversation], batch_size: int, max_new_tokens: int,
                          on_tokens=None, writer=None, hidden_batch_tokens: int = 0,
                          hidden_from_writer: bool = True) -> dict[str, torch.Tensor]:
    """Generate answers for ``convs`` and return the packed shard tensors. ``writer``
    (default: ``model``) writes the answers; the hidden states always come from ``model``.

    When ``model`` writes the answers itself (and ``hidden_from_writer``), the states
    are taken from the generation's own forwards (``generate_with_hidden``): a
    conversation's come from the generation call of its last turn, whose prefill covers
    the whole conversation before that answer. Otherwise a separate pass recomputes
    them over the finished text, one unpadded sequence at a time, or batched
    (``hidden_batch_tokens`` > 0, see ``last_hidden_batched``).

    ``on_tokens(n_answer_tokens, n_conversations_done)`` reports progress."""
    from_writer = hidden_from_writer and (writer is None or writer is model)
    writer = model if writer is None else writer
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    states = [ConversationTokens(c) for c in convs]
    hiddens: list[torch.Tensor | None] = [None] * len(states)
    n_turns = max(len(c.user_turns) for c in convs)
    for turn in range(n_turns):
        active = [k for k, s in enumerate(states) if turn < len(s.conv.user_turns)]
        prompts = [states[k].next_prompt(tokenizer, turn, eos_id) for k in active]
        # Batch prompts of similar length together to waste less work on padding.
        order = sorted(range(len(active)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = [prompts[i] for i in idx]
            if from_writer:
                answers, batch_hidden = generate_with_hidden(model, batch, max_new_tokens, eos_id, pad_id)
            else:
                answers = generate_greedy(writer, batch, max_new_tokens, eos_id, pad_id)
            n_done = 0
            for j, (i, ans) in enumerate(zip(idx, answers)):
                k = active[i]
                states[k].add_answer(tokenizer, ans)
                if from_writer and turn == len(states[k].conv.user_turns) - 1:
                    # The last turn: prompt + answer is the whole conversation.
                    assert batch_hidden[j].shape[0] == len(states[k].ids)
                    hiddens[k] = batch_hidden[j]
                    n_done += 1
            if on_tokens is not None:
                on_tokens(sum(len(a) for a in answers), n_done)
    if not from_writer and hidden_batch_tokens > 0:
        hiddens = last_hidden_batched(model, [s.ids for s in states], hidden_batch_tokens)
        if on_tokens is not None:
            on_tokens(0, len(states))
    elif not from_writer:
        for k, s in enumerate(states):
            hiddens[k] = last_hidden(model, s.ids)
            if on_tokens is not None:
                on_tokens(0, 1)
    return shards.pack_sequences([s.ids for s in states], [s.mask for s in states], hiddens)


# --------------------------------------------------------------------------- the run


# Settings that must not change between a run and its resumption, or the
# shards would mix incompatible data.
# The prompt count is deliberately not one of them: shard ``i`` always holds
# prompts ``[i * shard_size, (i + 1) * shard_size)``, so a run can be extended
# with a larger ``--limit`` and only the new shards (and a formerly partial last
# shard) are computed.
_RUN_KEYS = ("model", "hidden_size", "prompts_sha256", "shard_size", "max_new_tokens", "part")


def parse_part(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N): part K (counted from 0) of N."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--part must look like K/N (part K of N, K counted from 0), not {text!r}") from None
    if not 0 <= k < n:
        raise ValueError(f"--part {text}: K must be 0 to N-1")
    return k, n


def launched_part() -> tuple[int, int] | None:
    """Under torchrun / accelerate launch with several processes: (this process's
    rank, number of processes), else None."""
    rank, world = launched_processes()
    return (rank, world) if world > 1 else None


def run(model, tokenizer, prompts_file: str | Path, out_dir: str | Path, *, limit: int | None = None,
        batch_size: int = 16, max_new_tokens: int = 192, shard_size: int = 64,
        model_name: str = DEFAULT_TARGET_LABEL, progress: bool = True, writer=None,
        hidden_batch_tokens: int = 0, hidden_from_writer: bool = True,
        part: tuple[int, int] | None = None) -> dict:
    """Distil every shard of ``prompts_file`` that is not already in ``out_dir``; return the manifest.
    ``part`` (K, N): only prompts K, K+N, K+2N, ... (after ``limit``), so that N
    processes, each with its own ``out_dir``, answer every prompt once between them.
    ``writer``: a copy of the target in another precision that writes the answers (see
    ``--write-dtype``); the hidden states are always ``model``'s: from its own generation
    passes when it writes the answers itself, unless ``hidden_from_writer`` is False
    (then, as with a separate writer, from a second forward over the written text;
    see ``distill_conversations``)."""
    prompts_file = Path(prompts_file)
    out_dir = Path(out_dir)
    convs = read_prompts(prompts_file)
    if limit is not None:
        convs = convs[:limit]
    if part is not None:
        convs = convs[part[0]::part[1]]
    out_dir.mkdir(parents=True, exist_ok=True)
    shards.remove_stale_tmp(out_dir)

    settings = {
        "model": model_name,
        "hidden_size": int(model.config.hidden_size),
        "vocab_size": int(model.config.vocab_size),
        "eos_token_id": int(tokenizer.eos_token_id),
        "prompts_file": str(prompts_file),
        "prompts_sha256": file_sha256(prompts_file),
        "n_prompts": len(convs),
        "part": None if part is None else f"{part[0]}/{part[1]}",
        "shard_size": shard_size,
        "batch_size": batch_size,
        "hidden_batch_tokens": hidden_batch_tokens,
        "max_new_tokens": max_new_tokens,
        "hidden_dtype": "float16",
        "write_dtype": str(next((model if writer is None else writer).parameters()).dtype).replace("torch.", ""),
        "hidden_kind": "last_hidden_state after final norm (lm_head input)",
        # Not a _RUN_KEYS entry: both give the same states up to float rounding.
        "hidden_source": "writer passes" if hidden_from_writer and (writer is None or writer is model) else "separate forward",
        "source_counts": dict(sorted(collections.Counter(c.source for c in convs).items())),
    }
    old = shards.read_manifest(out_dir)
    if old is not None:
        changed = [k for k in _RUN_KEYS if old.get(k) != settings[k]]
        if changed:
            raise RuntimeError(
                f"{out_dir} holds a run with different settings ({', '.join(changed)}); "
                "use a new output directory or delete the old one"
            )
    manifest = {**settings, "shards": (old or {}).get("shards", {}), "complete": False}

    n_shards = (len(convs) + shard_size - 1) // shard_size
    pending = []
    for i in range(n_shards):
        path = shards.shard_path(out_dir, i)
        expected = len(convs[i * shard_size:(i + 1) * shard_size])
        if path.exists():
            if path.name not in manifest["shards"]:  # written just before a crash
                manifest["shards"][path.name] = shards.shard_stats(path)
            if manifest["shards"][path.name]["n_seq"] == expected:
                continue
            # A last shard from a run with a smaller --limit: redo it in full.
            del manifest["shards"][path.name]
        pending.append(i)
    # Shards beyond the current limit stay on disk but are not part of this run.
    for name in list(manifest["shards"]):
        if int(name[len("shard_"):].split(".")[0]) >= n_shards:
            del manifest["shards"][name]
    shards.write_manifest(out_dir, manifest)

    todo = sum(len(convs[i * shard_size:(i + 1) * shard_size]) for i in pending)
    bar = tqdm(total=todo, unit="seq", disable=not progress, dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 30.0)
    if pending and len(pending) < n_shards:
        bar.write(f"resuming: {n_shards - len(pending)} of {n_shards} shards already done")
    t0 = time.perf_counter()
    generated = 0

    def on_tokens(n_new: int, n_done: int) -> None:
        nonlocal generated
        generated += n_new
        bar.update(n_done)
        bar.set_postfix(gen_tok=generated, tok_s=f"{generated / max(time.perf_counter() - t0, 1e-9):.1f}",
                        refresh=False)

    for i in pending:
        chunk = convs[i * shard_size:(i + 1) * shard_size]
        tensors = distill_conversations(model, tokenizer, chunk, batch_size, max_new_tokens, on_tokens, writer,
                                        hidden_batch_tokens, hidden_from_writer)
        path = shards.shard_path(out_dir, i)
        shards.write_shard(path, tensors)
        manifest["shards"][path.name] = {
            "n_seq": len(chunk),
            "n_tokens": int(tensors["offsets"][-1]),
            "n_answer_tokens": int(tensors["loss_mask"].sum()),
        }
        shards.write_manifest(out_dir, manifest)
        bar.write(f"wrote {path.name}: {len(chunk)} seqs, {int(tensors['offsets'][-1])} tokens, "
                  f"{generated / max(time.perf_counter() - t0, 1e-9):.1f} generated tok/s overall")
    bar.close()

    manifest["total_tokens"] = sum(s["n_tokens"] for s in manifest["shards"].values())
    manifest["total_answer_tokens"] = sum(s["n_answer_tokens"] for s in manifest["shards"].values())
    manifest["complete"] = len(manifest["shards"]) == n_shards
    shards.write_manifest(out_dir, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", required=True, help=".jsonl (prompt/turns/messages per line) or .txt file")
    p.add_argument("--out", required=True, help="output directory for shards and manifest.json")
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--shard-size", type=int, default=64, help="prompts per shard")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default 2; under torchrun, this process's share of the cores)")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="answer only part K of N of the prompts (every N-th, from the K-th; K from 0), e.g. one "
                        "process per GPU, each with its own --out. Under `torchrun --nproc_per_node N` each "
                        "process takes its part by itself and writes to OUT/part-K; `python -m gumiho.train "
                        "--data OUT` then reads every part")
    p.add_argument("--write-dtype", default="float32", choices=("float32", "bfloat16"),
                   help="precision of the copy of the target that writes the answers. bfloat16 writes "
                        "faster on a CPU with native bf16 matmuls, and its greedy text can differ from "
                        "float32's in places; the cached hidden states always come from the float32 target "
                        "run over the text that was written")
    p.add_argument("--hidden-batch-tokens", type=int, default=0,
                   help="run the hidden-state pass over several right-padded sequences at once, up to this many "
                        "padded tokens per forward (0: one unpadded sequence at a time). Much faster on a GPU; "
                        "the states agree with the one-at-a-time pass up to float rounding. Only used with a "
                        "separate hidden-state pass (--write-dtype bfloat16 or --separate-hidden-pass)")
    p.add_argument("--separate-hidden-pass", action="store_true",
                   help="recompute the hidden states in a second forward instead of taking them from the float32 "
                        "writer's own passes; slower; for checking")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (GPU: use a larger --batch-size)")
    p.add_argument("--model", default=None,
                   help="target: hub id or local folder (default: the embedded SmolLM2-135M-Instruct)")
    args = p.parse_args(argv)

    launched = launched_part()
    try:
        part = parse_part(args.part) if args.part else launched
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out
    if launched is not None and not args.part:
        # One output folder per process: each keeps its own manifest, and resumes on its own.
        out = str(Path(args.out) / f"part-{part[0]}")
        if args.device in ("cuda", "auto") and torch.cuda.is_available():
            args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', part[0])) % torch.cuda.device_count()}"
    threads = args.threads
    if threads is None:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) if launched else 1
        threads = 2 if local == 1 else max(1, (os.cpu_count() or 2) // local)
    torch.set_num_threads(threads)
    if args.hidden_batch_tokens < 0:
        print("error: --hidden-batch-tokens must be 0 or more", file=sys.stderr)
        return 2
    try:
        # Fail on a bad prompt file before spending time loading the model.
        read_prompts(args.prompts)
    except PromptFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from gumiho.errors import GumihoError
    from gumiho.loading import load_target

    try:
        # On a CPU load_target pre-packs the weights (gumiho.kernels.cpulinear): batched
        # greedy generation and the hidden-state forwards run about twice as fast.
        target = load_target(args.model, device=args.device, dtype="float32", runtime="torch")
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model, tokenizer, name = target.runtime_model, target.tokenizer, target.name
    writer = None
    if args.write_dtype == "bfloat16" and str(args.device).startswith("cpu") and not cpu_has_native_bf16():
        # Without bf16 units the CPU emulates every bf16 product: such a writer is several
        # times slower than the float32 one, not faster.
        print("warning: --write-dtype bfloat16 on a CPU without native bf16 matmuls (AVX512-BF16 or AMX) is far "
              "slower than float32; leave it out on this machine", file=sys.stderr)
    if args.write_dtype != "float32":
        import copy

        writer = copy.deepcopy(model).to(getattr(torch, args.write_dtype)).eval()
    try:
        manifest = run(model, tokenizer, args.prompts, out, limit=args.limit, batch_size=args.batch_size,
                       max_new_tokens=args.max_new_tokens, shard_size=args.shard_size, model_name=name,
                       writer=writer, hidden_batch_tokens=args.hidden_batch_tokens,
                       hidden_from_writer=not args.separate_hidden_pass, part=part)
    except shards.DiskFullError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    print(f"done{f' (part {part[0]}/{part[1]}, in {out})' if part else ''}: {len(manifest['shards'])} shards, "
          f"{manifest['total_tokens']} tokens "
          f"({manifest['total_answer_tokens']} answer tokens)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
