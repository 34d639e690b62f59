"""The target run as its GGUF file stores it: llama.cpp's kernels on the packed
4-bit blocks, through llama-cpp-python's C API, for vanilla and tree verification.

Why: the engine's own path dequantises the embedded SmolLM2 GGUF (Q4_1 blocks, a
Q8_0 embedding) to float32 and reads 540 MB per token; llama.cpp multiplies the
blocks as stored. On a CPU, ``load_target()`` (runtime "auto") and
``load_target(runtime="llama.cpp")`` make a :class:`Target` whose forwards go
through :class:`LlamaCppRuntime`; the float32 model stays beside
it for what reads weights rather than runs them (a drafter shares its embedding
and LM head, the exporter writes it).

How a draft tree is verified in one llama.cpp batch. llama.cpp masks attention by
sequence ids: a batch token at position p with first sequence id s sees exactly the
cached cells that belong to s and sit at positions <= p. Give every leaf of the tree
its own sequence id l and every node the ids of the leaves below it. A node then
sees, under its first id s, the cells holding s: the context (every live sequence
holds it), its ancestors (each holds every leaf below it, s among them) and itself;
its descendants hold s too but sit at larger positions; every other node is on
another leaf's path and does not hold s. That is the tree mask of gumiho.tree,
built from ids instead of a matrix.

Why rejected nodes are buried, not removed. llama.cpp puts a new token in the
lowest free cell, and attention sums over cells in cell order. Removing a rejected
node would leave a hole that the next token fills, ahead of accepted cells at lower
positions: the sums run in another order and the logits move in the last bits (seen
here: 0.48 on a logit two tokens later), so the output would no longer be vanilla's
token for token. Moving a rejected cell to a sequence no token ever reads (the
graveyard) keeps it occupied: live cells stay in position order, and a masked cell
adds nothing (flash attention skips it), so every row is bit-for-bit what
token-by-token decoding computes (tests/runtimes/test_llamacpp_runtime.py). Buried cells
cost room; when the cache runs out, it is rebuilt from the live tokens, batched as
they were first decoded (the prompt in one batch, the rest in batches of CHUNK),
which gives the same bits.

Install: llama-cpp-python, pinned in requirements.txt (it builds
llama.cpp from PyPI's source package: about ten minutes on two cores, once).
"""
from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Optional

import numpy as np
import torch

from ..errors import GumihoError
from .base import Forward, Runtime, tree_depths
from .llamacpp_trust import INSTALL, NativeRuntimeUnusable, available, repack_words, trust, unusable_message

BATCH = 512  # tokens per llama_decode call of the prompt's prefill
# Tokens per llama_decode call after the prompt. llama.cpp's CPU kernels give a row the
# same bits whatever the batch up to a size (measured: 63 rows after a prompt), and
# take another path beyond (80 rows differed); 32 keeps every verify and rebuild on
# the one-token path's bits.
CHUNK = 32
SEQUENCES = 64  # sequence ids per context: the tree's leaves, and the graveyard
# The KV cache holds bfloat16 keys and values (ggml.h: GGML_TYPE_BF16 = 30; llama-cpp-python
# names no constant for it). Why not llama.cpp's default float16: its CPU flash attention
# takes another path for a one-token forward once the cache view reaches 512 cells (it
# splits the cells among the threads and merges their partial sums), while a forward of
# two or more tokens sums over the cells in one pass. Past about 500 tokens of context a
# verify row then no longer carries the bits of the one-token forward that vanilla decoding
# runs, and greedy speculative decoding parted from vanilla on long prompts. Both the split
# path and the tiled path for 64+ rows are taken only for float16/float32 caches: with
# bfloat16 every forward, of any size and context, runs the one-pass kernel, so rows are
# batch-invariant at every length (tests/runtimes/test_llamacpp_runtime.py, prompts of 2,000+ tokens).
# The price, measured on two cores (research/kv_cache_types.py): about the same speed
# after 200 tokens of context; after 2,000 tokens a one-token forward and the prompt's
# prefill both about 1.6x float16's (docs/llamacpp.md).
KV_TYPE = 30
FLASH_ATTENTION = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED: masked (buried) cells are skipped, not summed as zeros
# What the trial in a child process runs before this process loads llama.cpp (llamacpp_trial.py):
# this runtime's cache, attention, batch sizes and sequence ids, over a prompt of 600 tokens,
# past the 512 cells where llama.cpp's attention paths divide. A one-token trial at a short
# context once passed on a machine whose llama.cpp then aborted in a tree forward after a long
# prompt, taking the process with it. 2-4.5 s on two cores, once per machine, build and file.
TRIAL_CONTEXT = 600
TRIAL_SHAPE = (KV_TYPE, FLASH_ATTENTION, BATCH, CHUNK, SEQUENCES, TRIAL_CONTEXT)


def _library():
    """llama-cpp-python, imported: call only after :func:`trust` found it usable here."""
    try:
        import llama_cpp
    except ImportError:
        raise GumihoError(f"The llama.cpp runtime needs llama-cpp-python: {INSTALL}") from None
    return llama_cpp


_QUIET = None  # the log callback handed to llama.cpp: kept alive as long as the process


def _silence(llama_cpp) -> None:
    """llama.cpp logs every tensor it loads to stderr; keep errors only."""
    global _QUIET
    if _QUIET is None:
        @llama_cpp.llama_log_callback
        def quiet(level, text, user_data):
            if level == 4:  # GGML_LOG_LEVEL_ERROR (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4)
                sys.stderr.write(text.decode("utf-8", "replace"))
        _QUIET = quiet
    llama_cpp.llama_log_set(_QUIET, None)


def check_runtime(gguf_path: str, threads: Optional[int] = None, extra_buffers: Optional[bool] = None):
    """The verdict of this runtime's trial on ``gguf_path`` here (gumiho.runtimes.llamacpp_trust.trust,
    with this runtime's cache type and attention, so the trial runs its kernels): cached
    after the first time; NativeRuntimeUnusable, in words, when it died or failed."""
    if not available():
        raise GumihoError(f"The llama.cpp runtime needs llama-cpp-python: {INSTALL}")
    verdict = trust(gguf_path, int(threads or torch.get_num_threads()), extra_buffers, TRIAL_SHAPE)
    if not verdict.usable:
        raise NativeRuntimeUnusable(unusable_message(verdict), verdict)
    return verdict


NO_INNER_STATES = ("This drafter reads the target's inner layers, which the llama.cpp runtime does not hand out "
                   "(it gives the final states only). Load the target with load_target(runtime=\"torch\") "
                   "(float32 weights) to draft with it.")


def _free_native(lib, model, pool: dict) -> None:
    for contexts in pool.values():
        for ctx in contexts:
            lib.llama_free(ctx)
        contexts.clear()
    lib.llama_model_free(model)


class LlamaCppRuntime(Runtime):
    """One GGUF model loaded by llama.cpp, and a pool of contexts (each one KV
    cache) handed out by :meth:`new_cache`. Contexts share the model's weights."""

    name = "llama.cpp"
    # A forward over 4 tokens costs 2.3-2.4 one-token forwards on two cores on every 4-bit
    # layout measured, the repacked Q4_0 rewrite included (gumiho.bench.layouts,
    # docs/llamacpp.md): its 4-bit products are bound by arithmetic.
    flat_verify = False
    quantized = True
    truncates = True

    def __init__(self, gguf_path: str, context_length: int, threads: Optional[int] = None,
                 weights: str = "4-bit, as stored", extra_buffers: Optional[bool] = None):
        """``extra_buffers``: let llama.cpp repack the weights at load (None: the rule of
        :func:`extra_buffers_default`). The runtime is tried in a child process first
        (:func:`trust`); one that dies there raises NativeRuntimeUnusable, and this
        process never loads it."""
        self.threads = int(threads or torch.get_num_threads())
        self.verdict = check_runtime(gguf_path, self.threads, extra_buffers)
        self.extra_buffers = bool(self.verdict.setting.get("extra_buffers"))
        # The load setting and why, in words (e.g. "weight repacking off: this CPU advertises AMX, ...").
        self.load_words = repack_words(self.extra_buffers, extra_buffers,
                                       (self.verdict.info or {}).get("repack_died", ""))
        lib = _library()
        self.lib = lib
        _silence(lib)
        self.path = gguf_path
        self.weights = weights
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.use_extra_bufts = self.extra_buffers
        self.model = lib.llama_model_load_from_file(os.fsencode(gguf_path), params)
        if not self.model:
            raise GumihoError("llama.cpp could not load the model file.")
        self.vocab_size = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.hidden_size = lib.llama_model_n_embd(self.model)
        self.context_length = int(context_length)
        # Room for the window and for buried cells; a cache that fills is rebuilt (see LlamaCppCache).
        self.cells = self.context_length + 2048
        # Idle contexts by the cells they were made with: a cache finalized after ``cells`` changed
        # returns its context to its own size's pool, never to another's (a context of 160 cells
        # takes at most 160 tokens a call, and llama.cpp aborts on more).
        self._free: dict[int, list] = {}
        self._lock = threading.Lock()
        # llama.cpp's model and contexts (a KV cache of ``cells`` each) are freed by name when the
        # runtime goes (a live cache holds it, so all are pooled by then); not at exit.
        self._finalizer = weakref.finalize(self, _free_native, lib, self.model, self._free)
        self._finalizer.atexit = False

    def _new_context(self, cells: int):
        lib = self.lib
        p = lib.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch = cells, BATCH, BATCH
        p.n_seq_max, p.kv_unified = SEQUENCES, True  # one cell store that every sequence id indexes
        p.n_threads = p.n_threads_batch = self.threads
        p.embeddings = True  # the final-norm states too, beside the logits: what a drafter reads
        p.type_k = p.type_v = KV_TYPE
        p.flash_attn_type = FLASH_ATTENTION
        p.pooling_type = lib.LLAMA_POOLING_TYPE_NONE
        ctx = lib.llama_init_from_model(self.model, p)
        if not ctx:
            raise GumihoError("llama.cpp could not make a context (out of memory?).")
        return ctx

    def new_cache(self) -> "LlamaCppCache":
        cells = self.cells
        with self._lock:
            idle = self._free.get(cells)
            ctx = idle.pop() if idle else None
        if ctx is None:
            ctx = self._new_context(cells)
        cache = LlamaCppCache(self, ctx, cells)
        weakref.finalize(cache, self._release, cells, ctx)
        return cache

    def _release(self, cells: int, ctx):
        with self._lock:
            self._free.setdefault(cells, []).append(ctx)

    # -- the Runtime interface -----------------------------------------------------------------------

    def forward(self, tokens, past, cache, parents=None, last_logits_only=False, feature_layers=None):
        if feature_layers:
            raise GumihoError(NO_INNER_STATES)
        return Forward(*cache.forward([int(t) for t in tokens], past, parents, last_logits_only))

    def keep(self, cache, past, kept):
        cache.keep(past, list(kept))

    def truncate(self, cache, length):
        cache.truncate(int(length))

    def check_proposer(self, proposer) -> None:
        if getattr(proposer, "feature_layers", None):
            raise GumihoError(NO_INNER_STATES)

    def default_tree(self, device):
        """A chain of one: the drafter's first guess alone. Measured on 8 MT-Bench prompts
        (research/runtime_trees.py --layout q4_1|q4_0, benchmarks/asstored/runtime_trees-
        llama.cpp.txt, benchmarks/layouts/runtime_trees-q4_0.txt): the float32 CPU tree ran at
        0.43x / 0.40x this runtime's vanilla, the cost-aware tree 0.59x / 0.49x, a chain of
        two 0.55x / 0.52x, a chain of one 0.65x / 0.65x (0.70x / 0.68x with copying), the
        least slow on both files. No tree beats vanilla here on two cores: a verify over two
        tokens costs 1.6 forwards, and every drafting step beyond the first runs the
        drafter's Transformer again."""
        from ..tree import TreeSettings

        return TreeSettings(total_tokens=1, depth=1, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=False,
                            full_tree_tokens=0)


class LlamaCppCache:
    """A generation's KV cache in one llama.cpp context.

    Sequence ids 0 .. ``synced``-1 each hold the whole live sequence (the context
    the next forward attends to); id SEQUENCES-1 is the graveyard. ``history`` is
    the live tokens by position, from which a full cache is rebuilt."""

    GRAVE = SEQUENCES - 1

    def __init__(self, runtime: LlamaCppRuntime, ctx, cells: int):
        self.rt, self.ctx, self.cells = runtime, ctx, cells
        lib = runtime.lib
        # Tokens per llama_decode call: BATCH, or fewer where the context is smaller (llama.cpp
        # caps a context's batch at its cells and aborts, GGML_ASSERT, on a call over the cap).
        self.batch_size = min(BATCH, lib.llama_n_batch(ctx))
        self.mem = lib.llama_get_memory(ctx)
        lib.llama_memory_clear(self.mem, True)
        self.batch = lib.llama_batch_init(BATCH, 0, SEQUENCES)
        weakref.finalize(self, lib.llama_batch_free, self.batch)
        self.synced = 1
        self.used = 0  # cells taken, live or buried
        self.history: list[int] = []
        self.prompt_len = 0  # the first forward's tokens, prefilled in batches of batch_size
        self.pending: Optional[tuple] = None  # the last forward: (start position, tokens, node sequence ids)
        self.rebuilds = 0  # how often the cache was rebuilt (for tests and profiles)

    # -- llama.cpp calls ---------------------------------------------------------------------------

    def _decode(self, tokens, positions, seqs, outputs) -> None:
        b, n = self.batch, len(tokens)
        if n > self.batch_size:  # checked here: past this llama.cpp aborts the process, it returns no error
            raise GumihoError(f"llama.cpp takes at most {self.batch_size} tokens per call on this cache; {n} were "
                              "given.")
        b.n_tokens = n
        for i in range(n):
            b.token[i], b.pos[i], b.logits[i] = tokens[i], positions[i], 1 if outputs[i] else 0
            b.n_seq_id[i] = len(seqs[i])
            for k, s in enumerate(seqs[i]):
                b.seq_id[i][k] = s
        rc = self.rt.lib.llama_decode(self.ctx, b)
        if rc != 0:
            raise GumihoError(f"llama.cpp could not run the forward (llama_decode returned {rc}).")
        self.used += n

    def _rows(self, getter, n: int, width: int) -> torch.Tensor:
        return torch.from_numpy(np.ctypeslib.as_array(getter(self.ctx), shape=(n, width)).copy())

    def _sync_to(self, k: int) -> None:
        """Make sequences 0..k-1 hold the live sequence (sequence 0 always does)."""
        for s in range(self.synced, k):
            self.rt.lib.llama_memory_seq_cp(self.mem, 0, s, -1, -1)
        self.synced = max(self.synced, k)

    def _bury(self, s: int, p0: int) -> None:
        """Sequence ``s``'s cells from position ``p0`` on go to the graveyard."""
        lib = self.rt.lib
        lib.llama_memory_seq_cp(self.mem, s, self.GRAVE, p0, -1)
        lib.llama_memory_seq_rm(self.mem, s, p0, -1)

    def _rebuild(self) -> None:
        """A fresh cache of the live tokens, no buried cells, batched as they were
        first decoded (the prompt in batch_size, the rest in CHUNK): the same bits."""
        self.rt.lib.llama_memory_clear(self.mem, True)
        self.used, self.synced = 0, 1
        self.rebuilds += 1
        cuts = (list(range(0, self.prompt_len, self.batch_size))
                + list(range(self.prompt_len, len(self.history), CHUNK)))
        for a, b in zip(cuts, cuts[1:] + [len(self.history)]):
            part = self.history[a:b]
            self._decode(part, range(a, b), [[0]] * len(part), [False] * len(part))

    # -- what the runtime's forward and keep ask -----------------------------------------------

    def forward(self, tokens: list[int], start: int, parents: Optional[list[int]], last_logits_only: bool):
        """Tokens at positions from ``start`` (a chain when ``parents`` is None, else
        a tree with those parents, -1 for the root). Returns the final-norm states
        [T, H] and the logits [T, V] (or [1, V] of the last token)."""
        del self.history[start:]  # positions from start on are being replaced
        n = len(tokens)
        if start == 0:
            self.prompt_len = n
        step = self.batch_size if start == 0 else min(CHUNK, self.batch_size)
        if self.used + n > self.cells:
            self._rebuild()
        if parents is None:
            seqs = [list(range(self.synced))] * n
            positions = list(range(start, start + n))
        else:
            seqs, depths = _tree_sequences(parents)
            if len(seqs[0]) > self.GRAVE:
                raise GumihoError(f"The draft tree has {len(seqs[0])} leaves; the llama.cpp runtime verifies at most "
                                  f"{self.GRAVE}. Use a smaller tree or runtime='torch'.")
            self._sync_to(len(seqs[0]))
            positions = [start + d for d in depths]
        states, logits = [], []
        for a in range(0, n, step):
            m = min(step, n - a)
            self._decode(tokens[a:a + m], positions[a:a + m], seqs[a:a + m], [True] * m)
            lib = self.rt.lib
            states.append(self._rows(lib.llama_get_embeddings, m, self.rt.hidden_size))
            if not last_logits_only:
                logits.append(self._rows(lib.llama_get_logits, m, self.rt.vocab_size))
            elif a + m == n:
                logits.append(self._rows(lambda c: lib.llama_get_logits_ith(c, m - 1), 1, self.rt.vocab_size))
        if parents is None:
            self.history.extend(tokens)
        self.pending = (start, list(tokens), seqs)
        return torch.cat(states), torch.cat(logits)

    def keep(self, past: int, kept: list[int]) -> None:
        """After a forward from position ``past``: keep the nodes ``kept`` (a chain
        from the root, by index: the root and the accepted path), bury the rest.

        A sequence s shares with the accepted path the kept nodes that hold it; its
        cells after the deepest of those are off the path and are buried. Then the
        accepted cells are given to every live sequence."""
        start, tokens, seqs = self.pending
        assert start == past, "keep() must follow the forward it trims"
        lib = self.rt.lib
        for s in range(self.synced):  # a tree's leaf ids are all below synced (forward synced them)
            shared = sum(1 for i in kept if s in seqs[i])
            self._bury(s, past + shared)
        if kept:
            last = seqs[kept[-1]][0]
            for s in range(self.synced):
                if s != last:
                    lib.llama_memory_seq_cp(self.mem, last, s, past, past + len(kept))
        self.history[past:] = [tokens[i] for i in kept]
        self.pending = None

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions of the live sequence: every live
        sequence's cells from there on are buried, as keep() buries a rejected branch."""
        for s in range(self.synced):
            self._bury(s, length)
        del self.history[length:]
        self.prompt_len = min(self.prompt_len, length)
        self.pending = None


def _tree_sequences(parents: list[int]) -> tuple[list[list[int]], list[int]]:
    """Each node's sequence ids (the leaves below it, numbered 0.. in index order,
    so the root holds all of them) and its depth. Parents come before children."""
    n = len(parents)
    has_child = [False] * n
    for p in parents:
        if p >= 0:
            has_child[p] = True
    depths = tree_depths(parents)
    seqs: list[list[int]] = [[] for _ in range(n)]
    for leaf_id, leaf in enumerate(i for i in range(n) if not has_child[i]):
        j = leaf
        while j >= 0:
            seqs[j].append(leaf_id)
            j = parents[j]
    return seqs, depths
