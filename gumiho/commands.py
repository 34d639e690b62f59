"""Console entry points of the installed package (pyproject.toml): ``gumiho-app``,
``gumiho-bench`` and ``gumiho-train``, the same commands as ``python app.py``,
``python -m gumiho.bench`` and ``python -m gumiho.train``."""
from __future__ import annotations

import importlib
import sys


def _app_module():
    """The app: ``gumiho.app`` when installed, the clone's ``app`` package otherwise."""
    try:
        return importlib.import_module("gumiho.app")
    except ImportError:
        return importlib.import_module("app")


def app() -> None:
    _app_module().serve()


def bench() -> int:
    from .bench.cli import main

    return main(sys.argv[1:])


def train() -> int:
    from .train.__main__ import main

    return main(sys.argv[1:])
