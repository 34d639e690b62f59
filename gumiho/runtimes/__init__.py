"""Target runtimes: how a target's forwards run (see base.Runtime).

    pytorch.TorchRuntime     the transformers model itself: any model, any device
    llamacpp.LlamaCppRuntime the embedded GGUF's packed 4-bit blocks in llama.cpp, on a CPU
"""
from .base import Forward, Runtime
from .pytorch import TorchRuntime

__all__ = ["Forward", "Runtime", "TorchRuntime"]
