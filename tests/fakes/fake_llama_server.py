"""A stand-in for llama-server: it dies by the signal in GUMIHO_TEST_NATIVE_DEATH
(SIGILL by default) when GUMIHO_TEST_SERVER_DIES says so ("always", or "with-repack":
unless started with --no-repack, as llama.cpp's AMX repack does on a CPU that
advertises AMX but cannot run it); otherwise it answers /health and a /completion
of one token. A /completion of token ids answers ``n_predict`` tokens that follow from
them; a server started with a drafter (``-md``) changes the token at new-token position
P of a prompt whose first id is I where GUMIHO_TEST_DRAFT_DIFFERS (JSON, {"I": P}) says
so, as llama.cpp's batched kernels may on a near-tie. Each start's process id and arguments are appended to GUMIHO_TEST_SERVER_ARGS
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
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt):
            self._send({"content": " Hi", "tokens": [1], "timings": {}})
            return
        tokens = [(sum(prompt) + 7 * i) % 1000 for i in range(int(body.get("n_predict", 16)))]
        drafted = "-md" in args
        where = json.loads(os.environ.get("GUMIHO_TEST_DRAFT_DIFFERS", "{}")).get(str(prompt[0])) if drafted else None
        if where is not None and where < len(tokens):
            tokens[where] += 1
        timings = {"draft_n": 3 * len(tokens), "draft_n_accepted": len(tokens)} if drafted else {}
        self._send({"content": "", "tokens": tokens, "timings": timings})

    def log_message(self, *a):
        pass


HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Answer).serve_forever()
