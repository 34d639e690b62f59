"""Tiny random-weight targets and scripted drafters for fast, exact engine tests."""
from __future__ import annotations

import random
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from gumiho.drafter import DrafterConfig
from gumiho.loading import prepare_target
from gumiho.proposers import LearnedProposer, Proposer, ProposerSession
from gumiho.tree import DraftTree

ROOT = Path(__file__).resolve().parent.parent


def tiny_target(family: str = "llama", vocab: int = 96, hidden: int = 32, layers: int = 2, heads: int = 4,
                kv_heads: int = 2, seed: int = 0, eos: int = 1, ctx: int = 512, init: float = 0.2):
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=ctx,
                  eos_token_id=eos, bos_token_id=0, pad_token_id=0, initializer_range=init,
                  tie_word_embeddings=False)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, use_sliding_window=False))
    else:
        raise ValueError(family)
    model.generation_config.eos_token_id = eos
    return prepare_target(model.eval(), None, f"tiny-{family}")


class _ScriptedHeads(Proposer):
    """A scripted proposer that names its heads as a learned drafter of ``cfg`` would."""

    heads = LearnedProposer.heads
    family_at = LearnedProposer.family_at
    sizes_by_cost = True  # as a learned drafter: a cost-aware tree measures the verify cost for it

    @property
    def name(self):
        return self.cfg.kind


class OracleDrafter(_ScriptedHeads):
    """A drafter that knows the target's own greedy continuation and proposes it,
    with some positions corrupted and decoy siblings added, so that long accepted
    paths, partial acceptance, EOS inside an accepted draft and the length limit
    are all exercised. It only sees what a real drafter sees (the proposer interface)."""

    def __init__(self, reference: list[int], vocab: int, corrupt: float = 0.2, siblings: int = 1,
                 seed: int = 0, kind: str = "gumiho"):
        self.reference = reference  # prompt + continuation, token ids
        self.vocab = vocab
        self.corrupt = corrupt
        self.siblings = siblings
        self.rng = random.Random(seed)
        self.cfg = DrafterConfig(hidden_size=8, vocab_size=vocab, kind=kind, num_attention_heads=1,
                                 num_key_value_heads=1)

    def start(self, prompt_ids):
        return _OracleSession(self, prompt_ids)


class _OracleSession(ProposerSession):
    def __init__(self, oracle: OracleDrafter, prompt_ids):
        self.o = oracle
        self.seen = list(prompt_ids)
        assert self.seen == oracle.reference[:len(self.seen)]

    def update(self, verified):
        # One state per new token after a verify (the root's and the accepted nodes'),
        # every prompt position's after the prefill.
        rows = len(verified.tokens) if verified.tree is not None else len(self.seen)
        assert verified.states.shape[0] == rows
        self.seen += [int(t) for t in verified.tokens]

    def propose(self, root_token, budget):  # scripted: sized by the script
        settings, max_depth = budget.tree, budget.max_depth
        o, rng = self.o, self.o.rng
        assert self.seen[-1] == root_token
        depth = min(settings.depth, o.cfg.max_depth, max_depth or 10**9)
        depth = rng.randint(1, depth)
        start = len(self.seen)
        truth = o.reference[start:start + depth]
        tree = DraftTree.root_only(root_token)
        parent = 0
        for d, tok in enumerate(truth, start=1):
            if rng.random() < o.corrupt:
                tok = (tok + rng.randint(1, o.vocab - 1)) % o.vocab
            decoys = [rng.randrange(o.vocab) for _ in range(o.siblings)]
            # Put the main chain first or after the decoys, so either child order is tested.
            order = [tok] + decoys if rng.random() < 0.5 else decoys + [tok]
            main = None
            used = set()
            for t in order:
                if t in used:
                    continue
                used.add(t)
                node = tree.add(t, parent, 0.9 if t == tok else 0.05, 0.0, o.family_at(d))
                if t == tok:
                    main = node
            parent = main
        return tree.check()


class FixedTreeDrafter(_ScriptedHeads, ProposerSession):
    """Proposes the same token tree shape every step (for the sampling test):
    ``branches`` maps a depth to the tokens proposed below each node of the previous depth."""

    def __init__(self, vocab: int, branches: list[list[int]]):
        self.branches = branches
        self.cfg = DrafterConfig(hidden_size=8, vocab_size=vocab, num_attention_heads=1, num_key_value_heads=1)

    def start(self, prompt_ids):
        return self

    def update(self, verified):
        pass

    def propose(self, root_token, budget):  # scripted: sized by the script
        max_depth = budget.max_depth
        tree = DraftTree.root_only(root_token)
        frontier = [0]
        for d, toks in enumerate(self.branches, start=1):
            if max_depth is not None and d > max_depth:
                break
            nxt = []
            for p in frontier:
                for t in toks:
                    nxt.append(tree.add(t, p, 1.0 / len(toks), 0.0, self.family_at(d)))
            frontier = nxt
        return tree


def ready_hub(target, drafter, label: str = "tiny drafter", trained: bool = False):
    """An app ModelHub that is ready at once and serves ``target`` with ``drafter``
    for every request (no loading thread, no shipped drafters looked for)."""
    from app.models.hub import ModelHub, Resolved

    hub = ModelHub(default_loader=lambda: target, warmup=False)
    hub.resolve = lambda *a, **k: Resolved(target, drafter, trained, "", label)
    hub.state = "ready"
    hub._ready.set()
    return hub
