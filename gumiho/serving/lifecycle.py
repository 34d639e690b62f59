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
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import GumihoError
from ..runtimes.native_probe import signal_name, signal_words


class Relay(threading.Thread):
    """Copies an engine's output to this terminal line by line until the engine is being
    stopped: what an engine prints while it shuts down (vLLM: a dead engine's traceback,
    its libraries' leak reports, leaked-semaphore warnings) is noise to a user who pressed
    Ctrl-C, so from then on it is dropped (a ``--log`` file keeps everything)."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.quiet = stream, False

    def run(self) -> None:
        for line in iter(self.stream.readline, ""):
            if not self.quiet:
                try:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                except (BrokenPipeError, OSError):  # nobody reads this terminal's pipe any more: drain quietly
                    self.quiet = True
        self.stream.close()


def free_port() -> int:
    """A port nothing on this machine listens on now, for an engine to listen on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_process(command: Sequence[str], log_path=None, env: Optional[dict] = None) -> subprocess.Popen:
    """``command`` in a session of its own, its output to ``log_path``, or (None) relayed
    to this terminal until it is stopped (:class:`Relay`, ``process.relay``)."""
    out = open(log_path, "a") if log_path else subprocess.PIPE
    try:
        process = subprocess.Popen([str(c) for c in command], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   text=not log_path, errors="replace" if not log_path else None)
    finally:
        if log_path:
            out.close()  # the child holds its own copy
    process.relay = None
    if not log_path:
        process.relay = Relay(process.stdout)
        process.relay.start()
    return process


def wait_until_serving(process: subprocess.Popen, url: str, timeout: float) -> bool:
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
        time.sleep(1)
    return False


def stop_group(process: subprocess.Popen, first: int = signal.SIGTERM, seconds: float = 15,
               leader_only: bool = False) -> None:
    """``first`` to the process's group (or, ``leader_only``, to the process alone, which
    then stops the rest itself), SIGKILL to the group after ``seconds``; its output from
    then on is not relayed."""
    relay = getattr(process, "relay", None)
    if relay is not None:
        relay.quiet = True
    if process.poll() is None:
        try:
            if leader_only:
                os.kill(process.pid, first)
            else:
                os.killpg(process.pid, first)
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # whatever of the group is left (a worker the leader lost)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    if relay is not None:
        relay.join(timeout=5)


def died_words(returncode: Optional[int]) -> str:
    """'died with SIGILL (illegal instruction)' for a process killed by a signal, else
    'exited with code N'."""
    name = signal_name(returncode)
    return f"died with {name} ({signal_words(name)})" if name else f"exited with code {returncode}"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def serve_until_stopped(process: subprocess.Popen, url: str, start_timeout: float, engine: str,
                        ready: str, stop: Callable[[], None], log: Callable[[str], None],
                        log_file: Optional[str] = None, cause: Callable[[str], str] = lambda text: "") -> int:
    """Wait for the engine to answer, say ``ready``, and run until it exits (its exit
    code decides ours) or Ctrl-C / SIGTERM (a clean stop, exit 0). An engine that never
    answers is stopped, and the error says why where its log (``log_file``) shows it."""
    # Set explicitly: a process started in the background by a shell inherits SIGINT ignored.
    # SIGHUP too: a closed terminal stops the engine as Ctrl-C does.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    try:
        if not wait_until_serving(process, url, start_timeout):
            code = process.poll()
            stop()
            where = f" (its output is in {log_file})" if log_file else " (its output is above)"
            why = cause(Path(log_file).read_text(errors="replace")) if log_file and Path(log_file).exists() else ""
            raise GumihoError(f"{engine} did not start{where}: " +
                              (f"it {died_words(code)}" if code is not None else
                               f"it did not answer within {start_timeout:g} s") + (f": {why}" if why else "."))
        log(ready)
        process.wait()
        log(f"{engine} {died_words(process.returncode)}.")
        return 0 if process.returncode == 0 else 1
    except KeyboardInterrupt:
        stop()
        log("stopped.")
        return 0
    finally:
        # Whatever ended this command (a signal while stopping, an error), the engine does not outlive it.
        if process.poll() is None:
            stop_group(process, signal.SIGKILL, 5)


def say(line: str, stream=None) -> None:
    """A line to the terminal; when nobody reads it any more (``| head`` ended, the pipe
    closed), nothing, and the command goes on stopping its engine."""
    stream = stream or sys.stdout
    try:
        print(line, file=stream, flush=True)
    except (BrokenPipeError, OSError):
        try:  # no more writes to the dead pipe, not even Python's own flush at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, ValueError):
            pass


def command_main(serve: Callable[[Callable[[str], None]], int],
                 words: Sequence[tuple[type, str]] = ()) -> int:
    """Run ``serve(log)`` as the serve command: every line prefixed, a refusal or a
    failure one line on stderr (exit 2) led by the words of the first of ``words``
    ((error type, prefix)) it is an instance of, Ctrl-C a clean stop."""
    def log(message: str) -> None:
        say(f"gumiho.serve: {message}")

    try:
        return serve(log)
    except GumihoError as e:
        prefix = next((p for kind, p in words if isinstance(e, kind)), "")
        say(f"gumiho.serve: {prefix}{e}", sys.stderr)
        return 2
    except KeyboardInterrupt:
        say("gumiho.serve: stopped.")
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
