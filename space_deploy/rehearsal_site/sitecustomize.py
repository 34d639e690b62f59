"""The rehearsal's network cut (space_deploy/rehearsal.py puts this folder on the started
server's PYTHONPATH, so Python imports this module at start-up, before the app).

Every connection to an address that is not this machine's loopback, and every name
lookup of another host, is refused with OSError and written down in the file
REHEARSAL_BLOCKED_LOG names, so an attempt shows in the rehearsal's report instead
of passing unnoticed. Not part of the upload: this folder has no __init__.py, and
space_deploy.upload uploads packages only."""
import os
import socket

_LOG = os.environ.get("REHEARSAL_BLOCKED_LOG", os.devnull)


def _is_local(host) -> bool:
    host = host.decode() if isinstance(host, bytes) else str(host)
    return host in ("", "None", "localhost", "::1", "0.0.0.0") or host.startswith("127.")


def _refuse(what):
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(str(what)[:200] + "\n")
    raise OSError(101, f"network cut for the rehearsal: {what}")


_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def _checked(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0] if isinstance(address, tuple) else address
        if not _is_local(host):
            _refuse(address)


def connect(self, address):
    _checked(self, address)
    return _connect(self, address)


def connect_ex(self, address):
    _checked(self, address)
    return _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    if not _is_local(host):
        _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo


def _no_cuda_init():
    return None


def _not_in_bad_fork():
    return False


if os.environ.get("REHEARSAL_CPU_TORCH_AS_ZEROGPU"):
    # A CPU build of torch lacks three CUDA hooks that `spaces` reads at import in its
    # ZeroGPU mode; a GPU build has them. Nothing else of torch is touched. (Functions
    # of this module, not lambdas: `spaces` pickles what it hands its workers.)
    import torch
    torch.version.cuda = torch.version.cuda or "12.8"
    torch._C._cuda_init = getattr(torch._C, "_cuda_init", _no_cuda_init)
    if not torch.cuda.is_available():
        torch.cuda._is_in_bad_fork = _not_in_bad_fork
