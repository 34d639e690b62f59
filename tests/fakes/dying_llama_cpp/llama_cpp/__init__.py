"""A stand-in for llama-cpp-python whose native code dies: it answers the calls the
llama.cpp runtime's trial makes, and its decode kills the process by the signal named
in GUMIHO_TEST_NATIVE_DEATH (SIGILL by default: what llama.cpp's AMX repack does on a
CPU that advertises AMX but cannot run it; SIGSEGV: a crash of any other kind).
Put this folder first on PYTHONPATH to use it; lib/libllama.so is a
placeholder whose size and time stand for the build (change it: another build)."""
import os
import signal
from types import SimpleNamespace

__version__ = "0.0-stand-in"


def _die():
    os.kill(os.getpid(), getattr(signal, os.environ.get("GUMIHO_TEST_NATIVE_DEATH", "SIGILL")))


def llama_backend_init():
    pass


def llama_model_default_params():
    return SimpleNamespace(use_extra_bufts=True)


def llama_model_load_from_file(path, params):
    return object() if os.path.exists(path) else None


def llama_context_default_params():
    return SimpleNamespace()


def llama_init_from_model(model, params):
    return object()


def llama_batch_init(n, embd, n_seq_max):
    return SimpleNamespace(n_tokens=0, token=[0] * n, pos=[0] * n, n_seq_id=[0] * n, logits=[0] * n,
                           seq_id=[[0] * n_seq_max for _ in range(n)])


def llama_decode(ctx, batch):
    _die()
    return 0


def llama_print_system_info():
    return b"CPU : stand-in"
