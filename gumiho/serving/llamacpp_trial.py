"""llama-server tried before it is trusted: the built binary started on the target's
file with the weight-repack setting this CPU gets (gumiho.runtimes.llamacpp_trust's
rule, the same as the bindings'), asked for one token, stopped. A server that dies by a
signal there (SIGILL where its native build meets a CPU that cannot run it) is named
in words before the real one is started; the verdict is kept per machine, build, file
and setting (gumiho.runtimes.native_probe), so later starts cost nothing.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Optional

from ..errors import GumihoError
from ..files import fingerprint
from ..runtimes.llamacpp_trust import extra_buffers_default
from ..runtimes.native_probe import Outcome, Verdict, first_usable, signal_words
from .lifecycle import free_port, start_process, stop_group, wait_until_serving

TRIAL_SECONDS = 120


def trial_command(binary: Path, target_file: str, port: int, threads: int, repack: bool) -> list[str]:
    """The smallest server that runs the target's kernels: a short context, one slot."""
    command = [str(binary), "-m", target_file, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
               "-c", "256", "--parallel", "1", "--no-webui"]
    return command + ([] if repack else ["--no-repack"])


def _ask_one_token(url: str) -> Optional[str]:
    """None when the server answered one token, else what went wrong."""
    body = json.dumps({"prompt": "Hello", "n_predict": 1, "temperature": 0}).encode()
    request = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            json.load(r)
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"the one-token request failed: {e}"


def _trial(binary: Path, target_file: str, threads: int, repack: bool) -> Callable[[], Outcome]:
    def run() -> Outcome:
        port = free_port()
        process = start_process(trial_command(binary, target_file, port, threads, repack), os.devnull)
        url = f"http://127.0.0.1:{port}"
        try:
            serving = wait_until_serving(process, url, TRIAL_SECONDS)
            failed = _ask_one_token(url) if serving else "it did not answer /health"
            died = process.poll()
        finally:
            if process.poll() is None:
                stop_group(process, seconds=10)
        if died is not None and died != 0:
            return Outcome(died)
        return Outcome(0 if failed is None else (None if not serving else 1), failed or "")
    return run


def trust_server(binary: Path, target_file: str, threads: int) -> tuple[Verdict, list[Verdict]]:
    """The verdict on ``binary`` serving ``target_file`` here, and with which setting
    (``verdict.setting["repack"]``): the rule's first, then, after a death by a
    signal with repacking on, ``--no-repack``. With it, every verdict, in order."""
    first = extra_buffers_default()
    settings = [{"repack": first}] + ([{"repack": False}] if first else [])
    key = {"binary": fingerprint(str(binary)), "file": fingerprint(target_file)}
    return first_usable("llama-server", key, lambda s: _trial(binary, target_file, threads, s["repack"]), settings)


def unusable_server_message(verdict: Verdict, seen: list[Verdict], binary: Path, build_folder: Path) -> str:
    """What the serve command says when llama-server cannot run here, and what to try."""
    if verdict.signal:
        tried = {v.setting.get("repack") for v in seen}
        how = ("with and without weight repacking" if tried == {True, False} else
               "with weight repacking" if tried == {True} else "with --no-repack")
        what = (f"llama-server died with {verdict.signal} on this CPU ({signal_words(verdict.signal)}, in a "
                f"one-token test {how})")
    else:
        what = f"llama-server failed a one-token test on this machine ({verdict.detail})"
    if binary.resolve().is_relative_to(build_folder.resolve()):
        rebuild = (f"This project's build of it was compiled for the CPU it was built on: to rebuild it for this "
                   f"one, delete {build_folder} and run this command again; or set GUMIHO_LLAMA_SERVER to a "
                   f"llama-server built with -DGGML_NATIVE=OFF")
    else:
        rebuild = (f"GUMIHO_LLAMA_SERVER names {binary}: unset it to use this project's own build, or name a "
                   f"llama-server built for this CPU (-DGGML_NATIVE=OFF)")
    return f"{what}, so it was not started. {rebuild}; or serve with --engine vllm, or run the library on " \
           f"runtime='torch'."


def check_server(binary: Path, target_file: str, threads: int, build_folder: Path,
                 log: Callable[[str], None] = lambda line: None) -> bool:
    """The repack setting to serve with, once llama-server has passed its trial here;
    GumihoError in words when it cannot."""
    verdict, seen = trust_server(binary, target_file, threads)
    if not verdict.usable:
        raise GumihoError(unusable_server_message(verdict, seen, binary, build_folder))
    for before in seen[:-1]:  # a death with repacking, then a trial without that passed
        log(f"llama-server died with {before.signal} on this CPU with weight repacking; serving with --no-repack.")
    if not verdict.cached:
        log(f"llama-server passed its one-token test on this CPU in {verdict.seconds:.1f} s (once per machine, "
            f"build and file).")
    return bool(verdict.setting.get("repack"))
