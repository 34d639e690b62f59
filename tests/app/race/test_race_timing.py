"""How the race is timed (app.race.run): vanilla and Gumiho advanced in alternation,
balanced by the tokens each has produced, each on its own clock.

On a tiny random-weight target: the alternating race produces exactly what
separate greedy generations produce, and each column's clock is the sum of its
own steps, not the wall time of both. On fake decoders whose steps cost fixed
amounts of a fake clock: load that starts (or ends) halfway through the race
leaves the alternating scheme's speedup where it was unloaded and moves the
sequential scheme's a lot, deterministically, whatever the real machine is doing.
"""
from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest
import torch

import gumiho
from app.core.forms import RaceForm, parse_request
from app.core.settings import AppSettings
from app.models.hub import ModelHub, Resolved, _random_drafter
from app.race import run as race
from app.race.replay import replay_frames
from app.race.run import Progress, compute_race
from app.race.summary import summary
from app.views.render import render_result, speedup
from gumiho import EmittedToken, StepEvent
from gumiho.proposers import Head, Proposer
from helpers import tiny_target


class Bytes:
    """Token id < 256 is that byte (all a race's records need of a tokenizer)."""

    all_special_ids: list = []
    chat_template = None

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def __call__(self, text):
        return {"input_ids": list(text.encode("utf-8"))}


def request(max_new=40):
    return parse_request(RaceForm("Hello there", max_new, 0.0, 1.0, 0, 3, 2, 4, tree_cost_aware=False))


# ----------------------------------------------------------------------------- on a tiny target


@pytest.fixture(scope="module")
def tiny():
    target = tiny_target("llama", vocab=320, hidden=32, eos=319, ctx=512, seed=7)
    target.tokenizer = Bytes()
    drafter = _random_drafter(target, "gumiho")
    hub = ModelHub(default_loader=lambda: target, warmup=False)
    hub.resolve = lambda *a, **k: Resolved(target, drafter, False, "", "random drafter")
    yield hub, target, drafter
    hub.close()


def test_alternating_race_is_lossless_and_each_column_keeps_its_own_clock(tiny, monkeypatch):
    hub, target, drafter = tiny
    req = request(40)
    ids = target.encode(req.prompt)
    ref_v = gumiho.generate(target, prompt_ids=ids, settings=req.settings).tokens
    ref_g = gumiho.generate(target, prompt_ids=ids, drafter=drafter, settings=req.settings).tokens
    assert ref_v == ref_g and len(ref_v) == 40  # greedy speculative decoding is lossless

    # Each real stream wrapped so that the time spent inside each of its steps, and
    # the order in which the two decoders' steps ran, are known.
    own = {"vanilla": [], "gumiho": []}
    order = []
    real_stream = race.stream

    def measured(target, ids, drafter, settings, stop=None):
        label = "vanilla" if drafter is None else "gumiho"
        steps = real_stream(target, ids, drafter, settings, stop=stop)
        while True:
            t = time.perf_counter()
            try:
                ev = next(steps)
            except StopIteration:
                return
            own[label].append(time.perf_counter() - t)
            order.append((label, len(ev.emitted)))
            yield ev

    monkeypatch.setattr(race, "stream", measured)
    t0 = time.perf_counter()
    res = compute_race(hub, req, threading.Event())
    wall = time.perf_counter() - t0

    assert [t for e in res.vanilla.events for t in e.tokens] == ref_v
    assert [t for e in res.gumiho.events for t in e.tokens] == ref_g
    for run in (res.vanilla, res.gumiho):
        clock = [e.elapsed_s for e in run.events]
        assert all(0 < a < b for a, b in zip(clock, clock[1:])), run.label
        # The last timestamp is the sum of the decoder's own step durations (the
        # first step's setup before the engine's clock starts aside) ...
        assert run.wall_s == pytest.approx(sum(own[run.label]), rel=0.05, abs=0.003), run.label
        assert run.stats().wall_s == run.wall_s
    # ... not the wall time of both: the two clocks together fit in the race's wall time.
    assert res.vanilla.wall_s + res.gumiho.wall_s <= wall
    # The steps really alternated, balanced by tokens: the decoder behind always went next.
    counts = {"vanilla": 0, "gumiho": 0}
    for label, n in order:
        other = "gumiho" if label == "vanilla" else "vanilla"
        assert counts[label] <= counts[other] or counts[other] == len(ref_v), order
        counts[label] += n
    assert order[0][0] == "vanilla" and order[1][0] == "gumiho"
    # The interleaved streams leave the model thread's autograd state as they found it.
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    s = summary(res, req.prompt)
    assert s["vanilla"]["tokens"] == s["gumiho"]["tokens"] == ref_v
    assert s["timing"] == race.TIMING["alternating"] and s["vanilla"]["wall_s"] == round(res.vanilla.wall_s, 4)


def test_sequential_scheme_is_still_there(tiny):
    hub, target, drafter = tiny
    req = request(24)
    res = compute_race(hub, req, threading.Event(), scheme="sequential")
    ref = gumiho.generate(target, prompt_ids=target.encode(req.prompt), settings=req.settings).tokens
    assert [t for e in res.vanilla.events for t in e.tokens] == [t for e in res.gumiho.events for t in e.tokens] == ref
    assert summary(res, req.prompt)["timing"] == race.TIMING["sequential"]
    with pytest.raises(ValueError, match="unknown timing scheme"):
        compute_race(hub, req, threading.Event(), scheme="parallel")


# ----------------------------------------------------------------------------- fake decoders on a fake clock


VANILLA_STEP, GUMIHO_STEP, GUMIHO_TOKENS = 0.02, 0.04, 4  # seconds per step, tokens per Gumiho verify step


class Machine:
    """A fake clock that only the fake decoders' work moves. A step of cost c
    moves it by c, or by c * factor while the machine is loaded: from wall time
    ``load_from`` on, or until ``load_until``."""

    def __init__(self, factor=1.0, load_from=math.inf, load_until=-math.inf):
        self.t = 0.0
        self.factor, self.load_from, self.load_until = factor, load_from, load_until

    def now(self):
        return self.t

    def work(self, cost):
        loaded = self.t >= self.load_from or self.t < self.load_until
        self.t += cost * (self.factor if loaded else 1.0)


def fake_streams(machine, vanilla_fails_at=None):
    """A stand-in for gumiho.stream: vanilla emits one token per step of
    VANILLA_STEP, Gumiho GUMIHO_TOKENS per step of GUMIHO_STEP after a one-token
    prefill. Like the engine, each event's elapsed_s is wall time since that
    stream started (so it includes the other decoder's steps when interleaved),
    it works inside an inference-mode block and honours the stop flag at each step."""

    def fake(target, ids, drafter, settings, stop=None):
        n = settings.max_new_tokens
        t0 = machine.now()
        produced, step = 0, 0
        with torch.inference_mode():  # as the engine does
            while True:
                if step and stop is not None and stop.is_set():
                    yield StepEvent(step, [], 0, [], 0, 0.0, 0.0, machine.now() - t0, finished=True,
                                    finish_reason="stopped")
                    return
                if drafter is None and step == vanilla_fails_at:
                    raise gumiho.GumihoError("the model failed")
                speculative = drafter is not None and step > 0
                machine.work(GUMIHO_STEP if speculative else VANILLA_STEP)
                k = min(GUMIHO_TOKENS if speculative else 1, n - produced)
                emitted = [EmittedToken(97 + (produced + i) % 26, i + 1 if i < k - 1 else 0,
                                        "serial" if i < k - 1 else "target", 0.5 if i < k - 1 else None)
                           for i in range(k)]
                produced += k
                done = produced >= n
                yield StepEvent(step, emitted, k - 1, [], 4 if speculative else 0, 0.0, 0.0, machine.now() - t0,
                                finished=done, finish_reason="length" if done else None)
                if done:
                    return
                step += 1

    return fake


FAKE_TARGET = SimpleNamespace(name="fake", context_length=4096, tokenizer=Bytes(), runtime_note="",
                              runtime_choice="float32 in PyTorch",
                              runtime=SimpleNamespace(name="torch", weights="float32", flat_verify=True),
                              encode=lambda prompt: list(prompt.encode("utf-8")))

class _FakeDrafter(Proposer):
    """Names the heads of a gumiho drafter with 2 serial positions out of 3; never drafts
    (the fake stream below stands in for decoding)."""

    name = "gumiho"
    heads = (Head("serial", (1, 2), kind="gumiho"), Head("mlp", (3,), kind="gumiho"))

    def start(self, prompt_ids):
        raise AssertionError("the fake stream stands in for decoding: nothing asks this drafter to draft")


FAKE_DRAFTER = _FakeDrafter()
FAKE_HUB = SimpleNamespace(resolve=lambda *a, **k: Resolved(FAKE_TARGET, FAKE_DRAFTER, True, "", "fake drafter"),
                           settings=AppSettings())  # the app's settings as shipped


def fake_race(monkeypatch, scheme, machine, max_new=64, stop=None, progress=None):
    monkeypatch.setattr(race, "stream", fake_streams(machine))
    return compute_race(FAKE_HUB, request(max_new), stop or threading.Event(), progress, scheme=scheme,
                        now=machine.now)


def quiet_and_loaded(monkeypatch, scheme, load):
    """Speedups of one race unloaded and of the same race with the machine four
    times slower from (or until) the middle of the unloaded race's wall time."""
    quiet = fake_race(monkeypatch, scheme, Machine())
    middle = (quiet.vanilla.wall_s + quiet.gumiho.wall_s) / 2  # both decoders ran one after the other
    machine = Machine(4.0, load_from=middle) if load == "from" else Machine(4.0, load_until=middle)
    loaded = fake_race(monkeypatch, scheme, machine)
    return speedup(quiet)[0], speedup(loaded)[0]


@pytest.mark.parametrize("load", ["from", "until"])
def test_load_halfway_leaves_the_alternating_speedup_alone(monkeypatch, load):
    quiet, loaded = quiet_and_loaded(monkeypatch, "alternating", load)
    expected = (64 * VANILLA_STEP) / (VANILLA_STEP + math.ceil(63 / GUMIHO_TOKENS) * GUMIHO_STEP)
    assert quiet == pytest.approx(expected, rel=1e-9)
    # Within one step's worth of imbalance at the moment the load changes.
    assert loaded == pytest.approx(quiet, rel=0.08), (quiet, loaded)


@pytest.mark.parametrize("load", ["from", "until"])
def test_load_halfway_moves_the_sequential_speedup(monkeypatch, load):
    # The check the alternating scheme passes above fails for the sequential one:
    # the load lands on one decoder (mostly Gumiho, or mostly vanilla) only.
    quiet, loaded = quiet_and_loaded(monkeypatch, "sequential", load)
    assert loaded != pytest.approx(quiet, rel=0.08)
    if load == "from":
        assert loaded < 0.6 * quiet, (quiet, loaded)
    else:
        assert loaded > 1.6 * quiet, (quiet, loaded)


def test_own_clocks_replay_and_progress_on_fake_decoders(monkeypatch):
    seen = []

    class Watch(Progress):
        def produced(self, vanilla, gumiho):
            super().produced(vanilla, gumiho)
            seen.append((vanilla, gumiho, self.text()))

    machine = Machine()
    res = fake_race(monkeypatch, "alternating", machine, progress=Watch())
    # Each clock is its own steps' cost; the engine-style elapsed_s (wall since its
    # stream started) would have put both near the race's total.
    assert res.vanilla.wall_s == pytest.approx(64 * VANILLA_STEP)
    assert res.gumiho.wall_s == pytest.approx(VANILLA_STEP + 16 * GUMIHO_STEP)
    assert machine.t == pytest.approx(res.vanilla.wall_s + res.gumiho.wall_s)
    assert [e.elapsed_s for e in res.vanilla.events] == pytest.approx([VANILLA_STEP * (i + 1) for i in range(64)])
    # Balanced by progress: never more than one Gumiho step apart.
    assert all(abs(v - g) <= GUMIHO_TOKENS for v, g, _ in seen)
    assert seen[-1][:2] == (64, 64) and seen[5][2].startswith("Timing vanilla and Gumiho in alternation… vanilla ")
    assert seen[-1][2].endswith("vanilla 64/64, Gumiho 64/64 tokens")
    assert "Speedup" in render_result(res)
    # The replay: at time t each column shows what its own clock had produced by t.
    clock = [0.0]

    def sleep(s):
        clock[0] += max(s, 0.001)

    frames = list(replay_frames(res, threading.Event(), sleep=sleep, now=lambda: clock[0]))
    assert frames[-1].final and (frames[-1].n_vanilla, frames[-1].n_gumiho) == (64, 17)
    g_done = next(f for f in frames if f.n_gumiho == 17)
    assert g_done.clock == pytest.approx(res.gumiho.wall_s, abs=0.09) and g_done.n_vanilla < 64
    for f in frames:
        assert f.n_vanilla == sum(1 for e in res.vanilla.events if e.elapsed_s <= f.clock)


def test_stop_ends_both_decoders(monkeypatch):
    stop = threading.Event()

    class StopAt(Progress):
        def produced(self, vanilla, gumiho):
            super().produced(vanilla, gumiho)
            if vanilla + gumiho >= 20:
                stop.set()

    res = fake_race(monkeypatch, "alternating", Machine(), stop=stop, progress=StopAt())
    for run in (res.vanilla, res.gumiho):
        assert run.stopped and run.events[-1].finish_reason == "stopped"
        assert 5 <= run.stats().new_tokens < 20
    assert "Stopped. Both columns" in render_result(res)
    # Stop pressed before the race began: neither decoder starts.
    stop = threading.Event()
    stop.set()
    res = fake_race(monkeypatch, "alternating", Machine(), stop=stop)
    assert res.vanilla.stopped and res.gumiho.stopped and not res.vanilla.events and not res.gumiho.events


def test_a_failing_decoder_leaves_the_thread_as_it_found_it(monkeypatch):
    # Vanilla fails mid-race and leaves its inference-mode block while Gumiho's
    # stream is suspended inside its own: the thread must still end as it began.
    machine = Machine()
    monkeypatch.setattr(race, "stream", fake_streams(machine, vanilla_fails_at=5))
    progress = Progress()
    with pytest.raises(gumiho.GumihoError, match="the model failed"):
        compute_race(FAKE_HUB, request(64), threading.Event(), progress, now=machine.now)
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    assert progress.phase == "done" and progress.gumiho > 0
