"""``python -m gumiho.export SUBCOMMAND ...``: see gumiho.export.

Each subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> exit
code`` (its first docstring line is the help); adding one is one entry in SUBCOMMANDS."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import GumihoError
from ..files import LibraryPaths, configure
from ..formats import transformers_folder as target
from . import eagle3, gguf, gumiho

SUBCOMMANDS = {
    "target": (target.add_arguments, target.run),
    "eagle3": (eagle3.add_arguments, eagle3.run),
    "gumiho": (gumiho.add_arguments, gumiho.run),
    "gguf": (gguf.add_arguments, gguf.run),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gumiho.export",
                                     description="Write models in the layouts other engines load.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (add_arguments, run) in SUBCOMMANDS.items():
        summary = (run.__doc__ or "").strip().split("\n")[0]
        sub = commands.add_parser(name, help=summary, description=summary)
        add_arguments(sub)
        sub.set_defaults(run=run)
    return parser


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except GumihoError as e:  # bad input: the message alone, no traceback
        print(f"gumiho.export {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
