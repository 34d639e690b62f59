"""The default target run by llama.cpp as its GGUF file stores it (gumiho.runtimes.llamacpp):
tree verification through sequence ids gives every row what token-by-token decoding
gives it, bit for bit, and speculative decoding emits vanilla's tokens."""
import os

import pytest
import torch

from gumiho import GenerationSettings, generate, stream
from gumiho.errors import GumihoError
from gumiho.runtimes.llamacpp import _tree_sequences
from gumiho.runtimes.treemask import verify_inputs
from gumiho.tree import DraftTree, TreeSettings
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
    _, _, mask = verify_inputs(DraftTree.of([7] * 6, parents), 3, "cpu", torch.float32)
    for i in range(6):
        sees = [j for j in range(6) if seqs[i][0] in seqs[j] and depths[j] <= depths[i]]
        assert sees == [j for j in range(6) if mask[0, 0, i, 3 + j] == 0]


def users_threads(target):
    """llama.cpp with the threads a user's process gives it (torch's default: the
    machine's cores), not the suite's one (conftest.py): its kernels differ by thread
    count (a one-token forward splits a long cache among the threads), so bit-for-bit
    claims are checked as users run it. Set before the first cache makes a context."""
    target.runtime.threads = max(2, os.cpu_count() or 2)
    return target


def trusted_target(**how):
    """load_target(**how) on llama.cpp, or a skip where this CPU's trial refused the runtime:
    the library then runs on float32 (tests/runtimes/test_native_fallback.py), and these
    claims are about a runtime it does not run."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (requirements.txt) is not installed")
    from gumiho.loading import load_target
    from gumiho.runtimes.llamacpp_trust import NativeRuntimeUnusable

    try:
        target = load_target(**how)
    except NativeRuntimeUnusable as e:
        pytest.skip(f"llama.cpp is not used on this CPU: {e}")
    if target.runtime_note:
        pytest.skip(f"llama.cpp is not used on this CPU: {target.runtime_note}")
    return target


@pytest.fixture(scope="module", params=["q4_1", "q4_0"])
def lc_target(request):
    """The runtime on each file it offers (gumiho.runtimes.llamacpp_files): the shipped Q4_1 file
    (the default) and the Q4_0 rewrite, whose products take llama.cpp's repacked kernels.
    Exactness is a property of the kernels, so every claim is checked on both."""
    return users_threads(trusted_target(runtime="llama.cpp", layout=request.param))


def test_the_runtime_loads_with_this_cpus_repack_rule(lc_target):
    """Every losslessness claim below runs on the load a user gets: llama.cpp's weight
    repack as this CPU's rule says (off where AMX is advertised), after a trial that passed."""
    from gumiho.runtimes.llamacpp_trust import extra_buffers_default

    rt = lc_target.runtime
    assert rt.verdict.usable and rt.extra_buffers == extra_buffers_default()
    assert "CPU :" in rt.verdict.info["system_info"]  # what the build was compiled for, kept with the verdict


def test_a_tree_verify_gives_each_row_the_one_token_forwards_bits(lc_target):
    ids = lc_target.encode(PROMPTS[0])
    ref = generate(lc_target, prompt_ids=ids, settings=GenerationSettings(max_new_tokens=6)).tokens
    # The one-token rows: prompt, then each reference token alone.
    cache = lc_target.new_cache()
    lc_target.forward(ids, 0, cache, last_logits_only=True)
    singles = []
    for k, tok in enumerate(ref[:4]):
        st, lg = lc_target.forward([tok], len(ids) + k, cache)[:2]
        singles.append((st[0], lg[0]))
    # The same tokens as the true branch of a tree with decoys beside and below them.
    decoy = lambda t: (t + 101) % 49152  # noqa: E731
    tokens = [ref[0], ref[1], decoy(ref[1]), ref[2], decoy(ref[2]), decoy(ref[3]), ref[3]]
    parents = [-1, 0, 0, 1, 1, 2, 3]
    true_nodes = [0, 1, 3, 6]
    cache = lc_target.new_cache()
    lc_target.forward(ids, 0, cache, last_logits_only=True)
    states, logits = lc_target.forward(tokens, len(ids), cache, parents)[:2]
    for node, (st, lg) in zip(true_nodes, singles):
        assert torch.equal(logits[node], lg) and torch.equal(states[node], st)
    # After keeping the true path, the next one-token forward is the one-token decoder's too.
    lc_target.keep(cache, len(ids), true_nodes)
    nxt = lc_target.forward([ref[4]], len(ids) + 4, cache).logits
    chain = lc_target.new_cache()
    lc_target.forward(ids + ref[:4], 0, chain, last_logits_only=True)
    ref_next = lc_target.forward([ref[4]], len(ids) + 4, chain).logits
    assert torch.equal(nxt, ref_next)


@pytest.mark.parametrize("cells", [None, 160])
def test_speculative_decoding_on_llamacpp_emits_vanillas_tokens(lc_target, cells, monkeypatch):
    """An oracle drafter (the target's own continuation, some positions corrupted, decoy
    siblings) makes long accepted paths and many rejected branches; with ``cells`` the
    cache is so small that buried cells force rebuilds along the way."""
    if cells:
        monkeypatch.setattr(lc_target.runtime, "cells", cells)
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


def test_the_shipped_drafter_on_llamacpp_is_lossless(lc_target):
    from gumiho.kernels import int4linear
    from gumiho.loading import load_drafter, shipped_drafter_path

    drafter = load_drafter(shipped_drafter_path("gumiho"), lc_target)
    # Beside the 4-bit target the drafter drafts with 4-bit products wherever the CPU takes them.
    assert drafter.int4 == int4linear.available()
    # The runtime's own tree (a chain of one) and the float32 CPU tree, which branches.
    for tree in (None, TreeSettings.for_device("cpu")):
        for prompt in PROMPTS[1:3]:
            s = GenerationSettings(max_new_tokens=32, tree=tree)
            assert generate(lc_target, prompt, drafter, settings=s).tokens == generate(lc_target, prompt,
                                                                                     settings=s).tokens


@pytest.mark.parametrize("small_cache", [False, True])
def test_one_prefill_for_many_samples_writes_what_stream_writes(lc_target, small_cache, monkeypatch):
    """gumiho.engine.decode.SharedPrompt cuts the cache back to the prompt for each generation
    (the buried cells of the last one stay behind): its samples are stream's, bit for
    bit, also when the buried cells fill a small cache and it is rebuilt."""
    from gumiho.engine.decode import SharedPrompt
    from gumiho.loading import load_drafter, shipped_drafter_path

    drafter = load_drafter(shipped_drafter_path("gumiho"), lc_target)
    ids = lc_target.encode(PROMPTS[2])
    if small_cache:  # the smallest context llama.cpp takes here: a few drafted generations fill it
        monkeypatch.setattr(lc_target.runtime, "cells", 160)
    for d, tree in ((None, None), (drafter, TreeSettings.for_device("cpu"))):
        settings = GenerationSettings(max_new_tokens=6, temperature=1.0, tree=tree)
        shared = SharedPrompt(lc_target, ids, d, settings)
        for seed in range(8):
            ref = [t for e in stream(lc_target, ids, d, GenerationSettings(max_new_tokens=6, temperature=1.0,
                                                                           seed=seed, tree=tree)) for t in e.tokens]
            assert [t for e in shared.stream(seed) for t in e.tokens] == ref, (d, seed)
        if small_cache and d is not None:
            assert shared.cache.rebuilds >= 1
    if small_cache:
        monkeypatch.undo()


def test_a_context_made_for_a_smaller_cache_never_serves_a_larger_one(lc_target, monkeypatch):
    """Contexts are pooled by their size: one made while ``cells`` was small, and handed back
    after it grew again, is never given to a cache that prefills 512 tokens a call (llama.cpp
    caps a context's batch at its cells and aborts the process on more: once the suite's
    small-cache tests were followed by a long prompt, it did). A call over a context's cap is
    refused in words before llama.cpp sees it."""
    import gc

    monkeypatch.setattr(lc_target.runtime, "cells", 160)
    small = lc_target.new_cache()
    assert small.batch_size == 160
    with pytest.raises(GumihoError, match="at most 160 tokens per call"):
        small._decode([1] * 161, range(161), [[0]] * 161, [False] * 161)
    monkeypatch.undo()
    del small
    gc.collect()  # its context goes back to the pool now, after the size changed back
    cache = lc_target.new_cache()
    assert cache.batch_size == 512 and cache.cells == lc_target.runtime.cells
    prompt = lc_target.tokenizer(long_text(lc_target.tokenizer, 600))["input_ids"][:600]
    states, logits = lc_target.forward(prompt, 0, cache, last_logits_only=True)[:2]
    assert states.shape[0] == 600 and logits.shape[0] == 1


def test_a_drafter_reading_inner_layers_is_refused_in_words(lc_target):
    from gumiho.loading import load_drafter, shipped_drafter_path

    drafter = load_drafter(shipped_drafter_path("eagle3"), lc_target)
    with pytest.raises(GumihoError, match='inner layers.*load_target\\(runtime="torch"\\)'):
        generate(lc_target, PROMPTS[2], drafter, settings=GenerationSettings(max_new_tokens=4))


def test_an_unknown_runtime_or_another_model_is_refused_in_words():
    from gumiho.loading import load_target

    with pytest.raises(GumihoError, match="Unknown runtime"):
        load_target(runtime="onnx")
    with pytest.raises(GumihoError, match="llama.cpp runtime runs the embedded GGUF"):
        load_target("lmsys/vicuna-7b-v1.3", runtime="llama.cpp")


# -- "auto", the default: llama.cpp where it runs, float32 elsewhere -------------------------------


def test_auto_is_the_default_and_picks_llamacpp_only_where_it_runs(monkeypatch):
    from gumiho.loading import runtime

    monkeypatch.setenv("GUMIHO_RUNTIME", "torch")  # the library reads no environment: the app and CLIs do
    assert runtime.pick_runtime(None) == "auto" and runtime.pick_runtime("") == "auto"
    assert runtime.pick_runtime("float32") == "torch"
    from app.core.settings import AppSettings
    from gumiho.bench.cli import build_parser

    def runtime_asked():  # as the app's entry points read it, once
        return AppSettings.from_environment(os.environ).runtime

    assert runtime_asked() == "torch" and runtime.pick_runtime(runtime_asked()) == "torch"  # the app's edge
    assert build_parser().parse_args(["--prompts", "p.jsonl"]).runtime == "torch"  # the bench command's edge
    monkeypatch.delenv("GUMIHO_RUNTIME")
    assert runtime_asked() is None and build_parser().parse_args(["--prompts", "p.jsonl"]).runtime is None
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(runtime, "llamacpp_available", lambda: True)
    assert runtime.resolve_runtime("auto", True, cpu) == "llama.cpp"
    assert runtime.resolve_runtime("auto", False, cpu) == "torch"  # another model: no GGUF of it to run
    assert runtime.resolve_runtime("auto", True, cuda) == "torch"  # llama.cpp runs it on the CPU only
    assert runtime.resolve_runtime("torch", True, cpu) == "torch"  # asked for by name
    monkeypatch.setattr(runtime, "llamacpp_available", lambda: False)
    assert runtime.resolve_runtime("auto", True, cpu) == "torch"  # not installed: float32, still working


@pytest.fixture(scope="module")
def auto_target():
    return users_threads(trusted_target(runtime="auto"))


def test_auto_runs_the_embedded_gguf_in_llamacpp_with_its_own_tree(auto_target):
    from gumiho.runtimes.llamacpp_files import DEFAULT_LAYOUT, LAYOUTS

    assert auto_target.runtime.name == "llama.cpp" and not auto_target.runtime.flat_verify
    assert auto_target.runtime.weights == LAYOUTS[DEFAULT_LAYOUT].label
    chain = TreeSettings.for_target(auto_target)
    assert (chain.total_tokens, chain.depth) == (1, 1)
    view = auto_target.torch_view()
    assert view.runtime.name == "torch" and view.model is auto_target.model and view is auto_target.torch_view()
    assert view.torch_view() is view
    assert TreeSettings.for_target(view) == TreeSettings.for_device("cpu")


def test_one_target_decodes_every_generation_on_its_own_runtime(auto_target):
    """A target loaded once gives the same text with and without each shipped drafter:
    no drafter moves its generation to another runtime. One that reads inner layers
    (eagle3) is refused in words with the fix, not run elsewhere."""
    from gumiho.loading import load_drafter, shipped_drafter_path
    from gumiho.proposers import as_proposer

    s = GenerationSettings(max_new_tokens=24)
    plain = generate(auto_target, PROMPTS[2], settings=s).tokens
    checked = 0
    for kind in ("gumiho", "eagle3", "serial", "parallel", "eagle"):
        path = shipped_drafter_path(kind)
        if path is None:
            continue
        drafter = load_drafter(path, auto_target)
        if as_proposer(drafter).feature_layers:
            with pytest.raises(GumihoError, match='load_target\\(runtime="torch"\\)'):
                generate(auto_target, PROMPTS[2], drafter, settings=s)
            continue
        assert generate(auto_target, PROMPTS[2], drafter, settings=s).tokens == plain, kind
        checked += 1
    assert checked >= 1


# -- long prompts: every row keeps the one-token bits at any context length -----------------------


def long_text(tokenizer, at_least: int) -> str:
    """At least ``at_least`` tokens of ordinary prose: this repository's own documents,
    joined (written for the project, not drawn from any bench set)."""
    import pathlib

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
    text = ""
    for path in sorted(docs.glob("*.md")):
        text += path.read_text(encoding="utf-8") + "\n\n"
        if len(tokenizer(text)["input_ids"]) >= at_least:
            return text
    raise AssertionError("the docs hold fewer tokens than the test needs")


@pytest.mark.parametrize("context", [600, 2100])
@pytest.mark.slow
def test_rows_after_a_long_context_carry_the_one_token_bits(lc_target, context):
    """Past about 500 cached tokens llama.cpp's float16 flash attention gives a one-token
    forward another kernel than a forward of several tokens (it splits the cells among
    the threads); the runtime's bfloat16 cache keeps one kernel for both."""
    ids = lc_target.tokenizer(long_text(lc_target.tokenizer, context + 8))["input_ids"][:context + 3]
    prompt, nxt = ids[:context], ids[context:]
    cache = lc_target.new_cache()
    lc_target.forward(prompt, 0, cache, last_logits_only=True)
    # A tree first, then buried (as a step that accepts nothing does), then the one-token
    # forwards of vanilla decoding on the same cache: one prefill for both.
    states, logits = lc_target.forward([nxt[0], nxt[1], nxt[2]], context, cache, parents=[-1, 0, 0])[:2]
    lc_target.keep(cache, context, [])
    singles = [lc_target.forward([tok], context + k, cache) for k, tok in enumerate(nxt[:2])]
    for row, (st, lg, _) in enumerate(singles):
        assert torch.equal(logits[row], lg[0]) and torch.equal(states[row], st[0]), row


@pytest.fixture(scope="module")
def long_prompt(lc_target):
    """A chat prompt of 2,000+ tokens: a long document and a question about it, as a
    retrieval-augmented request is; and vanilla's greedy answer on this runtime."""
    # Cut to 2,050 tokens: whole documents would give nearly 6,000, and each prefill of
    # those cost CI about 100 s (the cache is bfloat16, see the test above) for no more
    # coverage: the flash-attention split that matters starts past about 500 cells.
    doc = lc_target.tokenizer.decode(lc_target.tokenizer(long_text(lc_target.tokenizer, 2050))["input_ids"][:2050])
    ids = lc_target.encode(doc + "\n\nIn two sentences, what does the text above say about the llama.cpp runtime?")
    assert len(ids) >= 2000
    return ids, generate(lc_target, prompt_ids=ids, settings=GenerationSettings(max_new_tokens=32)).tokens


@pytest.mark.slow


def test_the_shipped_drafter_is_lossless_on_a_long_prompt(lc_target, long_prompt):
    from gumiho.loading import load_drafter, shipped_drafter_path
    from gumiho.proposers import with_copy

    ids, ref = long_prompt
    drafter = load_drafter(shipped_drafter_path("gumiho"), lc_target)
    # The runtime's own tree (a chain of one) with copying from the long context beside
    # the drafter, and the float32 CPU tree (it branches and reaches the MLP heads).
    for d, tree in ((with_copy(drafter), None), (drafter, TreeSettings.for_device("cpu"))):
        got = generate(lc_target, prompt_ids=ids, drafter=d, settings=GenerationSettings(max_new_tokens=32, tree=tree))
        assert got.tokens == ref, tree


@pytest.mark.slow


def test_a_long_prompt_stays_lossless_through_cache_rebuilds(lc_target, long_prompt, monkeypatch):
    """Cells so few that buried drafts fill the cache within a few steps: it is rebuilt
    (the long prompt included) several times along the answer."""
    from gumiho.runtimes.llamacpp_files import DEFAULT_LAYOUT, LAYOUTS

    if lc_target.runtime.weights != LAYOUTS[DEFAULT_LAYOUT].label:
        pytest.skip("the rebuild does not depend on the file; checked on the default one (saves CI minutes)")
    ids, ref = long_prompt
    monkeypatch.setattr(lc_target.runtime, "cells", len(ids) + 64)
    caches = []
    new_cache = lc_target.runtime.new_cache
    monkeypatch.setattr(lc_target.runtime, "new_cache", lambda: caches.append(new_cache()) or caches[-1])
    drafter = OracleDrafter(ids + ref + [0] * 16, vocab=49152, corrupt=0.3, siblings=3, seed=7)
    steps = list(stream(lc_target, ids, drafter, GenerationSettings(max_new_tokens=32)))
    assert [t for s in steps for t in s.tokens] == ref
    assert caches[-1].rebuilds >= 1
    monkeypatch.undo()


def test_a_target_let_go_gives_llamacpps_memory_back(monkeypatch):
    """llama.cpp's model and contexts live outside Python's memory: when a target goes,
    every context it made and its model are freed by name (counted here), and two
    load-decode-drop rounds leave the process no larger (about 0.36 GB a round stayed
    before they were)."""
    import ctypes
    import gc

    import llama_cpp

    counts = {"made": 0, "freed": 0, "models_freed": 0}

    def counted(name, key):
        real = getattr(llama_cpp, name)

        def call(*args):
            counts[key] += 1
            return real(*args)
        monkeypatch.setattr(llama_cpp, name, call)

    counted("llama_init_from_model", "made")
    counted("llama_free", "freed")
    counted("llama_model_free", "models_freed")

    def resident_mb() -> float:
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def one_round():
        target = trusted_target(runtime="llama.cpp")
        for prompt in PROMPTS[:2]:
            assert generate(target, prompt_ids=target.encode(prompt), max_new_tokens=8).tokens

    one_round()
    first = resident_mb()
    one_round()
    one_round()
    grown = resident_mb() - first
    assert counts["made"] >= 3 and counts["freed"] == counts["made"], counts
    assert counts["models_freed"] == 3
    assert grown < 150, f"{grown:.0f} MB stayed after two rounds"


def test_the_torch_view_packs_on_its_first_forward_and_gives_the_torch_targets_bits():
    """A llama.cpp target's float32 view carries no packed copies of its weights (about
    1 GB for the default model) until a forward runs there; then its logits and states
    are the torch target's bit for bit, as when it was packed at load."""
    from gumiho.kernels.cpulinear import PackedLinear, available
    from gumiho.loading import load_target

    if not available():
        pytest.skip("the packed kernel is not available here")
    view = trusted_target(runtime="llama.cpp").torch_view()
    layers = [m for m in view.runtime.model.modules() if isinstance(m, PackedLinear)]
    assert layers and not any("_pk" in vars(m) for m in layers)
    eager = load_target(None, runtime="torch")
    assert all("_pk" in vars(m) for m in eager.runtime.model.modules() if isinstance(m, PackedLinear))
    ids = eager.encode(PROMPTS[1])
    ours, theirs = (t.runtime.forward(ids, 0, t.new_cache()) for t in (view, eager))
    assert all("_pk" in vars(m) for m in layers)
    assert torch.equal(ours.logits, theirs.logits) and torch.equal(ours.states, theirs.states)
