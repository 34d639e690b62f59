"""``python -m gumiho.serve``: a drafter of this project served by vLLM's OpenAI-compatible server.

    python -m gumiho.serve --drafter assets/drafters/smollm2-135m-gumiho --num-speculative-tokens 4 --port 8000
    python -m gumiho.serve --drafter none --port 8000              # the target alone, no drafter

What it does, each step done once and cached:

1. builds the vLLM environment (gumiho.serving.vllm_env: vLLM's CPU build in a virtual
   environment of its own, with this repository's vLLM plugin, plugins/vllm-gumiho);
2. writes the target as an ordinary transformers folder vLLM loads (the embedded default
   target through ``gumiho.export target``; a folder you give is used as it is, a hub id
   is handed to vLLM);
3. exports the drafter by its kind: ``gumiho`` (this project's, or an official
   amd/Gumiho-* checkpoint) through ``gumiho.export gumiho``, served by the plugin under
   vLLM's ``eagle`` method; ``eagle3`` through ``gumiho.export eagle3``, served by vLLM's
   own ``eagle3`` method; other kinds are refused in words;
4. starts ``vllm serve`` and says where it listens once it answers. Ctrl-C (or SIGTERM)
   stops vLLM and its workers.

Exports live in the cache folder beside the environment (``~/.cache/gumiho/serve``),
keyed by the source files, the target and the exporting code, so a second start goes
straight to step 4.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from ..errors import GumihoError
from ..files import LibraryPaths, configure, fingerprint
from .cache_keys import code_key
from .lifecycle import command_main, serve_until_stopped, start_process, stop_group

DEFAULT_K = {"gumiho": 4, "eagle3": 3}
READY = "gumiho-export.json"  # written last into an export folder: a folder without it is redone
STOP_SECONDS = 30  # how long vLLM gets to stop after Ctrl-C before it is killed
START_TIMEOUT = 900


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho.serve", description=__doc__.split("\n\n")[0])
    # Both engines are listed: gumiho.serve hands --engine llama.cpp to its own command before this parser runs.
    p.add_argument("--engine", default="vllm", choices=["vllm", "llama.cpp"],
                   help="vllm (the default; the options below); llama.cpp: llama.cpp's own server, whose options "
                        "python -m gumiho.serve --engine llama.cpp --help lists")
    p.add_argument("--drafter", required=True,
                   help="a drafter folder (gumiho or eagle3 kind), an official amd/Gumiho-* checkpoint, or 'none'")
    p.add_argument("--target", default=None,
                   help="the target: a transformers folder or hub id (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--num-speculative-tokens", type=int, default=None,
                   help="tokens drafted per step (default: 4 for a gumiho drafter, 3 for eagle3)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--served-model-name", default=None, help="the model name clients send (default: the target's)")
    p.add_argument("--dtype", default="float32", help="vLLM's dtype (float32 keeps the engine's greedy tokens)")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--kv-cache-gib", type=int, default=2, help="vLLM's KV cache on CPU (VLLM_CPU_KVCACHE_SPACE)")
    p.add_argument("--compile", action="store_true",
                   help="let vLLM compile the model (default: eager; with vllm-cpu 0.32 every start recompiles)")
    p.add_argument("--log", default=None, metavar="FILE",
                   help="write vLLM's own output to FILE instead of the terminal")
    return p


def cache_dir() -> Path:
    from .vllm_env import env_dir

    return env_dir().parent / "serve"


def _ready(folder: Path) -> Optional[dict]:
    try:
        return json.loads((folder / READY).read_text())
    except (OSError, ValueError):
        return None


@lru_cache(maxsize=1)
def _loaded_target(target: Optional[str]):
    """The target as the engine loads it (float32, torch runtime), once per process."""
    from ..loading import load_target

    return load_target(target, device="cpu", dtype="float32", runtime="torch")


def prepare_target(target: Optional[str], log: Callable[[str], None]) -> tuple[str, str]:
    """(what vLLM loads, the name clients send): a transformers folder or a hub id."""
    if target and os.path.isdir(os.path.expanduser(target)):
        folder = os.path.expanduser(target)
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise GumihoError(f"Target folder {target!r} has no config.json: give a transformers folder (for the "
                              f"embedded default, leave --target out).")
        return folder, os.path.basename(os.path.normpath(folder))
    if target:
        return target, target  # a hub id: vLLM fetches it
    from ..formats.transformers_folder import export_target
    from ..loading import DEFAULT_TARGET, DEFAULT_TARGET_LABEL

    folder = cache_dir() / f"target-default-{code_key('formats/transformers_folder.py')}"
    if _ready(folder) is None:
        log(f"writing the default target as a transformers folder in {folder} (once) ...")
        export_target(_loaded_target(None), folder, force=True)
        (folder / READY).write_text(json.dumps({"target": DEFAULT_TARGET}))
    return str(folder), DEFAULT_TARGET_LABEL


def prepare_drafter(drafter: str, target: Optional[str], log: Callable[[str], None]) -> tuple[str, str]:
    """(export folder, kind) for a drafter source; exported once per source and target."""
    from ..formats.eagle3 import write_eagle3
    from ..formats.vllm_gumiho import check_servable, write_gumiho
    from ..loading import load_drafter

    key = "-".join([fingerprint(drafter), hashlib.sha256(str(target or "default").encode()).hexdigest()[:8],
                    code_key("formats/vllm_gumiho.py", "formats/eagle3.py")])
    folder = cache_dir() / f"drafter-{key}"
    done = _ready(folder)
    if done is not None:
        return str(folder), done["kind"]
    log(f"exporting the drafter {drafter} for vLLM into {folder} (once) ...")
    loaded_target = _loaded_target(target)
    model = load_drafter(drafter, loaded_target, dtype="fp32")
    kind = model.cfg.kind
    if kind == "gumiho":
        check_servable(model.cfg)
        write_gumiho(model, str(folder), loaded_target.config, source=drafter)
    elif kind == "eagle3":
        write_eagle3(model, str(folder), loaded_target.config)
    else:
        raise GumihoError(f"The drafter {drafter!r} is of the {kind!r} kind, which vLLM cannot serve: serve a drafter "
                          f"of the gumiho kind (through the vllm-gumiho plugin) or the eagle3 kind (vLLM's own "
                          f"eagle3 method).")
    (folder / READY).write_text(json.dumps({"kind": kind, "source": drafter}))
    return str(folder), kind


def speculative_config(folder: str, kind: str, k: Optional[int]) -> dict:
    k = DEFAULT_K[kind] if k is None else k
    if k < 1:
        raise GumihoError(f"--num-speculative-tokens must be at least 1, got {k}.")
    if kind == "gumiho":
        with open(os.path.join(folder, "config.json")) as f:
            settings = json.load(f)["gumiho"]
        most = settings["serial_positions"] + settings["mlp_heads"]
        if k > most:
            raise GumihoError(f"--num-speculative-tokens {k} is more than this drafter drafts "
                              f"({settings['serial_positions']} serial positions and {settings['mlp_heads']} MLP "
                              f"heads, so at most {most}).")
    return {"method": "eagle" if kind == "gumiho" else "eagle3", "model": folder, "num_speculative_tokens": k}


def vllm_command(python: Path, model: str, name: str, args, spec: Optional[dict]) -> list[str]:
    """The OpenAI-compatible server ``vllm serve`` starts, run through its module: the
    ``vllm`` command of the vllm-cpu 0.32.0 build exits at start, looking up the version
    of a distribution named "vllm" (it is installed as "vllm-cpu")."""
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--host", args.host, "--port", str(args.port),
               "--served-model-name", name, "--dtype", args.dtype, "--max-model-len", str(args.max_model_len),
               "--seed", "0"]
    if not args.compile:
        command.append("--enforce-eager")
    if spec is not None:
        command += ["--speculative-config", json.dumps(spec)]
    return command


def start_vllm(python: Path, model: str, name: str, spec: Optional[dict], port: int, host: str = "127.0.0.1",
               dtype: str = "float32", max_model_len: int = 2048, kv_cache_gib: Optional[int] = None,
               compiled: bool = False, log_path=None, extra_env: Optional[dict] = None) -> subprocess.Popen:
    """vLLM's OpenAI-compatible server in a session of its own (so that Ctrl-C reaches the
    caller, which stops vLLM's whole process group with :func:`stop`), its output to
    ``log_path`` (None: this terminal)."""
    from .vllm_env import KV_CACHE_GIB, engine_environment

    args = argparse.Namespace(host=host, port=port, dtype=dtype, max_model_len=max_model_len, compile=compiled)
    env = engine_environment(max(kv_cache_gib or KV_CACHE_GIB, KV_CACHE_GIB))
    env.update(extra_env or {})
    return start_process(vllm_command(python, model, name, args, spec), log_path, env)


def stop(process: subprocess.Popen, log: Callable[[str], None]) -> None:
    """SIGINT to vLLM's API server alone, which then stops its engine (a SIGINT to the
    whole group killed the engine under the server, which then logged a dead engine's
    traceback); SIGKILL to the group after STOP_SECONDS. Its shutdown output is not
    relayed (lifecycle.Relay)."""
    if process.poll() is None:
        log("stopping vLLM ...")
    stop_group(process, signal.SIGINT, STOP_SECONDS, leader_only=True)


def check_arguments(args) -> None:
    """What can be refused before vLLM's environment is built or a model loads (both
    take minutes): a drafter path that does not exist or is of a kind vLLM cannot serve,
    and a draft length below 1 or above what a gumiho drafter of this project drafts."""
    from ..loading import check_drafter_source

    k = args.num_speculative_tokens
    if k is not None and k < 1:
        raise GumihoError(f"--num-speculative-tokens must be at least 1, got {k}.")
    if args.drafter.strip().lower() == "none":
        return
    kind = check_drafter_source(args.drafter)
    if kind is not None and kind not in DEFAULT_K:
        raise GumihoError(f"The drafter {args.drafter!r} is of the {kind!r} kind, which vLLM cannot serve: serve a "
                          f"drafter of the gumiho kind (through the vllm-gumiho plugin) or the eagle3 kind (vLLM's "
                          f"own eagle3 method).")
    if kind == "gumiho" and k is not None:
        try:
            with open(os.path.join(os.path.expanduser(args.drafter), "config.json"), encoding="utf-8") as f:
                config = json.load(f)
            serial, heads = int(config["serial_positions"]), int(config["mlp_heads"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # the export reads it and says what is wrong
        if k > serial + heads:
            raise GumihoError(f"--num-speculative-tokens {k} is more than this drafter drafts ({serial} serial "
                              f"positions and {heads} MLP heads, so at most {serial + heads}).")


def serve(args, log: Callable[[str], None]) -> int:
    from .vllm_env import ensure_env, failure_cause

    check_arguments(args)
    python = ensure_env(log=log)
    model, name = prepare_target(args.target, log)
    spec = None
    if args.drafter.strip().lower() != "none":
        folder, kind = prepare_drafter(args.drafter, args.target, log)
        spec = speculative_config(folder, kind, args.num_speculative_tokens)
    what = ("no drafter" if spec is None else
            f"{spec['method']} drafter, {spec['num_speculative_tokens']} tokens per draft")
    log(f"starting vLLM ({what}) ...")
    process = start_vllm(python, model, args.served_model_name or name, spec, args.port, args.host, args.dtype,
                         args.max_model_len, args.kv_cache_gib, args.compile, args.log)
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '') else args.host}:{args.port}"
    return serve_until_stopped(
        process, url, START_TIMEOUT, "vLLM",
        f"serving {args.served_model_name or name} at {url}/v1 (OpenAI-compatible: /v1/chat/completions, "
        f"/v1/completions; counters at {url}/metrics). Ctrl-C stops it.",
        lambda: stop(process, log), log, args.log, failure_cause)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    from .vllm_env import RegistryUnreachable, VllmEnvError

    args = build_parser().parse_args(argv)
    return command_main(lambda log: serve(args, log),
                        [(RegistryUnreachable, "vLLM cannot be built on this machine: "),
                         (VllmEnvError, "vLLM cannot be built or run here: ")])


if __name__ == "__main__":
    sys.exit(main())
