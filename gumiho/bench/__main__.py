"""``python -m gumiho.bench``: see gumiho.bench.cli."""
import sys

from .cli import main

sys.exit(main())
