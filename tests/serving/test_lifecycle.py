"""A served engine's life (gumiho.serving.lifecycle) with a stand-in engine that behaves
as vLLM does at the edges: it prints while it starts, answers /health, and on SIGINT
prints a traceback and forty lines of leak reports before it exits (issue 60: stopping
`gumiho.serve` printed about 35 such lines). What it printed while serving reaches the
terminal; what it prints while being stopped does not; the command exits 0 saying
"stopped."; an engine that exits at start is reported in one line."""
import os
import signal
import subprocess
import sys
import time

from gumiho.serving.lifecycle import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENGINE = r'''
import http.server, signal, sys
if sys.argv[2] == "fail":
    print("engine: cannot load the model", flush=True)
    sys.exit(3)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health)
print("engine: listening", flush=True)
def noisy_exit(*args):
    print("Traceback (most recent call last):", flush=True)
    for i in range(40):
        print(f"nanobind: leaked instance {i}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, noisy_exit)
server.serve_forever()
'''

COMMAND = r'''
import signal, sys
from gumiho.serving.lifecycle import command_main, serve_until_stopped, start_process, stop_group
port, mode, engine = sys.argv[1], sys.argv[2], sys.argv[3]

def serve(log):
    process = start_process([sys.executable, "-c", engine, port, mode])
    return serve_until_stopped(process, f"http://127.0.0.1:{port}", 30, "the engine", "serving. Ctrl-C stops it.",
                               lambda: stop_group(process, signal.SIGINT, 10, leader_only=True), log)

sys.exit(command_main(serve))
'''


def start(mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", COMMAND, str(free_port()), mode, ENGINE], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_ctrl_c_is_quiet_and_what_the_engine_said_before_it_is_relayed():
    process = start("serve")
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "serving." in line or not line:
            break
    assert any("serving." in line for line in lines), lines
    assert any("engine: listening" in line for line in lines)  # relayed while it serves
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and rest.strip() == "gumiho.serve: stopped.", rest
    assert "Traceback" not in rest and "leaked" not in rest


def test_an_engine_that_exits_at_start_is_one_line():
    out, _ = start("fail").communicate(timeout=60)
    assert "engine: cannot load the model" in out  # its own words reach the terminal
    assert "gumiho.serve: the engine did not start (its output is above): it exited with code 3." in out
    assert "Traceback" not in out
