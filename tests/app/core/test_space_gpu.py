"""The app on a Space's hardware: the `spaces` package's GPU decorator is a no-op
off ZeroGPU, a CUDA device gets the paper's tree, and a model job takes the ZeroGPU
path (the function's name and the request sent to a GPU worker, both ways through
pickle, as `spaces` sends them) with the same result on a CPU. One test imports the
app with `spaces` switched to its ZeroGPU mode, which patches torch as on a Space;
no GPU is lent here, so no job runs in a real GPU worker (see README: Run it on a Space)."""
from __future__ import annotations

import contextvars
import os
import pickle
import subprocess
import sys
import threading

import gradio as gr
import pytest
import spaces  # pinned in requirements.txt: the Space imports it
import torch
from test_app_render import END, TOK

from app.core import zerogpu
from app.core.forms import DEVICE_TREE, RaceForm, parse_request
from app.core.settings import AppSettings
from app.core.worker import ModelThread
from app.models import hub as hub_module
from app.models.hub import ModelHub, _random_drafter
from app.race.run import Progress, compute_race
from app.walkthrough.steps import compute_walk
from gumiho import GumihoError, TreeSettings
from helpers import ROOT, ready_hub, tiny_target


def test_the_gpu_decorator_is_the_identity_off_zerogpu():
    assert not zerogpu.ZERO_GPU, "SPACES_ZERO_GPU is set in this test run"

    def job(hub, req, stop):
        return 1

    assert spaces.GPU(job) is job and spaces.GPU(duration=30)(job) is job
    assert zerogpu.on_gpu(job) is job
    assert zerogpu.gpu_call is zerogpu.run_on_gpu_worker


def test_zerogpu_is_detected_as_the_spaces_package_detects_it():
    from spaces.config import boolean

    for value in (None, "", "true", "True", "TRUE", "1", "t", "false", "0", "yes", "no"):
        assert zerogpu._flag(value) == boolean(value), value


def test_a_cuda_device_gets_the_papers_tree(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert zerogpu.model_device() == "cuda"
    tree = TreeSettings.for_device(zerogpu.model_device())
    assert (tree.total_tokens, tree.depth, tree.serial_top_k, tree.full_tree) == (63, 7, 10, True)
    # The default model is loaded on that device.
    asked = []
    monkeypatch.setattr(hub_module, "load_target", lambda name=None, device=None, **kw: asked.append(device))
    ModelHub(warmup=False)._default_loader()
    assert asked == ["cuda"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_cpu_gets_the_cpu_tree():
    assert zerogpu.model_device() == "cpu"
    assert DEVICE_TREE == TreeSettings.for_device("cpu")
    assert DEVICE_TREE.total_tokens < 63


def test_a_model_job_runs_in_its_submitters_context():
    """What lets a ZeroGPU call on the model thread see its web request (and quota)."""
    var = contextvars.ContextVar("request", default=None)
    var.set("request-1")
    thread = ModelThread()
    seen = thread.submit(var.get).result(timeout=10)
    thread.close()
    assert seen == "request-1"


# ----------------------------------------------------------------------------- the ZeroGPU path on a CPU


@pytest.fixture(scope="module")
def tiny_hub():
    target = tiny_target("llama", vocab=320, hidden=32, eos=END, ctx=256, seed=4)
    target.tokenizer = TOK
    hub = ready_hub(target, _random_drafter(target, "gumiho"), "random drafter")
    yield hub
    hub.close()


def like_spaces(fn):
    """What `spaces.GPU` does to a call on ZeroGPU, minus the GPU: the arguments are
    pickled to a worker (here a fresh thread with an empty context) and the result
    is pickled back."""
    def call(*args):
        sent = pickle.dumps(args)
        out = {}

        def worker():
            try:
                out["value"] = pickle.dumps(fn(*pickle.loads(sent)))
            except BaseException as e:
                out["error"] = e
        t = threading.Thread(target=contextvars.Context().run, args=(worker,))
        t.start()
        t.join(60)
        if "error" in out:
            raise out["error"]
        return pickle.loads(out["value"])
    return call


@pytest.fixture
def zero_gpu(monkeypatch):
    monkeypatch.setattr(zerogpu, "ZERO_GPU", True)
    monkeypatch.setattr(zerogpu, "gpu_call", like_spaces(zerogpu.run_on_gpu_worker))


def tokens(run):
    return [t for e in run.events for t in e.tokens]


def test_a_race_and_a_walk_take_the_zerogpu_path_with_the_same_result(tiny_hub, zero_gpu):
    req = parse_request(RaceForm("Hello there", 8, 0.0, 1.0, 0, 3, 2, 4))
    direct = compute_race(tiny_hub, req, threading.Event())
    assert tokens(direct.vanilla) == tokens(direct.gumiho) and len(tokens(direct.vanilla)) == 8

    race_on_gpu = zerogpu.on_gpu(compute_race)
    assert race_on_gpu is not compute_race
    # As layout.py calls it on the model thread: a stop flag and a progress counter,
    # which stay behind (a GPU worker cannot share them).
    via = tiny_hub.submit(lambda: race_on_gpu(tiny_hub, req, threading.Event(), Progress())).result(timeout=120)
    assert tokens(via.vanilla) == tokens(direct.vanilla) and tokens(via.gumiho) == tokens(direct.gumiho)
    assert via.model == direct.model

    def walked(walk):
        return [tv.token for view in walk.views for tv in view.tokens], [s.parents for s in walk.steps]

    walk = zerogpu.on_gpu(compute_walk)(tiny_hub, req, threading.Event())
    assert walk.steps and walked(walk) == walked(compute_walk(tiny_hub, req, threading.Event()))


def test_a_jobs_message_and_a_zerogpu_refusal_reach_the_page(tiny_hub, zero_gpu, monkeypatch):
    loading = ModelHub(default_loader=lambda: None, warmup=False)  # not started: "still loading"
    req = parse_request(RaceForm("Hello there", 8, 0.0, 1.0, 0, 3, 2, 4))
    with pytest.raises(GumihoError, match="still loading"):
        zerogpu.on_gpu(compute_race)(loading, req, threading.Event())

    def refused(*args):
        raise gr.Error("You have used up your daily GPU quota.", title="ZeroGPU quota exceeded")
    monkeypatch.setattr(zerogpu, "gpu_call", refused)
    with pytest.raises(GumihoError, match="^ZeroGPU quota exceeded: You have used up"):
        zerogpu.on_gpu(compute_race)(tiny_hub, req, threading.Event())


def test_a_gpu_call_asks_for_time_by_the_size_of_the_request():
    long_request = parse_request(RaceForm("Hi", 512, 0.0, 1.0, 0, 3, 2, 4))
    shipped = ModelHub(default_loader=lambda: None, warmup=False)
    fixed = ModelHub(default_loader=lambda: None, warmup=False,
                     settings=AppSettings.from_environment({"GUMIHO_GPU_DURATION": "45"}))
    try:
        short = zerogpu.gpu_seconds("m", "f", shipped.gpu_key, parse_request(RaceForm("Hi", 16, 0.0, 1.0, 0, 3, 2, 4)))
        long = zerogpu.gpu_seconds("m", "f", shipped.gpu_key, long_request)
        assert 0 < short < long <= 120
        # The operator's fixed ask, read by the entry point into the hub's settings.
        assert zerogpu.gpu_seconds("m", "f", fixed.gpu_key, long_request) == 45
    finally:
        shipped.close()
        fixed.close()


# ----------------------------------------------------------------------------- `spaces` in its ZeroGPU mode

ZERO_GPU_START = r"""
import threading
import types
import torch
# A CPU build of torch lacks three CUDA hooks that `spaces` reads at import on ZeroGPU.
torch.version.cuda = torch.version.cuda or "12.8"
torch._C._cuda_init = getattr(torch._C, "_cuda_init", lambda: None)
def _is_in_bad_fork():
    return False
if not torch.cuda.is_available():
    torch.cuda._is_in_bad_fork = _is_in_bad_fork

import app
from app.core import zerogpu
from app.core import forms as inputs
from app.models.hub import ModelHub
from app.race.run import compute_race
from gumiho.loading import prepare_target
from transformers import LlamaConfig, LlamaForCausalLM

assert zerogpu.ZERO_GPU and torch.cuda.is_available() and zerogpu.model_device() == "cuda"
assert inputs.DEVICE_TREE.total_tokens == 63, inputs.DEVICE_TREE
assert zerogpu.gpu_call is not zerogpu.run_on_gpu_worker and hasattr(zerogpu.gpu_call, "zerogpu")  # registered with spaces
assert zerogpu.on_gpu(compute_race) is not compute_race
from app.web import layout
assert hasattr(layout.compute_race, "__wrapped__") and hasattr(layout.compute_walk, "__wrapped__")

threads = []
def load():
    threads.append(threading.current_thread())
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    return prepare_target(model.to(zerogpu.model_device()), None, "tiny")

def no_warm_up(*args):
    raise AssertionError("warmed up on the serving process")

hub = ModelHub(default_loader=load)
hub._warm = no_warm_up
hub.resolve = lambda *a, **k: types.SimpleNamespace(drafter=None)  # no drafter needed here
hub.start()
assert hub.state == "ready", (hub.state, hub.error)
assert threads == [threading.main_thread()]  # the thread whose torch `spaces` patched
assert hub.default.device.type == "cuda" and next(hub.default.model.parameters()).device.type == "cuda"
print("zerogpu start-up ok")
"""


def test_the_app_starts_as_zerogpu_wants_with_spaces_in_its_zerogpu_mode():
    """`spaces` with SPACES_ZERO_GPU set (its device API a closed local port, never
    called): the tree is the paper's, the GPU function is registered, and the
    default model loads on the main thread, before a launch, without a warm-up."""
    env = dict(os.environ, SPACES_ZERO_GPU="true", SPACES_ZERO_DEVICE_API_URL="http://127.0.0.1:9",
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", ZERO_GPU_START], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "zerogpu start-up ok" in out.stdout, out.stderr[-3000:]
