"""A stand-in for llama-server: it dies by the signal in GUMIHO_TEST_NATIVE_DEATH
(SIGILL by default) when GUMIHO_TEST_SERVER_DIES says so ("always", or "with-repack":
unless started with --no-repack, as llama.cpp's AMX repack does on a CPU that
advertises AMX but cannot run it); otherwise it answers /health and a /completion
of one token. Each start's process id and arguments are appended to GUMIHO_TEST_SERVER_ARGS
(a file, a JSON line each)."""
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
if os.environ.get("GUMIHO_TEST_SERVER_ARGS"):
    with open(os.environ["GUMIHO_TEST_SERVER_ARGS"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "args": args}) + "\n")
dies = os.environ.get("GUMIHO_TEST_SERVER_DIES", "always")
if dies == "always" or (dies == "with-repack" and "--no-repack" not in args):
    os.kill(os.getpid(), getattr(signal, os.environ.get("GUMIHO_TEST_NATIVE_DEATH", "SIGILL")))


class Answer(BaseHTTPRequestHandler):
    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"status": "ok"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send({"content": " Hi", "tokens": [1], "timings": {}})

    def log_message(self, *a):
        pass


HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Answer).serve_forever()
