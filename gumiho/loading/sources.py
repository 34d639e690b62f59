"""Where a model comes from: a local folder (a path, or a name that exists here) or
a hub id, and whether a hub id can load on this machine (downloaded already, or the
Hub in reach)."""
from __future__ import annotations

import os
import threading
from typing import Optional

from ..errors import GumihoError


def no_model_folder(name: str) -> GumihoError:
    """The one answer for a local path that holds no model: the same whether it is
    missing, a file, or a folder without a config, so the message does not tell a
    remote user which paths exist on this machine."""
    return GumihoError(f"Could not load model {name!r}: the path does not exist or is not a model folder (a "
                       f"folder with config.json and weights). Give such a folder, or a hub id like 'org/name'; "
                       f"leave it empty for the default.")


def looks_like_path(name: str) -> bool:
    """A hub id is "name" or "org/name"; only something shaped like a file path
    (absolute, ./ ../ ~, or more than one "/") is read as one."""
    return (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
            or (os.path.sep != "/" and os.path.sep in name))


def is_model_folder(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))


def is_local_source(name: str) -> bool:
    """Whether ``name`` is read as a local path: shaped like one, or existing here."""
    return looks_like_path(name) or os.path.exists(os.path.expanduser(name))


def local_model_folder(name: str) -> Optional[str]:
    """The folder ``name`` names when it is read as a local path (None: a hub id);
    refused with the one answer of :func:`no_model_folder` when it holds no model."""
    if not is_local_source(name):
        return None
    path = os.path.expanduser(name)
    if not is_model_folder(path):  # missing, a file, a folder of something else: one answer for all
        raise no_model_folder(name)
    return path


def _reachable(host: str = "huggingface.co", port: int = 443, timeout: float = 3.0) -> bool:
    """Can this machine open a connection to the Hub? Checked in a thread with a
    hard deadline, because a missing DNS server can stall far longer than any
    socket timeout."""
    import socket

    ok = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 1.0)
    return bool(ok)


def hub_cached(name: str, files: tuple) -> bool:
    """Is any of ``files`` of hub repo ``name`` downloaded already?"""
    try:
        from huggingface_hub import try_to_load_from_cache

        return any(isinstance(try_to_load_from_cache(name, f), str) for f in files)
    except Exception:  # an id the hub library refuses (bad characters, ...)
        raise GumihoError(f"{name!r} is not a valid hub id (like 'org/name') or an existing folder.") from None


def hub_unavailable_reason() -> str:
    """Why a hub id that is not downloaded cannot load here ("" when the Hub is reachable)."""
    from huggingface_hub import constants

    if getattr(constants, "HF_HUB_OFFLINE", False):
        return "this app runs offline (HF_HUB_OFFLINE)"
    if not _reachable():
        return "the Hugging Face Hub cannot be reached from here (offline)"
    return ""
