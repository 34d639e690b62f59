"""A quick check, on a GPU, of every code path the CPU test suite cannot reach:
CUDA distillation (batched generate and the batched hidden-state pass), training
of every drafter kind in bf16 autocast with a pause and a resume, and
speculative decoding on the GPU tree against vanilla decoding (also with a drafter
reading fused target features, the target's layers handed over from its forwards).

It uses a tiny random-weight Llama with the real SmolLM2 chat tokenizer, so it runs
in well under a minute and needs no model download. Exit status 1 if a check fails.

    python research/check_cuda_paths.py                 # tokenizer from the embedded target's GGUF
    python research/check_cuda_paths.py --tokenizer DIR # or from a saved tokenizer folder
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

# The oracle drafter of check_decoding is a test helper: it lives in the clone's tests/
# folder, beside this one, not in the package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
KINDS = ("gumiho", "serial", "parallel", "eagle")


def load_tokenizer(folder: str | None):
    from transformers import AutoTokenizer

    if folder:
        return AutoTokenizer.from_pretrained(folder)
    from gumiho.loading import default_target_files

    gguf_folder, gguf = default_target_files()
    return AutoTokenizer.from_pretrained(gguf_folder, gguf_file=gguf)


def tiny_model(tok, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.eos_token_id, bos_token_id=1)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval().to(device)


def check_distill(model, tok, work: str) -> float:
    """Shards made on the device; returns the largest difference between the batched
    hidden-state pass and the one-at-a-time one."""
    from gumiho.train import shards
    from gumiho.train.sources import answers, distill
    from gumiho.train.sources.prompts import write_jsonl

    src = os.path.join(work, "prompts.jsonl")
    write_jsonl([{"prompt": " ".join(WORDS[: 1 + i % 12]) + f" question {i}?"} for i in range(24)], src)
    manifest = distill.run(model, tok, src, os.path.join(work, "data"), batch_size=12, max_new_tokens=24,
                           shard_size=12, progress=False, model_name="tiny", hidden_batch_tokens=4096)
    assert manifest["complete"], manifest
    worst = 0.0
    data = shards.load_shard(os.path.join(work, "data", "shard_00000.safetensors"))
    for ids, _, hidden in shards.iter_sequences(data):
        fresh = answers.last_hidden(model, ids.tolist())
        worst = max(worst, float((hidden.float() - fresh).abs().max()))
    print(f"distill: {manifest['total_tokens']} tokens; batched vs one-at-a-time hidden states, "
          f"largest difference {worst:.2e}", flush=True)
    return worst


def check_training(model, tok, work: str) -> None:
    from gumiho.train.config import TrainConfig
    from gumiho.train.loop import train
    from gumiho.train.objective import LossConfig

    for kind in KINDS:
        cfg = TrainConfig(data=os.path.join(work, "data"), out=os.path.join(work, kind), kind=kind, epochs=50,
                          batch_tokens=1024, max_len=64, lr=3e-3, warmup_steps=6, draft_vocab=256,
                          eval_fraction=0.1, precision="auto", max_steps=1000, stop_at_step=3, checkpoint_every=1000,
                          loss=LossConfig(noise=0.05),
                          drafter_overrides={"num_attention_heads": 4, "num_key_value_heads": 2})
        train(cfg, model, "tiny", {tok.eos_token_id}, log=lambda m: None)
        cfg.stop_at_step, cfg.max_steps = None, 40
        s = train(cfg, model, "tiny", {tok.eos_token_id}, log=lambda m: None)
        assert s["steps"] == 40, s["steps"]
        print(f"train {kind}: paused at 3, resumed to {s['steps']} steps, precision {s['mixed_precision']}",
              flush=True)


def check_decoding(model, tok, work: str, device) -> bool:
    """Speculative output must equal vanilla output, with each trained drafter (which
    accept little) and with an oracle drafter that makes long accepted paths."""
    from gumiho import Drafter, DrafterConfig, GenerationSettings, stream
    from gumiho.loading import prepare_target
    from helpers import OracleDrafter

    target = prepare_target(model, tok, "tiny", torch.device(device), torch.float32)
    settings = GenerationSettings(max_new_tokens=40)
    ok = True
    drafters = {k: Drafter.load(os.path.join(work, k), device=device, dtype=torch.float32).attach_target(model)
                for k in KINDS}
    # Random weights, reading the embedding output and both layers: what matters here is
    # that the layers' states come out of the target's CUDA forwards into the drafter.
    torch.manual_seed(0)
    drafters["fused"] = Drafter(DrafterConfig.for_target(model.config, "gumiho", feature_layers=(0, 1, 2))).to(
        device).eval().attach_target(model)
    for name in (*drafters, "oracle"):
        same, accepted, steps_n = 0, 0, 0
        for i in range(6):
            prompt = tok(f"{WORDS[i]} {WORDS[i + 1]} question", add_special_tokens=False)["input_ids"]
            vanilla = [t for s in stream(target, prompt, None, settings) for t in s.tokens]
            drafter = drafters.get(name) or OracleDrafter(prompt + vanilla + [0] * 16, vocab=len(tok),
                                                            corrupt=0.25, seed=i)
            steps = list(stream(target, prompt, drafter, settings))
            same += [t for s in steps for t in s.tokens] == vanilla
            accepted += sum(s.accepted_length for s in steps)
            steps_n += len(steps)
        ok &= same == 6
        print(f"decode with {name} drafter: speculative == vanilla on {same} of 6 prompts; "
              f"{accepted / max(steps_n, 1):.2f} draft tokens accepted per step", flush=True)
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default=None, help="a saved tokenizer folder (default: the embedded target's)")
    ap.add_argument("--device", default="cuda", help="cuda (the point of this check) or cpu (to try the script)")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA GPU is available; use --device cpu to try the script", file=sys.stderr)
        return 2
    t0 = time.time()
    tok = load_tokenizer(args.tokenizer)
    model = tiny_model(tok, args.device)
    with tempfile.TemporaryDirectory() as work:
        worst = check_distill(model, tok, work)
        check_training(model, tok, work)
        ok = check_decoding(model, tok, work, args.device) and worst < 1e-2
    print(f"{'all checks passed' if ok else 'A CHECK FAILED'} in {time.time() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
