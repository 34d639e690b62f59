"""A stand-in for the vLLM environment's python, as `gumiho.serve --engine vllm` runs it
(``python -m vllm.entrypoints.openai.api_server --port P ...``): it answers /health on
the port, and starts an "engine" child in its process group that ignores SIGINT and
SIGTERM, as a worker its server lost would. On SIGINT the server exits without
stopping that child: only a stop of the whole group ends it. Both process ids are
appended to GUMIHO_TEST_SERVER_ARGS (a JSON line)."""
import json
import os
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
engine = subprocess.Popen([sys.executable, "-S", "-c",
                           "import signal, time\n"
                           "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                           "time.sleep(3600)\n"])
with open(os.environ["GUMIHO_TEST_SERVER_ARGS"], "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "engine_pid": engine.pid, "args": args}) + "\n")


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


signal.signal(signal.SIGINT, lambda *a: os._exit(0))  # leaves the engine child behind
HTTPServer(("127.0.0.1", port), Health).serve_forever()
