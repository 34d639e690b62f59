"""``python -m gumiho.serve``: a drafter of this project served by a serving engine.

    python -m gumiho.serve [--engine vllm] --drafter DIR|none ...        vLLM (the default engine)
    python -m gumiho.serve --engine llama.cpp --drafter DIR|none|ngram   llama.cpp's own server

gumiho.serving.vllm_command and gumiho.serving.llamacpp_command have each engine's
command and say what it does; the serving package holds each engine's build,
driver and command."""
import os
import sys

from .files import LibraryPaths, configure

ENGINES = ("vllm", "llama.cpp")


def engine_of(argv: list[str]) -> str:
    """The --engine argument's value (vllm when absent); each engine's own parser
    reads the rest."""
    for i, arg in enumerate(argv):
        if arg == "--engine" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--engine="):
            return arg.split("=", 1)[1]
    return "vllm"


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    argv = list(sys.argv[1:] if argv is None else argv)
    engine = engine_of(argv)
    if engine == "llama.cpp":
        from .serving.llamacpp_command import main as engine_main
    elif engine == "vllm":
        from .serving.vllm_command import main as engine_main
    else:
        print(f"gumiho.serve: --engine must be one of {', '.join(ENGINES)}, got {engine!r}.", file=sys.stderr)
        return 2
    return engine_main(argv)


if __name__ == "__main__":
    sys.exit(main())
