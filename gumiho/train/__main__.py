"""`python -m gumiho.train`: train a Gumiho drafter (or an all-serial / all-parallel
ablation) for a Hugging Face causal LM, from its own hidden states."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..drafter import DRAFTER_KINDS, OWN_HEAD_KINDS, kind_layout
from ..errors import GumihoError
from ..files import LibraryPaths, configure
from . import launched_processes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gumiho.train",
        description=(
            "Train a speculative-decoding drafter for a target model. Step 1 (once): make training data: "
            "the target answers your prompts itself and its hidden states are cached "
            "(python -m gumiho.train.sources.distill --prompts prompts.jsonl --out data/distill). "
            "Step 2: this command. "
            "Runs on CPU, one GPU, or data parallel: `accelerate launch --multi_gpu --num_processes N -m "
            "gumiho.train ...` on N GPUs, `torchrun --nproc_per_node N -m gumiho.train ...` on CPU cores; "
            "N processes train the drafter one process would, on the same batches."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="folder(s) of cached shards made by gumiho.train.sources.distill "
                                                 "or gumiho.train.sources.textdata, several separated by commas; a "
                                                 "folder of part-K folders (distill under torchrun) counts as one")
    p.add_argument("--out", required=True, help="output folder for the drafter (config.json + model.safetensors); "
                                                "rerunning with the same --out resumes from its checkpoint")
    p.add_argument("--model", default=None, help="target: hub id or local folder (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--kind", default="gumiho", choices=list(DRAFTER_KINDS),
                   help="gumiho: 2 serial Transformer positions + 5 MLP heads; serial: 7 serial positions (EAGLE-like); "
                        "parallel: 7 MLP heads (Medusa-like); eagle: EAGLE-2's one layer; eagle3: EAGLE-3's one layer "
                        "over [embedding; fused state] with its own LM head (exportable to vLLM: gumiho.export)")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None, help="stop after this wall time, with a checkpoint")
    p.add_argument("--stop-at-step", type=int, default=None,
                   help="pause at this step with a checkpoint; rerunning the same command continues. The "
                        "learning-rate schedule only depends on the total step count after warm-up, so a run "
                        "paused during warm-up can be continued with another --max-steps or --epochs")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch (data parallel: the whole batch, split over the processes)")
    p.add_argument("--max-len", type=int, default=512, help="sequences are cut into windows of this length")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup-steps", type=int, default=30)
    p.add_argument("--grad-clip", type=float, default=0.5)
    p.add_argument("--draft-vocab", type=int, default=8192,
                   help="the drafter proposes only the N most frequent answer tokens (FR-Spec); 0 = full vocabulary")
    p.add_argument("--ce-weight", type=float, default=None,
                   help="weight of the soft cross-entropy term (default 0.1; eagle3: 1)")
    p.add_argument("--reg-weight", type=float, default=None,
                   help="weight of the SmoothL1 hidden-state regression (the paper's loss: 1 with --ce-weight 0.1, "
                        "the default; EAGLE-3's cross-entropy-only training: 0 with --ce-weight 1, the eagle3 kind's "
                        "default and its only choice: its output is not the target's state)")
    p.add_argument("--top1-weight", type=float, default=0.0,
                   help="weight of a hard cross-entropy on the target's top token (the token greedy verification "
                        "accepts)")
    p.add_argument("--topk-weight", type=float, default=0.0,
                   help="weight of a soft cross-entropy over the target's top-K tokens only (HASS's distillation)")
    p.add_argument("--topk", type=int, default=10, help="K of --topk-weight's term")
    p.add_argument("--accept-weight", type=float, default=0.0,
                   help="weight of 1 - sum(min(p, q)): one minus the probability that speculative sampling accepts "
                        "a token drawn from the drafter (the total variation distance to the target)")
    p.add_argument("--lk-weight", type=float, default=0.0,
                   help="weight of the LK loss -log sum(min(p, q)): minus the log of that acceptance rate, "
                        "which pushes hardest where the drafter is accepted least")
    p.add_argument("--lk-greedy", action="store_true",
                   help="--lk-weight's term for greedy decoding: p is the point mass on the target's top token, "
                        "and the term is -log q(top token) (the value of --top1-weight's term)")
    p.add_argument("--ttt-steps", type=int, default=0,
                   help="unroll the serial Transformer this many steps past the positions it drafts, on its own "
                        "states, each step scored against the target's state it reaches (EAGLE-3's training-time "
                        "test, deeper); the drafted serial positions always read the drafter's own states, "
                        "and the MLP heads read what they read when drafting. 0: the default recipe")
    p.add_argument("--feature-layers", default=None, metavar="default|none|L1,L2,...",
                   help="target layers whose hidden states the drafter reads, fused (EAGLE-3). default (unless "
                        "--init-from, which keeps the saved drafter's layers): layers 2, N/2 and N-3 of N, the "
                        "recipe that won the recipe ablation (BENCHMARKS.md); numbers count as transformers' "
                        "hidden_states (0 = embeddings, N = the final-norm state); none: the final-norm state "
                        "alone, as the official checkpoints and the shipped drafters read. With --init-from a last-state drafter, layers "
                        "that include N (e.g. 2,15,30 of 30) widen it to fused features, starting as the same drafter")
    p.add_argument("--features", default="auto", choices=["auto", "cached", "on-the-fly"],
                   help="where the target's states come from: the shards' cache, or a target forward inside every "
                        "training step over the shards' token ids (text-only data works); auto: cached when the "
                        "shards hold what the drafter reads")
    p.add_argument("--position-decay", type=float, default=0.8, help="loss weight of draft position d is decay^(d-1)")
    p.add_argument("--noise", type=float, default=0.2, help="width of the uniform noise added to input hidden states")
    p.add_argument("--eval-fraction", type=float, default=0.03, help="held-out share of sequences")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-from", default=None, metavar="DRAFTER_DIR",
                   help="continue training a saved drafter (same --kind and target) on new data: its weights and "
                        "draft vocabulary are kept, the optimizer and learning-rate schedule start fresh")
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"],
                   help="bf16 autocast (float32 weights and optimizer) or plain float32; auto: bf16 on a GPU that "
                        "supports it and on CPUs with native bf16 matmuls (AVX512-BF16/AMX), float32 elsewhere")
    return p


def parse_feature_layers(text: str):
    """``default`` or comma-separated layer numbers, as --feature-layers takes them."""
    if text.strip() == "default":
        return "default"
    if text.strip() == "none":
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise GumihoError(f"--feature-layers takes 'none', 'default' or layer numbers such as 2,15,27; got {text!r}") \
            from None


def feature_layer_overrides(text, init_from) -> dict:
    """The drafter's feature layers as --feature-layers and --init-from decide them.
    Unset: fused features for a new drafter (the recipe ablation's winner); a continued
    drafter keeps the layers it was trained with (the trainer reads them from its
    config), so the shipped last-state drafters continue as they are."""
    if text is not None:
        return {"feature_layers": parse_feature_layers(text)}
    return {} if init_from else {"feature_layers": "default"}


def loss_weights(kind: str, ce_weight, reg_weight) -> tuple[float, float]:
    """(ce, reg) as given, or the kind's defaults: the paper's 0.1 and 1, or EAGLE-3's
    cross-entropy alone for the eagle3 kind, whose output is the state before its own
    final norm, not the target's hidden state, so there is nothing to regress onto."""
    own_head = kind in OWN_HEAD_KINDS
    ce = ce_weight if ce_weight is not None else (1.0 if own_head else 0.1)
    reg = reg_weight if reg_weight is not None else (0.0 if own_head else 1.0)
    if own_head and reg:
        raise GumihoError(f"--reg-weight must be 0 for the {kind} kind: it predicts tokens through its own LM head, "
                          "and its output is not the target's hidden state")
    return ce, reg


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    args = build_parser().parse_args(argv)
    try:
        from ..loading import load_target
        from .config import TrainConfig
        from .data import check_data_dir
        from .loop import train
        from .objective import LossConfig
        from .processes import end_processes

        for folder in args.data.split(","):
            check_data_dir(folder)
        if args.topk < 1:
            raise GumihoError(f"--topk must be at least 1, not {args.topk}")
        if args.ttt_steps < 0:
            raise GumihoError(f"--ttt-steps must be 0 or more, not {args.ttt_steps}")
        if args.ttt_steps and kind_layout(args.kind).get("serial_positions", 0) == 0:
            raise GumihoError(f"--ttt-steps needs serial positions to unroll; the {args.kind} kind has none")
        args.ce_weight, args.reg_weight = loss_weights(args.kind, args.ce_weight, args.reg_weight)
        weights = {"--ce-weight": args.ce_weight, "--reg-weight": args.reg_weight, "--top1-weight": args.top1_weight,
                   "--topk-weight": args.topk_weight, "--accept-weight": args.accept_weight,
                   "--lk-weight": args.lk_weight}
        negative = [f"{name} {w}" for name, w in weights.items() if w < 0]
        if negative:
            raise GumihoError(f"loss weights cannot be negative: {', '.join(negative)}")
        overrides = feature_layer_overrides(args.feature_layers, args.init_from)

        # Under torchrun / accelerate launch every process runs this; one speaks.
        speak = launched_processes()[0] == 0
        started = time.time()
        target = load_target(args.model, device="cpu", dtype="float32", runtime="torch")
        if speak:
            print(f"target {target.name} loaded in {time.time() - started:.1f} s", flush=True)
        cfg = TrainConfig(
            data=args.data, out=args.out, kind=args.kind, epochs=args.epochs, batch_tokens=args.batch_tokens,
            max_len=args.max_len, lr=args.lr, warmup_steps=args.warmup_steps, grad_clip=args.grad_clip,
            draft_vocab=args.draft_vocab or target.config.vocab_size, eval_fraction=args.eval_fraction,
            checkpoint_every=args.checkpoint_every, seed=args.seed, precision=args.precision, max_minutes=args.max_minutes,
            max_steps=args.max_steps, stop_at_step=args.stop_at_step, init_from=args.init_from,
            features=args.features, drafter_overrides=overrides,
            loss=LossConfig(ce_weight=args.ce_weight, position_decay=args.position_decay, noise=args.noise,
                            reg_weight=args.reg_weight, top1_weight=args.top1_weight,
                            topk_weight=args.topk_weight, topk=args.topk, accept_weight=args.accept_weight,
                            lk_weight=args.lk_weight, lk_greedy=args.lk_greedy, ttt_steps=args.ttt_steps))
        summary = train(cfg, target.runtime_model, target.name, target.eos_ids, log=lambda m: print(m, flush=True))
        end_processes()
        if speak:
            print(json.dumps({k: summary[k] for k in ("kind", "steps", "wall_s", "parameters", "held_out")}, indent=2))
        return 0
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
