"""Every way a serve command can be stopped, and the check that nothing it started
outlives it (issue 71): used for both engines' stand-ins."""
import os
import signal
import subprocess
import time

# SIGINT to the terminal's process group is Ctrl-C; "pipe closed" is `| head` ending first.
STOP_WAYS = ("SIGINT to the group", "SIGTERM", "SIGHUP", "pipe closed, then SIGINT to the group")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie has exited: its parent has not reaped it yet
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def wait_serving(process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "serving " in line and " at " in line:
            return
        if not line and process.poll() is not None:
            raise AssertionError(f"the command ended before serving: {process.stderr.read()[-2000:]}")
    raise AssertionError("the command did not say it was serving")


def stop_and_check(process: subprocess.Popen, pids: list[int], how: str) -> None:
    """Stop the command (started in a session of its own, as a terminal's job) ``how``,
    then check it said no traceback and that every one of ``pids`` is gone."""
    assert all(alive(pid) for pid in pids)
    if how.startswith("pipe closed"):
        process.stdout.close()  # the reader of its output is gone
    if "group" in how:
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, getattr(signal, how))
    process.wait(timeout=90)
    err = process.stderr.read()
    assert "Traceback" not in err, err
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in pids if alive(pid)]
    assert not left, f"{len(left)} process(es) outlived the command ({how})"
