"""Console entry points of the library (pyproject.toml): ``gumiho-bench`` and
``gumiho-train``, the same commands as ``python -m gumiho.bench`` and ``python -m
gumiho.train``. The app's own, ``gumiho-app``, lives in the app (app/__main__.py): the
library never imports the app."""
from __future__ import annotations

import sys


def bench() -> int:
    from .bench.cli import main

    return main(sys.argv[1:])


def train() -> int:
    from .train.__main__ import main

    return main(sys.argv[1:])
