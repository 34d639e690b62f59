"""A stand-in for llama-cpp-python whose native code dies: it answers the calls the
llama.cpp runtime's trial makes, and its decode kills the process by the signal named
in GUMIHO_TEST_NATIVE_DEATH (SIGILL by default: what llama.cpp's AMX repack does on a
CPU that advertises AMX but cannot run it; SIGSEGV: a crash of any other kind; SIGABRT:
a failed GGML_ASSERT). With GUMIHO_TEST_NATIVE_DEATH_AT=tree it dies only on a batch
that names two sequences once more than 512 cells are cached (a kernel that fails on
one shape of work only), and runs every other decode.
Put this folder first on PYTHONPATH to use it; lib/libllama.so is a
placeholder whose size and time stand for the build (change it: another build)."""
import os
import signal
import sys
from types import SimpleNamespace

__version__ = "0.0-stand-in"


def _die():
    if os.environ.get("GUMIHO_TEST_NATIVE_DEATH") == "SIGABRT":  # as ggml_abort words a failed assertion
        sys.stderr.write("ggml/src/ggml-cpu/ops.cpp:1: GGML_ASSERT(stand-in) failed\n")
        sys.stderr.flush()
    os.kill(os.getpid(), getattr(signal, os.environ.get("GUMIHO_TEST_NATIVE_DEATH", "SIGILL")))


def llama_backend_init():
    pass


def llama_model_default_params():
    return SimpleNamespace(use_extra_bufts=True)


def llama_model_get_vocab(model):
    return object()


def llama_vocab_n_tokens(vocab):
    return 49152


LLAMA_POOLING_TYPE_NONE = 0


def llama_model_load_from_file(path, params):
    return object() if os.path.exists(path) else None


def llama_context_default_params():
    return SimpleNamespace()


def llama_init_from_model(model, params):
    return object()


def llama_batch_init(n, embd, n_seq_max):
    return SimpleNamespace(n_tokens=0, token=[0] * n, pos=[0] * n, n_seq_id=[0] * n, logits=[0] * n,
                           seq_id=[[0] * n_seq_max for _ in range(n)])


_CACHED = [0]  # cells this process's decodes have filled (one context per trial)


def llama_get_memory(ctx):
    return object()


def llama_memory_seq_cp(mem, src, dst, p0, p1):
    pass


def llama_memory_seq_rm(mem, seq, p0, p1):
    return True


def llama_decode(ctx, batch):
    if os.environ.get("GUMIHO_TEST_NATIVE_DEATH_AT") != "tree":
        _die()
    two = any(batch.n_seq_id[i] > 1 for i in range(batch.n_tokens))
    if two and _CACHED[0] > 512:
        _die()
    _CACHED[0] += batch.n_tokens
    return 0


def llama_print_system_info():
    return b"CPU : stand-in"
