"""The library's paths outside a clone, set once by the entry point.

The commands (their ``main``) and the app's entry points read the variables below from
their process's environment, once, by :meth:`LibraryPaths.from_environment`, and hand the
result to :func:`configure`; the library reads no environment itself. A script or a test
that runs the library without a command configures it the same way, or builds the paths
it wants (``configure(LibraryPaths(cache_root=...))``), or hands them to the functions
that take them. Nothing configured: the plain defaults (``~/.cache/gumiho``, this
project's own llama-server build, the vLLM environment in the cache folder).

    GUMIHO_CACHE         the cache folder (else ``$XDG_CACHE_HOME/gumiho``, else ``~/.cache/gumiho``)
    GUMIHO_LLAMA_SERVER  a llama-server binary to use instead of this project's build
    GUMIHO_VLLM_ENV      the vLLM environment's folder (else ``vllm-<version>`` in the cache folder)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional


def default_cache_root() -> Path:
    """The cache folder with no variable set: ``~/.cache/gumiho``."""
    return Path(os.path.expanduser("~")) / ".cache" / "gumiho"


def _path(environ: Mapping[str, str], name: str) -> Optional[Path]:
    """A folder or file a variable names (``~`` expanded); unset or blank: None."""
    value = (environ.get(name) or "").strip()
    return Path(value).expanduser() if value else None


@dataclass(frozen=True)
class LibraryPaths:
    """Where the library keeps and finds what lives outside a clone."""

    cache_root: Path = field(default_factory=default_cache_root)  # GUMIHO_CACHE (or XDG_CACHE_HOME)
    llama_server: Optional[Path] = None  # GUMIHO_LLAMA_SERVER; None: this project's build in the cache
    vllm_env: Optional[Path] = None  # GUMIHO_VLLM_ENV; None: the environment in the cache folder

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "LibraryPaths":
        """The paths ``environ`` (a process's environment) asks for; for the entry points."""
        xdg = _path(environ, "XDG_CACHE_HOME")
        cache = _path(environ, "GUMIHO_CACHE") or (xdg / "gumiho" if xdg else default_cache_root())
        return cls(cache_root=cache, llama_server=_path(environ, "GUMIHO_LLAMA_SERVER"),
                   vllm_env=_path(environ, "GUMIHO_VLLM_ENV"))


_configured: Optional[LibraryPaths] = None


def configure(paths: Optional[LibraryPaths]) -> Optional[LibraryPaths]:
    """Set the paths the library uses from now on (None: back to the defaults); returns
    what was set before, so that a caller can put it back."""
    global _configured
    before, _configured = _configured, paths
    return before


def configured() -> LibraryPaths:
    """The paths set by :func:`configure`, else the defaults."""
    return _configured if _configured is not None else LibraryPaths()


__all__ = ["LibraryPaths", "configure", "configured", "default_cache_root"]
