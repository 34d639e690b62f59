"""The default target run by llama.cpp as its GGUF file stores it (gumiho.llamacpp):
tree verification through sequence ids gives every row what token-by-token decoding
gives it, bit for bit, and speculative decoding emits vanilla's tokens."""
import random

import pytest
import torch

from gumiho import GenerationSettings, generate, stream
from gumiho.errors import GumihoError
from gumiho.llamacpp import _tree_sequences, parents_from_mask
from gumiho.tree import DraftTree, TreeSettings, verify_inputs

from helpers import OracleDrafter

# Prompts written for this test (not in any bench set): a recipe, code, a question, French.
PROMPTS = ["Give me a recipe for a quick tomato soup.",
           "Write a Python function that returns the n-th Fibonacci number.",
           "Why do cats purr?",
           "Décris une journée d'automne à Lyon en trois phrases."]


def test_tree_sequences_are_the_leaves_below_each_node():
    #        0
    #      1   2
    #     3 4   5
    parents = [-1, 0, 0, 1, 1, 2]
    seqs, depths = _tree_sequences(parents)
    assert depths == [0, 1, 1, 2, 2, 2]
    assert seqs == [[0, 1, 2], [0, 1], [2], [0], [1], [2]]
    # Each node's first id reaches exactly its ancestors and itself, as the tree mask says.
    _, _, mask = verify_inputs(DraftTree([7] * 6, parents, depths, [1.0] * 6), 3, "cpu", torch.float32)
    for i in range(6):
        sees = [j for j in range(6) if seqs[i][0] in seqs[j] and depths[j] <= depths[i]]
        assert sees == [j for j in range(6) if mask[0, 0, i, 3 + j] == 0]


def test_parents_are_read_back_from_the_mask():
    rng = random.Random(1)
    for _ in range(20):
        parents = [-1] + [rng.randrange(i) for i in range(1, 12)]
        depths = [0] * 12
        for i in range(1, 12):
            depths[i] = depths[parents[i]] + 1
        _, _, mask = verify_inputs(DraftTree(list(range(12)), parents, depths, [1.0] * 12), 5, "cpu", torch.float32)
        assert parents_from_mask(mask, 5) == parents


@pytest.fixture(scope="module")
def lc_target():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (requirements.txt) is not installed")
    from gumiho.models import load_target
    return load_target(runtime="llama.cpp")


def test_a_tree_verify_gives_each_row_the_one_token_forwards_bits(lc_target):
    ids = lc_target.encode(PROMPTS[0])
    ref = generate(lc_target, prompt_ids=ids, settings=GenerationSettings(max_new_tokens=6)).tokens
    # The one-token rows: prompt, then each reference token alone.
    cache = lc_target.new_cache()
    lc_target.forward(torch.tensor([ids]), torch.arange(len(ids))[None], None, cache, last_logits_only=True)
    singles = []
    for k, tok in enumerate(ref[:4]):
        st, lg = lc_target.forward(torch.tensor([[tok]]), torch.tensor([[len(ids) + k]]), None, cache)
        singles.append((st[0], lg[0]))
    # The same tokens as the true branch of a tree with decoys beside and below them.
    decoy = lambda t: (t + 101) % 49152  # noqa: E731
    tokens = [ref[0], ref[1], decoy(ref[1]), ref[2], decoy(ref[2]), decoy(ref[3]), ref[3]]
    parents = [-1, 0, 0, 1, 1, 2, 3]
    depths = [0, 1, 1, 2, 2, 2, 3]
    true_nodes = [0, 1, 3, 6]
    cache = lc_target.new_cache()
    lc_target.forward(torch.tensor([ids]), torch.arange(len(ids))[None], None, cache, last_logits_only=True)
    t_ids, pos, mask = verify_inputs(DraftTree(tokens, parents, depths, [1.0] * 7), len(ids), "cpu", torch.float32)
    states, logits = lc_target.forward(t_ids, pos, mask, cache)
    for node, (st, lg) in zip(true_nodes, singles):
        assert torch.equal(logits[node], lg) and torch.equal(states[node], st)
    # After keeping the true path, the next one-token forward is the one-token decoder's too.
    cache.keep(len(ids), true_nodes)
    _, nxt = lc_target.forward(torch.tensor([[ref[4]]]), torch.tensor([[len(ids) + 4]]), None, cache)
    chain = lc_target.new_cache()
    lc_target.forward(torch.tensor([ids + ref[:4]]), torch.arange(len(ids) + 4)[None], None, chain, True)
    _, ref_next = lc_target.forward(torch.tensor([[ref[4]]]), torch.tensor([[len(ids) + 4]]), None, chain)
    assert torch.equal(nxt, ref_next)


@pytest.mark.parametrize("cells", [None, 160])
def test_speculative_decoding_on_llamacpp_emits_vanillas_tokens(lc_target, cells, monkeypatch):
    """An oracle drafter (the target's own continuation, some positions corrupted, decoy
    siblings) makes long accepted paths and many rejected branches; with ``cells`` the
    cache is so small that buried cells force rebuilds along the way."""
    if cells:
        monkeypatch.setattr(lc_target.runtime, "cells", cells)
        monkeypatch.setattr(lc_target.runtime, "_free", [])  # fresh contexts of that size
    accepted = 0
    for i, prompt in enumerate(PROMPTS):
        ids = lc_target.encode(prompt)
        ref = generate(lc_target, prompt_ids=ids, settings=GenerationSettings(max_new_tokens=40)).tokens
        drafter = OracleDrafter(ids + ref + [0] * 16, vocab=49152, corrupt=0.3, siblings=2, seed=i)
        steps = list(stream(lc_target, ids, drafter, GenerationSettings(max_new_tokens=40)))
        assert [t for s in steps for t in s.tokens] == ref
        accepted += sum(s.accepted_length for s in steps)
    assert accepted > 40
    if cells:
        monkeypatch.undo()
        lc_target.runtime._free.clear()


def test_the_shipped_drafter_on_llamacpp_is_lossless(lc_target):
    from gumiho.models import load_drafter, shipped_drafter_path

    drafter = load_drafter(shipped_drafter_path("gumiho"), lc_target)
    # The runtime's own tree (a chain of one) and the float32 CPU tree, which branches.
    for tree in (None, TreeSettings.for_device("cpu")):
        for prompt in PROMPTS[1:3]:
            s = GenerationSettings(max_new_tokens=32, tree=tree)
            assert generate(lc_target, prompt, drafter, settings=s).tokens == generate(lc_target, prompt,
                                                                                     settings=s).tokens


def test_a_drafter_reading_inner_layers_is_refused_in_words(lc_target):
    from gumiho.models import load_drafter, shipped_drafter_path

    drafter = load_drafter(shipped_drafter_path("eagle3"), lc_target)
    with pytest.raises(GumihoError, match="inner layers.*runtime='torch'"):
        generate(lc_target, PROMPTS[2], drafter, settings=GenerationSettings(max_new_tokens=4))


def test_an_unknown_runtime_or_another_model_is_refused_in_words():
    from gumiho.models import load_target

    with pytest.raises(GumihoError, match="Unknown runtime"):
        load_target(runtime="onnx")
    with pytest.raises(GumihoError, match="llama.cpp runtime runs the embedded GGUF"):
        load_target("lmsys/vicuna-7b-v1.3", runtime="llama.cpp")


# -- "auto", the default: llama.cpp where it runs, float32 elsewhere -------------------------------


def test_auto_is_the_default_and_picks_llamacpp_only_where_it_runs(monkeypatch):
    from gumiho import models

    monkeypatch.delenv("GUMIHO_RUNTIME", raising=False)
    assert models.pick_runtime(None) == "auto"
    monkeypatch.setenv("GUMIHO_RUNTIME", "float32")
    assert models.pick_runtime(None) == "torch"
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(models, "llamacpp_available", lambda: True)
    assert models.resolve_runtime("auto", True, cpu) == "llama.cpp"
    assert models.resolve_runtime("auto", False, cpu) == "torch"  # another model: no GGUF of it to run
    assert models.resolve_runtime("auto", True, cuda) == "torch"  # llama.cpp runs it on the CPU only
    assert models.resolve_runtime("torch", True, cpu) == "torch"  # asked for by name
    monkeypatch.setattr(models, "llamacpp_available", lambda: False)
    assert models.resolve_runtime("auto", True, cpu) == "torch"  # not installed: float32, still working


@pytest.fixture(scope="module")
def auto_target():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (requirements.txt) is not installed")
    from gumiho.models import load_target
    return load_target(runtime="auto")


def test_auto_runs_the_embedded_gguf_in_llamacpp_with_its_own_tree(auto_target):
    assert auto_target.runtime_name == "llama.cpp" and auto_target.runtime_auto
    chain = TreeSettings.for_target(auto_target)
    assert (chain.total_tokens, chain.depth) == (1, 1)
    view = auto_target.torch_view()
    assert view.runtime_name == "torch" and view.model is auto_target.model and view is auto_target.torch_view()
    assert TreeSettings.for_target(view) == TreeSettings.for_device("cpu")


def test_auto_hands_an_inner_layer_drafter_to_the_torch_view(auto_target):
    """The eagle3 drafter reads three inner layers: on an auto target it runs on the
    float32 view and gives that view's vanilla tokens; asked for by name, llama.cpp
    refuses it (test above)."""
    from gumiho.models import load_drafter, shipped_drafter_path
    from gumiho.proposers import as_proposer

    drafter = load_drafter(shipped_drafter_path("eagle3"), auto_target)
    assert auto_target.for_proposer(as_proposer(drafter)) is auto_target.torch_view()
    assert auto_target.for_proposer(as_proposer(None)) is auto_target
    s = GenerationSettings(max_new_tokens=24)
    got = generate(auto_target, PROMPTS[2], drafter, settings=s).tokens
    assert got == generate(auto_target.torch_view(), PROMPTS[2], settings=s).tokens
