"""``python -m gumiho.serve --engine llama.cpp``: an eagle3 drafter of this project served
by llama.cpp's own OpenAI-compatible server, with llama.cpp's EAGLE-3 drafting.

    python -m gumiho.serve --engine llama.cpp --drafter assets/drafters/smollm2-135m-eagle3 --port 8080
    python -m gumiho.serve --engine llama.cpp --drafter none       # the target alone
    python -m gumiho.serve --engine llama.cpp --drafter ngram      # llama.cpp's n-gram drafting

What it does, each step done once and cached:

1. checks its arguments (the drafter's folder and kind, the target file, the draft
   length) before anything is built;
2. builds llama-server from the pinned llama.cpp source (gumiho.serving.llamacpp_build:
   about 8 minutes on two cores, once per machine, outside the clone);
3. exports the drafter as the GGUF file llama.cpp's eagle3 architecture loads
   (gumiho.formats.eagle3_gguf, with the target's tokenizer and the draft vocabulary
   map), into the cache folder, keyed by the drafter, the target file and the exporting
   code;
4. starts llama-server on the target's GGUF (the embedded default's 4-bit file as
   stored, unless ``--target``) with ``--spec-type draft-eagle3``: a fixed chain of K
   drafted tokens per step (``--spec-draft-n-max K``, no probability cut-off:
   ``--spec-draft-p-min 0``), as this engine's eagle3 chain of K drafts; says where it
   listens once /health answers. Ctrl-C (or SIGTERM) stops it.

Each response's ``timings`` carries ``draft_n`` and ``draft_n_accepted``: the drafted
tokens of that request and those the target kept.

llama.cpp runs the eagle3 kind alone: a gumiho drafter is refused in words
(gumiho.formats.eagle3_gguf.WHY_NOT_GUMIHO says what serving it there would take).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

from ..errors import GumihoError
from ..files import LibraryPaths, cache_root, configure, fingerprint
from ..formats.gguf_target import check_target_file
from ..runtimes.llamacpp_trust import extra_buffers_default
from .cache_keys import code_key
from .lifecycle import command_main, serve_until_stopped, start_process, stop_group

DEFAULT_K = 3
MAX_K = 16  # a chain longer than this drafts tokens no small drafter gets accepted
NGRAM_TYPE = "ngram-simple"  # llama.cpp's prompt-lookup drafting (no model)
STOP_SECONDS = 15
START_TIMEOUT = 300
NO_DRAFTER = ("none", "ngram")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho.serve --engine llama.cpp",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="llama.cpp", choices=["llama.cpp"], help=argparse.SUPPRESS)
    p.add_argument("--drafter", required=True,
                   help="an eagle3 drafter folder, 'none' (the target alone) or 'ngram' (llama.cpp's n-gram drafting)")
    p.add_argument("--target", default=None, metavar="FILE.gguf",
                   help="the target's GGUF file (default: the embedded SmolLM2-135M-Instruct, 4-bit as stored)")
    p.add_argument("--num-speculative-tokens", type=int, default=None,
                   help=f"tokens drafted per step (default {DEFAULT_K}; at most {MAX_K})")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: every core)")
    p.add_argument("--ctx-size", type=int, default=4096, help="context length the server holds")
    p.add_argument("--served-model-name", default=None, help="the model name clients send (default: the file's)")
    p.add_argument("--log", default=None, metavar="FILE", help="write llama-server's output to FILE")
    return p


# ----------------------------------------------------------------------------- checks


def check_arguments(args) -> str:
    """What can be refused before llama-server is built (minutes) or a model loads:
    the draft length, the target file, and a drafter that is missing or not of the
    eagle3 kind. Returns the drafter's kind ('none', 'ngram' or 'eagle3')."""
    from ..formats.eagle3_gguf import WHY_NOT_GUMIHO
    from ..loading import check_drafter_source

    k = args.num_speculative_tokens
    if k is not None and not 1 <= k <= MAX_K:
        raise GumihoError(f"--num-speculative-tokens must be between 1 and {MAX_K}, got {k}.")
    if args.threads is not None and args.threads < 1:
        raise GumihoError(f"--threads must be at least 1, got {args.threads}.")
    if not 256 <= args.ctx_size <= 1 << 20:
        raise GumihoError(f"--ctx-size must be between 256 and {1 << 20}, got {args.ctx_size}.")
    if not 0 < args.port < 65536:
        raise GumihoError(f"--port must be between 1 and 65535, got {args.port}.")
    check_target_file(args.target)
    name = args.drafter.strip().lower()
    if name in NO_DRAFTER:
        return name
    kind = check_drafter_source(args.drafter)
    if kind == "gumiho":
        raise GumihoError(f"The drafter {args.drafter!r} is of the gumiho kind. {WHY_NOT_GUMIHO}")
    if kind is None and _foreign_layout(args.drafter):
        raise GumihoError(f"{args.drafter!r} is an EAGLE-3 checkpoint in another project's layout; this command "
                          f"serves eagle3 drafters saved by this project (python -m gumiho.train --kind eagle3). "
                          f"llama.cpp's own convert_hf_to_gguf.py (with --target-model-dir) converts that layout.")
    if kind is None:
        raise GumihoError(f"{args.drafter!r} is not a drafter folder of this project: give an eagle3 drafter folder "
                          f"(config.json + model.safetensors, as python -m gumiho.train --kind eagle3 saves it), "
                          f"'none' or 'ngram'.")
    if kind != "eagle3":
        raise GumihoError(f"The drafter {args.drafter!r} is of the {kind!r} kind; llama.cpp's EAGLE-3 drafting runs "
                          f"the eagle3 kind alone (train one with python -m gumiho.train --kind eagle3).")
    return "eagle3"


def _foreign_layout(drafter: str) -> bool:
    from ..formats.eagle3 import layout_of

    try:
        with open(os.path.join(os.path.expanduser(drafter), "config.json"), encoding="utf-8") as f:
            return layout_of(json.load(f)) is not None
    except (OSError, ValueError):
        return False


# ----------------------------------------------------------------------------- export


def export_dir() -> Path:
    return cache_root() / "serve"


def prepare_drafter(drafter: str, target_file: str, log: Callable[[str], None]) -> str:
    """The drafter's GGUF file for ``target_file``, exported once (cached). The
    drafter's own weights are all the file needs: its sizes are checked against the
    target's file, whose tokenizer it copies, so no target model is loaded."""
    from ..drafter import Drafter
    from ..formats.eagle3_gguf import write_eagle3_gguf

    key = "-".join([fingerprint(drafter), fingerprint(target_file)[:8], code_key("formats/eagle3_gguf.py")])
    path = export_dir() / f"llamacpp-eagle3-{key}.gguf"
    if path.is_file():
        return str(path)
    log(f"exporting the drafter {drafter} as GGUF into {path} (once) ...")
    write_eagle3_gguf(Drafter.load(os.path.expanduser(drafter)), str(path), target_file)
    return str(path)


# ----------------------------------------------------------------------------- the server


def server_command(binary: Path, target_file: str, drafter_file: Optional[str], kind: str, k: int, port: int,
                   host: str = "127.0.0.1", threads: Optional[int] = None, ctx_size: int = 4096,
                   name: Optional[str] = None, repack: Optional[bool] = None) -> list[str]:
    """llama-server's command line. Drafting of a fixed chain of ``k``: no minimum
    length (``--spec-draft-n-min 0``) and no probability cut-off (``--spec-draft-p-min 0``).
    ``repack``: llama.cpp's weight repack at load, by the bindings' rule when None
    (gumiho.runtimes.llamacpp_trust.extra_buffers_default: off where AMX is advertised)."""
    command = [str(binary), "-m", target_file, "--host", host, "--port", str(port),
               "-t", str(threads or os.cpu_count() or 1), "-c", str(ctx_size), "--no-webui", "--parallel", "1"]
    if not (extra_buffers_default() if repack is None else repack):
        command.append("--no-repack")
    if name:
        command += ["--alias", name]
    if kind == "eagle3":
        command += ["-md", drafter_file, "--spec-type", "draft-eagle3"]
    elif kind == "ngram":
        command += ["--spec-type", NGRAM_TYPE]
    if kind != "none":
        command += ["--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
    return command


def stop(process: subprocess.Popen) -> None:
    stop_group(process, signal.SIGTERM, STOP_SECONDS)


def failure_cause(log_text: str) -> str:
    """The line of llama-server's output that says why it stopped: its last error line."""
    lines = log_text.splitlines()
    errors = [line for line in lines if " E " in line or "error" in line.lower()]
    return (errors or lines or [""])[-1].strip()[:300]


def serve(args, log: Callable[[str], None]) -> int:
    from .llamacpp_build import build_dir, ensure_server
    from .llamacpp_trial import check_server

    kind = check_arguments(args)
    target_file = check_target_file(args.target)
    k = DEFAULT_K if args.num_speculative_tokens is None else args.num_speculative_tokens
    binary = ensure_server(log=log)
    threads = args.threads or os.cpu_count() or 1
    repack = check_server(binary, target_file, threads, build_dir(), log)  # tried in a child first
    drafter_file = prepare_drafter(args.drafter, target_file, log) if kind == "eagle3" else None
    what = {"none": "no drafting", "ngram": f"n-gram drafting, {k} tokens per draft",
            "eagle3": f"EAGLE-3 drafting with {args.drafter}, {k} tokens per draft"}[kind]
    log(f"starting llama-server on {os.path.basename(target_file)} ({what}) ...")
    command = server_command(binary, target_file, drafter_file, kind, k, args.port, args.host, threads,
                             args.ctx_size, args.served_model_name, repack)
    process = start_process(command, args.log)
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '') else args.host}:{args.port}"
    return serve_until_stopped(
        process, url, START_TIMEOUT, "llama-server",
        f"serving at {url}/v1 (OpenAI-compatible: /v1/chat/completions, /v1/completions; {url}/health). "
        f"Each response's timings carry draft_n and draft_n_accepted. Ctrl-C stops it.",
        lambda: stop(process), log, args.log, failure_cause)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    from .llamacpp_build import ServerBuildError

    args = build_parser().parse_args(argv)
    return command_main(lambda log: serve(args, log), [(ServerBuildError, "llama-server cannot be built here: ")])


if __name__ == "__main__":
    sys.exit(main())
