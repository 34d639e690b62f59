"""Safetensors files written as readable as any other file of their folder.

``safetensors.torch.save_file`` creates its file with mode 0600 (owner only), while
a config.json written beside it gets the process's usual mode (0644 under the common
umask): an export or a saved drafter would then be half unreadable to the other
users of a shared machine or a container that serves it. :func:`save_tensors` gives
the file the mode a plainly created file gets here; :func:`weights_to_save` gives the
tensors a model's checkpoint holds (its tied copies left out, as transformers expects)."""
from __future__ import annotations

import os
import stat
import tempfile

import torch

from ..errors import GumihoError


def _plain_file_mode(folder: str) -> int:
    """The mode a file newly created in ``folder`` gets (0666 less the umask), read off
    a file created there: the umask itself cannot be read without changing it."""
    fd, probe = tempfile.mkstemp(dir=folder)  # a free name (mkstemp's own file is 0600: not the probe)
    os.close(fd)
    try:
        os.remove(probe)
        with open(probe, "w"):  # created as open() creates every file: 0666 less the umask
            pass
        return stat.S_IMODE(os.stat(probe).st_mode)
    finally:
        if os.path.exists(probe):
            os.remove(probe)


def save_tensors(tensors: dict, path: str, metadata: dict | None = None) -> None:
    """``save_file(tensors, path, metadata)`` with the folder's usual file mode."""
    from safetensors.torch import save_file

    save_file(tensors, path, metadata=metadata)
    os.chmod(path, _plain_file_mode(os.path.dirname(os.path.abspath(path))))


def weights_to_save(model, dtype: torch.dtype) -> dict:
    """The model's state dict in ``dtype``, without the tensors tied to others (a tied
    LM head is the embedding: transformers re-ties it on load, and safetensors refuses
    two names for one storage)."""
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})
    if getattr(model.config, "tie_word_embeddings", False) and not tied:
        tied = {"lm_head.weight"}  # a transformers without the tied-keys table
    weights, seen = {}, {}
    for name, tensor in model.state_dict().items():
        if name in tied:
            continue
        if tensor.data_ptr() in seen:
            raise GumihoError(f"The target's tensors {seen[tensor.data_ptr()]!r} and {name!r} share memory but are "
                              f"not tied in its config; cannot write them as one checkpoint.")
        seen[tensor.data_ptr()] = name
        weights[name] = tensor.detach().to("cpu", dtype if tensor.is_floating_point() else tensor.dtype).contiguous()
    return weights
