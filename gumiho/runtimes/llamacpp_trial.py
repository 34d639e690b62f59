"""The llama.cpp runtime's trial, run in a child process (gumiho.runtimes.llamacpp's
probe passes this file's text to ``python -c``): load a GGUF file as the runtime loads
it, decode a four-token batch and then one token, and print what the build was
compiled for as one JSON line. It imports llama-cpp-python and nothing of this
project (no torch), so it costs the library's load and two small forwards only.

    python -c "$(cat llamacpp_trial.py)" FILE.gguf EXTRA_BUFFERS(0|1) THREADS KV_TYPE FLASH_ATTENTION

Exit 0: it ran. Killed by a signal: that signal is the verdict. Exit 3: the file or
a context could not be made (words on stderr).
"""
import json
import os
import sys


def main() -> int:
    path, extra, threads, kv_type, flash = sys.argv[1], sys.argv[2] == "1", *map(int, sys.argv[3:6])
    import llama_cpp as lc

    lc.llama_backend_init()
    params = lc.llama_model_default_params()
    params.use_extra_bufts = extra  # llama.cpp's weight repack (CPU_REPACK, AMX) into extra buffer types
    model = lc.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        print("llama.cpp could not load the file", file=sys.stderr)
        return 3
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 64, 8, 8
    cp.n_threads = cp.n_threads_batch = threads
    cp.type_k = cp.type_v = kv_type  # the runtime's own cache type and attention: the same kernels
    cp.flash_attn_type = flash
    ctx = lc.llama_init_from_model(model, cp)
    if not ctx:
        print("llama.cpp could not make a context", file=sys.stderr)
        return 3
    batch = lc.llama_batch_init(8, 0, 1)
    for tokens, start in (([1, 2, 3, 4], 0), ([5], 4)):  # a batched forward, then a one-token one
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, start + i, 1, 1
            batch.seq_id[i][0] = 0
        if lc.llama_decode(ctx, batch) != 0:
            print("llama_decode failed", file=sys.stderr)
            return 3
    built_for = lc.llama_print_system_info()
    print(json.dumps({"system_info": built_for.decode("utf-8", "replace") if isinstance(built_for, bytes)
                      else str(built_for)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
