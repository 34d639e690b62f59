"""The llama.cpp runtime's trial, run in a child process (gumiho.runtimes.llamacpp's
probe passes this file's text to ``python -c``): load a GGUF file as the runtime loads
it, make a context as the runtime makes one, run every kind of forward the runtime runs,
and print what the build was compiled for as one JSON line. It imports llama-cpp-python
and nothing of this project (no torch).

    python -c "$(cat llamacpp_trial.py)" FILE.gguf EXTRA_BUFFERS(0|1) THREADS KV_TYPE FLASH_ATTENTION \
        BATCH CHUNK SEQUENCES CONTEXT

Why every kind of forward, not one token: llama.cpp picks its kernels by the shape of
the work (batch size, the cells in the cache view, how many sequences a batch names, the
CPU's instruction sets), so a one-token decode at a short context leaves most of the
runtime's paths untried, and a kernel that aborts (a failed GGML_ASSERT) or dies on one of
them would take the caller's process down. The trial walks what a long generation does:
a prompt of CONTEXT tokens prefilled in batches of BATCH (past the 512 cells where
llama.cpp's attention paths divide), a draft tree over two sequences, its rejected node
moved to the graveyard sequence, a one-token forward and a CHUNK-token forward. It costs
2-4.5 s on two cores (research/trial_cost.py), once per machine, build and file (the verdict is cached).

Exit 0: it ran. Killed by a signal: that signal is the verdict. Exit 3: the file or
a context could not be made, or a decode failed (words on stderr).
"""
import json
import os
import sys


def main() -> int:
    path, extra = sys.argv[1], sys.argv[2] == "1"
    threads, kv_type, flash, batch_size, chunk, sequences, context = map(int, sys.argv[3:10])
    import llama_cpp as lc

    lc.llama_backend_init()
    params = lc.llama_model_default_params()
    params.use_extra_bufts = extra  # llama.cpp's weight repack (CPU_REPACK, AMX) into extra buffer types
    model = lc.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        print("llama.cpp could not load the file", file=sys.stderr)
        return 3
    vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    cp = lc.llama_context_default_params()  # the runtime's context (gumiho.runtimes.llamacpp), smaller
    cp.n_ctx, cp.n_batch, cp.n_ubatch = context + 2 * batch_size, batch_size, batch_size
    cp.n_seq_max, cp.kv_unified = sequences, True
    cp.n_threads = cp.n_threads_batch = threads
    cp.embeddings = True
    cp.type_k = cp.type_v = kv_type
    cp.flash_attn_type = flash
    cp.pooling_type = lc.LLAMA_POOLING_TYPE_NONE
    ctx = lc.llama_init_from_model(model, cp)
    if not ctx:
        print("llama.cpp could not make a context", file=sys.stderr)
        return 3
    mem = lc.llama_get_memory(ctx)
    grave = sequences - 1
    batch = lc.llama_batch_init(batch_size, 0, sequences)

    def decode(start, n, seqs=((0,),), depths=None):
        """n tokens from position ``start`` (at ``start + depths[i]`` for a tree), each in
        the sequences given (one tuple for all, or one per token)."""
        batch.n_tokens = n
        for i in range(n):
            ids = seqs[i] if len(seqs) == n else seqs[0]
            batch.token[i] = (start + i) * 7919 % vocab  # any tokens: the kernels depend on shapes only
            batch.pos[i] = start + (depths[i] if depths else i)
            batch.logits[i] = 1
            batch.n_seq_id[i] = len(ids)
            for k, s in enumerate(ids):
                batch.seq_id[i][k] = s
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError(f"llama_decode failed on {n} tokens at position {start}")

    try:
        for a in range(0, context, batch_size):  # the prompt's prefill
            decode(a, min(batch_size, context - a))
        lc.llama_memory_seq_cp(mem, 0, 1, -1, -1)  # a second live sequence, as a tree of two leaves needs
        decode(context, 3, seqs=((0, 1), (0,), (1,)), depths=[0, 1, 1])  # root, then one child per leaf
        for s in (0, 1):  # nothing accepted: the tree's cells go to the graveyard
            lc.llama_memory_seq_cp(mem, s, grave, context, -1)
            lc.llama_memory_seq_rm(mem, s, context, -1)
        decode(context, 1)  # vanilla's one-token forward
        decode(context + 1, chunk)  # a verify or a rebuild in CHUNK tokens
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 3
    built_for = lc.llama_print_system_info()
    print(json.dumps({"system_info": built_for.decode("utf-8", "replace") if isinstance(built_for, bytes)
                      else str(built_for)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
