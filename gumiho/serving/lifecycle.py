"""A served engine's life, the same for every engine the serve command starts: a
process in a session of its own (so that Ctrl-C reaches this command, which then stops
the engine's whole process group), waited on until its /health answers, run until it
exits or the user stops it; and the command's words for what went wrong, one line, no
traceback. One builder at a time for what an engine builds once (a lock file beside
the build's folder)."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import GumihoError


def start_process(command: Sequence[str], log_path=None, env: Optional[dict] = None) -> subprocess.Popen:
    """``command`` in a session of its own, its output to ``log_path`` (None: this terminal)."""
    out = open(log_path, "a") if log_path else None
    try:
        return subprocess.Popen([str(c) for c in command], env=env, stdout=out,
                                stderr=subprocess.STDOUT if out else None, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        if out:
            out.close()  # the child holds its own copy


def wait_until_serving(process: subprocess.Popen, url: str, timeout: float, every: float = 1.0) -> bool:
    """True once ``url``/health answers 200; False when the process exited first or
    ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(every)
    return False


def stop_group(process: subprocess.Popen, first: int = signal.SIGTERM, seconds: float = 15) -> None:
    """``first`` to the process's group (its own shutdown), SIGKILL after ``seconds``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, first)
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def serve_until_stopped(process: subprocess.Popen, url: str, start_timeout: float, engine: str,
                        ready: str, stop: Callable[[], None], log: Callable[[str], None],
                        log_file: Optional[str] = None, cause: Callable[[str], str] = lambda text: "") -> int:
    """Wait for the engine to answer, say ``ready``, and run until it exits (its exit
    code decides ours) or Ctrl-C / SIGTERM (a clean stop, exit 0). An engine that never
    answers is stopped, and the error says why where its log (``log_file``) shows it."""
    # Set explicitly: a process started in the background by a shell inherits SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if not wait_until_serving(process, url, start_timeout):
            code = process.poll()
            stop()
            where = f" (its output is in {log_file})" if log_file else " (its output is above)"
            why = cause(Path(log_file).read_text(errors="replace")) if log_file and Path(log_file).exists() else ""
            raise GumihoError(f"{engine} did not start{where}: " +
                              (f"it exited with code {code}" if code is not None else
                               f"it did not answer within {start_timeout:g} s") + (f": {why}" if why else "."))
        log(ready)
        process.wait()
        log(f"{engine} exited with code {process.returncode}.")
        return 0 if process.returncode == 0 else 1
    except KeyboardInterrupt:
        stop()
        log("stopped.")
        return 0


def command_main(serve: Callable[[Callable[[str], None]], int],
                 words: Sequence[tuple[type, str]] = ()) -> int:
    """Run ``serve(log)`` as the serve command: every line prefixed, a refusal or a
    failure one line on stderr (exit 2) led by the words of the first of ``words``
    ((error type, prefix)) it is an instance of, Ctrl-C a clean stop."""
    def log(message: str) -> None:
        print(f"gumiho.serve: {message}", flush=True)

    try:
        return serve(log)
    except GumihoError as e:
        prefix = next((p for kind, p in words if isinstance(e, kind)), "")
        print(f"gumiho.serve: {prefix}{e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gumiho.serve: stopped.", flush=True)
        return 0


@contextmanager
def build_lock(folder: Path):
    """One builder of ``folder`` at a time (two test processes, or a test and a bench,
    may ask at once)."""
    with open(folder.parent / f".{folder.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
