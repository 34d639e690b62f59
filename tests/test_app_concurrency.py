"""Eight sessions at once through the app's API (gradio_client): all are served
(the queue runs one generation at a time), every answer belongs to its own
prompt, and the server's memory stays flat over repeated rounds."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import gradio_client

from app_server import running_app, server_rss_mb

PROMPTS = [
    "Name one animal that lives in the ocean.",
    "What colour is a ripe banana?",
    "Give me a word that rhymes with cat.",
    "How many legs does a spider have?",
    "Say hello in Spanish.",
    "What is 3 plus 4?",
    "Name a planet close to the Sun.",
    "Écris « bonjour » trois fois 🌞",
]
SETTINGS = dict(max_new_tokens=6, tree_nodes=8, tree_depth=4, tree_top_k=2)


def one_session(url: str, prompt: str) -> dict:
    client = gradio_client.Client(url, verbose=False)  # its own session
    return client.predict(prompt, api_name="/race", **SETTINGS)


def round_of(url: str, prompts: list[str]) -> dict[str, dict]:
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda p: one_session(url, p), prompts))
    return dict(zip(prompts, results))


def test_eight_simultaneous_sessions_all_served_without_leaks():
    server = running_app()
    first = round_of(server.url, PROMPTS)
    for prompt, r in first.items():
        assert r["ok"], r["message"]
        assert r["prompt"] == prompt  # each session got the answer to its own request
        assert 1 <= r["vanilla"]["new_tokens"] <= SETTINGS["max_new_tokens"]
        assert r["vanilla"]["tokens"] == r["gumiho"]["tokens"]  # greedy speculative == vanilla
    rss = [server_rss_mb(server)]

    # The same prompts again, submitted in another order: greedy decoding is
    # deterministic, so any answer that crossed sessions would show up here.
    shuffled = PROMPTS[:]
    random.Random(7).shuffle(shuffled)
    second = round_of(server.url, shuffled)
    for prompt in PROMPTS:
        assert second[prompt]["ok"], second[prompt]["message"]
        assert second[prompt]["vanilla"]["tokens"] == first[prompt]["vanilla"]["tokens"], prompt
        assert second[prompt]["gumiho"]["text"] == first[prompt]["gumiho"]["text"], prompt
    rss.append(server_rss_mb(server))
    third = round_of(server.url, PROMPTS)
    assert all(r["ok"] for r in third.values())
    rss.append(server_rss_mb(server))
    print(f"\n24 generations in 3 rounds of 8 simultaneous sessions: all served, no answer crossed sessions; "
          f"server memory after each round: {', '.join(f'{x:.0f} MB' for x in rss)}")
    # All model work runs on one thread, so after the first round warms up memory stays flat.
    assert rss[2] - rss[1] < 24, f"server memory grew {rss[2] - rss[1]:.0f} MB in a round of 8 generations"


def test_bad_requests_get_messages_and_the_app_keeps_serving():
    server = running_app()
    client = gradio_client.Client(server.url, verbose=False)
    cases = [
        (dict(prompt=""), "prompt is empty"),
        (dict(prompt="x" * 100_000), "at most"),
        (dict(prompt="hi", max_new_tokens=0), "Max new tokens"),
        (dict(prompt="hi", max_new_tokens=10**7), "Max new tokens"),
        (dict(prompt="hi", temperature=-0.5), "Temperature"),
        (dict(prompt="hi", temperature=50), "Temperature"),
        (dict(prompt="hi", target="no-such-org/no-such-model-xyz"), "cannot load"),
        (dict(prompt="hi", target="/no/such/folder"), "does not exist"),
        (dict(prompt="hi", drafter_path="/no/such/drafter"), "does not exist"),
    ]
    for kw, words in cases:
        r = client.predict(api_name="/race", **kw)
        assert not r["ok"] and words in r["message"], (kw.get("prompt", "")[:20], kw, r["message"])
    ok = client.predict("<b>bold</b> & 🦊 ünïcödé", api_name="/race", max_new_tokens=3, tree_nodes=4)
    assert ok["ok"] and ok["prompt"] == "<b>bold</b> & 🦊 ünïcödé"
