"""Safetensors files written as readable as any other file of their folder.

``safetensors.torch.save_file`` creates its file with mode 0600 (owner only), while
a config.json written beside it gets the process's usual mode (0644 under the common
umask): an export or a saved drafter would then be half unreadable to the other
users of a shared machine or a container that serves it. :func:`save_tensors` gives
the file the mode a plainly created file gets here."""
from __future__ import annotations

import os
import stat
import tempfile


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
