"""A class on one app server, simulated on loopback: visitors clicking example prompts
(answered from the recordings) and visitors asking for live races with prompts of their
own, all at the same moment. The suite runs it small (test_classroom_load.py), and
benchmarks/classroom_load.py at a class's scale; that script's docstring says what is
measured. Every request has a deadline and the server is stopped at the end."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from app_server import ROOT, server_rss_mb, start_app, stop_app

# Prompts of the load's own, for the live runs: none is an example prompt.
LIVE_PROMPTS = [
    "Name three rivers in Africa and one fact about each.",
    "Write a haiku about a train at night.",
    "How do I boil an egg so the yolk stays soft?",
    "Summarise the water cycle for a ten-year-old.",
    "Give two reasons to learn a second language.",
    "Write a limerick about a cat who loves maths.",
    "What does a compiler do, in two sentences?",
    "Suggest a name for a bakery by the sea, and say why.",
    "Explain what a prime number is, with an example.",
    "Describe a sunrise over mountains in one paragraph.",
    "List four things to pack for a day of hiking.",
    "Why is the sky blue? Answer in one sentence.",
]


def _examples() -> list[str]:
    with open(os.path.join(ROOT, "assets", "examples.json"), encoding="utf-8") as f:
        return json.load(f)["prompts"]


def record_examples(n: int, out: str, env: dict) -> float:
    """The first ``n`` examples' races recorded for the server's setup; seconds taken."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "app.web.record", "--kinds", "race", "--examples", str(n), "--out", out],
                   cwd=ROOT, env={**os.environ, **env}, check=True, capture_output=True, timeout=1800)
    return time.perf_counter() - t0


def _race(url: str, deadline: float, **params) -> dict:
    """One /race call from a client of its own (its own session), answered by the deadline."""
    import gradio_client

    t0 = time.perf_counter()
    try:
        client = gradio_client.Client(url, verbose=False)
        job = client.submit(api_name="/race", **params)
        out = job.result(timeout=max(1.0, deadline - time.monotonic()))
    except Exception as e:  # a refusal, a timeout or a broken connection: counted, never raised
        return {"ok": False, "seconds": time.perf_counter() - t0, "message": f"{type(e).__name__}: {e}"[:200]}
    out = dict(out) if isinstance(out, dict) else {"ok": False, "message": str(out)[:200]}
    out["seconds"] = time.perf_counter() - t0
    return out


def _page(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        r.read()
    return time.perf_counter() - t0


def send_load(url: str, visitors: int, live: int, tokens: int, deadline_s: float) -> dict:
    """``visitors`` clients open the page and click an example, and ``live`` clients ask for
    live races of their own prompts, all released at the same moment."""
    examples = _examples()
    deadline = time.monotonic() + deadline_s
    start = threading.Barrier(visitors + live)
    clicks: list = [None] * visitors
    runs: list = [None] * live

    def visitor(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        page_s = _page(url)
        answer = _race(url, deadline, prompt=examples[i % RECORDED_EXAMPLES])
        answer["seconds"] = time.perf_counter() - t0
        answer["page_s"] = page_s
        clicks[i] = answer

    def live_run(i: int) -> None:
        start.wait()
        runs[i] = _race(url, deadline, prompt=LIVE_PROMPTS[i % len(LIVE_PROMPTS)], max_new_tokens=tokens,
                        live=True)

    threads = [threading.Thread(target=visitor, args=(i,)) for i in range(visitors)]
    threads += [threading.Thread(target=live_run, args=(i,)) for i in range(live)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + 30))
    return {"clicks": [c or {"ok": False, "message": "no answer"} for c in clicks],
            "live": [r or {"ok": False, "message": "no answer"} for r in runs]}


RECORDED_EXAMPLES = 2  # the examples the visitors click (each recorded before the load)


def summary(load: dict, alone: list[dict], rss: tuple[float, float]) -> dict:
    clicks, runs = load["clicks"], load["live"]
    click_s = [c["seconds"] for c in clicks if c.get("ok")]
    pairs = [(r.get("speedup"), a.get("speedup")) for r, a in zip(runs, alone)]
    ratios = [x / y for x, y in pairs if x and y]
    return {
        "visitors": len(clicks),
        "visitors_answered": len(click_s),
        "visitors_refused": sum(1 for c in clicks if not c.get("ok")),
        "visitors_from_recording": sum(1 for c in clicks if c.get("source") == "recorded"),
        "visitor_seconds": {"median": round(statistics.median(click_s), 3) if click_s else None,
                            "slowest": round(max(click_s), 3) if click_s else None},
        # Of those seconds, the page's own first load (the rest is the client's session and its answer).
        "visitor_page_seconds": {"median": round(statistics.median(c["page_s"] for c in clicks if "page_s" in c), 3)
                                 if any("page_s" in c for c in clicks) else None,
                                 "slowest": round(max((c["page_s"] for c in clicks if "page_s" in c), default=0), 3)},
        "live_runs": len(runs),
        "live_answered": sum(1 for r in runs if r.get("ok")),
        "live_refused": sum(1 for r in runs if not r.get("ok")),
        "live_seconds": [round(r["seconds"], 2) for r in runs],
        # Where each live run stood when it joined the line, the wait the server then expected, and
        # the seconds to its answer (the API's "queue"; a page shows the same in its banner).
        "live_queue": [r.get("queue") for r in runs],
        "live_texts_identical": [bool(r.get("ok")) and r["vanilla"]["tokens"] == r["gumiho"]["tokens"] for r in runs],
        "live_speedup_at_once": [x for x, _ in pairs],
        "live_speedup_alone": [y for _, y in pairs],
        "live_over_alone": [round(x, 3) for x in ratios],
        "server_rss_mb": {"before": round(rss[0], 1), "after": round(rss[1], 1),
                          "ratio": round(rss[1] / rss[0], 3) if rss[0] else None},
        "refusal_messages": sorted({c.get("message", "") for c in clicks + runs if not c.get("ok")}),
    }


def run(visitors: int, live: int, tokens: int, deadline_s: float, env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="gumiho-class-") as tmp:
        recordings = os.path.join(tmp, "examples.pkl.gz")
        record_s = record_examples(RECORDED_EXAMPLES, recordings, env)
        server = start_app({**env, "GUMIHO_APP_RECORDINGS": recordings}, timeout=300)
        try:
            # The model loads behind the page: wait until a live race is answered.
            warm = _race(server.url, time.monotonic() + 600, prompt="Hi", max_new_tokens=4, live=True)
            if not warm.get("ok"):
                raise RuntimeError(f"the server never raced: {warm.get('message')}\n{server.log()}")
            before = server_rss_mb(server)
            load = send_load(server.url, visitors, live, tokens, deadline_s)
            alone = [_race(server.url, time.monotonic() + 600, prompt=LIVE_PROMPTS[i % len(LIVE_PROMPTS)],
                           max_new_tokens=tokens, live=True) for i in range(live)]
            after = server_rss_mb(server)
        finally:
            stop_app(server)
    out = summary(load, alone, (before, after))
    out["settings"] = {"visitors": visitors, "live": live, "tokens": tokens, "examples_clicked": RECORDED_EXAMPLES,
                       "record_s": round(record_s, 1), "env": env}
    return out
