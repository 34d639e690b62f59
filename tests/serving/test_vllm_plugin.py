"""vLLM serves the gumiho kind: the plugin plugins/vllm-gumiho, the export `python -m
gumiho.export gumiho`, and the command `python -m gumiho.serve`, checked against this
project's engine drafting the same chain (the drafter's top token at every position,
k = 4 deep: 2 serial positions, then 2 MLP heads), greedy, on held-out MT-Bench prompts.

* `python -m gumiho.serve --drafter assets/drafters/smollm2-135m-gumiho` (one server for
  the module) answers completion requests with this engine's greedy tokens, and its
  /metrics counters (accepted tokens per draft and per position) are this engine's
  within ACCEPT_TOLERANCE; it answers an OpenAI chat request with the engine's text.
* The same export misread in two ways vLLM loads without complaint (the MLP heads in the
  wrong order; the two serial inputs the heads read exchanged) keeps the tokens but
  falls outside the tolerance: the comparison above can fail.
* A checkpoint in the official amd/Gumiho-* layout (pytorch_model.bin, `mlp.*` heads,
  layer 0 without an input norm, the whole vocabulary) goes through the same export and
  plugin, with the engine's acceptance.
* Refusals in words: another kind (export and serve), a k beyond the drafter's heads
  (serve, and vLLM itself through the plugin), a vLLM version the plugin was not tested
  with, a machine where vLLM cannot be built; Ctrl-C stops the server.

vLLM's CPU build runs in its own environment (gumiho.serving.vllm_env; the plugin is
installed there); it gets both cores. Skipped only when the environment is not built and
the package registry cannot be reached to build it.

Cost on the 2-core machine, with the vLLM environment built: 407 s for the module's 13
tests (measured with other work on the machine; 361 s for 12 of them in a quieter
moment): five vLLM starts (the server, 85 s with its
exports; three LLM runs, 40-75 s each, eager; one start that stops at the refused k, 26 s),
this engine's chains and vanilla runs, and exports of the target and the drafters (mostly
loading the target, ~15 s each)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from gumiho import generate, load_target
from gumiho.bench.prompt_sets import load_prompts, prompt_ids
from gumiho.export.__main__ import main as export_main
from gumiho.loading import shipped_drafter_path
from gumiho.serving.vllm_env import run_vllm
from vllm_fixtures import engine_chain

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS_FILE = os.path.join(ROOT, "benchmarks", "prompts", "mt_bench.jsonl")
N_PROMPTS = 4
MAX_NEW = 64
K = 4  # tokens per draft: positions 1-2 serial, 3-4 from the first two MLP heads
CHAIN = dict(total_tokens=K, depth=K, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=False,
             full_tree_tokens=0, cost_aware=False)
# How far vLLM's accepted tokens per draft, and per draft position (see rates), may sit
# from this engine's for the same drafter on the same prompts. Measured here with the
# shipped drafter: the two engines' counters were equal (157 drafts, 99 accepted, 64, 27,
# 7 and 1 at positions 1-4); the room is for a draft the two cut differently at the
# length limit.
ACCEPT_TOLERANCE = 0.05


# ----------------------------------------------------------------------------- shared fixtures


@pytest.fixture(scope="module")
def target():
    return load_target(None, device="cpu", dtype="float32", runtime="torch")


@pytest.fixture(scope="module")
def prompts(target):
    chosen = load_prompts(PROMPTS_FILE, N_PROMPTS)
    return [p.text for p in chosen], [prompt_ids(target, p) for p in chosen]


@pytest.fixture(scope="module")
def engine_vanilla(target, prompts):
    return [generate(target, prompt_ids=ids, max_new_tokens=MAX_NEW).tokens for ids in prompts[1]]


def chain_counts(target, drafter_src, ids_list):
    """This engine drafting vLLM's chain: its tokens, and its acceptance as vLLM counts it
    (drafts, accepted tokens, accepted tokens per position)."""
    tokens, accepted = engine_chain(target, drafter_src, ids_list, MAX_NEW, CHAIN)
    return tokens, {"drafts": len(accepted), "accepted": sum(accepted),
                    "per_position": [sum(a > i for a in accepted) for i in range(K)]}


# Per-position acceptance is compared among the drafts that reached the position (the
# ones whose earlier positions were all accepted), at the positions this engine's drafts
# reached at least this often: there one draft moves the rate by at most 1/20 = 0.05.
MIN_REACHED = 20


def rates(counts: dict, positions=None) -> list[float]:
    """Accepted tokens per draft, the share of drafts accepted at each position, and at
    ``positions`` (0-based) the share accepted among the drafts that reached it."""
    d, per = counts["drafts"], counts["per_position"]
    reached = [d] + list(per[:-1])
    out = [counts["accepted"] / d] + [n / d for n in per]
    return out + [per[i] / reached[i] if reached[i] else 0.0 for i in (positions or [])]


def compared_positions(engine: dict) -> list[int]:
    reached = [engine["drafts"]] + list(engine["per_position"][:-1])
    return [i for i, n in enumerate(reached) if n >= MIN_REACHED]


def deviation(ours: dict, engine: dict) -> float:
    """The largest difference between the two's rates (see rates), positions chosen from the engine's."""
    positions = compared_positions(engine)
    return max(abs(a - b) for a, b in zip(rates(ours, positions), rates(engine, positions)))


def describe(counts: dict, engine: dict) -> str:
    return f"{counts}, rates {[round(r, 3) for r in rates(counts, compared_positions(engine))]}"


def vllm_counts(spec: dict) -> dict:
    return {"drafts": spec["vllm:spec_decode_num_drafts"], "accepted": spec["vllm:spec_decode_num_accepted_tokens"],
            "per_position": spec["vllm:spec_decode_num_accepted_tokens_per_pos"]}


@pytest.fixture(scope="module")
def shipped_chain(target, prompts):
    return chain_counts(target, shipped_drafter_path("gumiho"), prompts[1])


@pytest.fixture(scope="module")
def shipped_export(tmp_path_factory):
    """The shipped gumiho drafter as the user exports it."""
    folder = tmp_path_factory.mktemp("vllm-gumiho") / "gumiho"
    assert export_main(["gumiho", "shipped", str(folder)]) == 0
    return folder


# ----------------------------------------------------------------------------- the serve command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, body=None, timeout: float = 600):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read().decode()
    return raw if body is None else json.loads(raw)


def served_counters(url: str) -> dict:
    """The spec-decode counters of vLLM's Prometheus page."""
    counts = {"drafts": 0, "accepted": 0, "per_position": [0] * K}
    for line in _request(url + "/metrics").splitlines():
        if line.startswith("vllm:spec_decode_num_drafts_total"):
            counts["drafts"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:spec_decode_num_accepted_tokens_total"):
            counts["accepted"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total"):
            position = int(line.split('position="')[1].split('"')[0])
            counts["per_position"][position] += float(line.rsplit(" ", 1)[1])
    return counts


@pytest.fixture(scope="module")
def server(vllm_python, tmp_path_factory):
    """`python -m gumiho.serve` with the shipped gumiho drafter, as the README says to run it."""
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "vllm.log"
    command = [sys.executable, "-m", "gumiho.serve", "--drafter", os.path.join(ROOT, "assets", "drafters",
               "smollm2-135m-gumiho"), "--num-speculative-tokens", str(K), "--port", str(port), "--log", str(log)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    url, said = None, []
    deadline = time.monotonic() + 900
    for line in process.stdout:  # it prints where it listens once vLLM answers
        said.append(line)
        if "serving " in line and " at http" in line:
            url = line.split(" at ", 1)[1].split("/v1", 1)[0]
            break
        if time.monotonic() > deadline:
            break
    if url is None:
        process.kill()
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        pytest.fail("gumiho.serve did not start:\n" + "".join(said)[-3000:] + tail)
    yield url, process, said
    if process.poll() is None:  # the Ctrl-C test did not run
        process.send_signal(2)
        process.wait(timeout=120)


def test_the_served_gumiho_drafter_keeps_the_engines_tokens_and_acceptance(server, prompts, engine_vanilla,
                                                                          shipped_chain):
    """Completion requests (the prompts' token ids, greedy) come back with this engine's
    vanilla tokens; vLLM's /metrics counters give this engine's acceptance drafting the
    same chain, per draft and per position, within the tolerance."""
    url = server[0]
    before = served_counters(url)
    response = _request(url + "/v1/completions", {"model": "SmolLM2-135M-Instruct", "prompt": prompts[1],
                                                  "max_tokens": MAX_NEW, "temperature": 0, "return_token_ids": True})
    choices = sorted(response["choices"], key=lambda c: c["index"])
    after = served_counters(url)
    served = {"drafts": after["drafts"] - before["drafts"], "accepted": after["accepted"] - before["accepted"],
              "per_position": [a - b for a, b in zip(after["per_position"], before["per_position"])]}
    chain_tokens, engine = shipped_chain
    print(f"engine {describe(engine, engine)}; vLLM {describe(served, engine)}")
    assert chain_tokens == engine_vanilla  # the engine itself is lossless with this chain
    assert [c["token_ids"] for c in choices] == engine_vanilla
    assert rates(engine)[0] > 0.5  # a trained drafter: the comparison is not between two zeros
    assert 2 in compared_positions(engine)  # and its first MLP head is compared too
    assert deviation(served, engine) <= ACCEPT_TOLERANCE


def test_the_served_model_answers_an_openai_chat_request(server, prompts, target, engine_vanilla):
    url = server[0]
    response = _request(url + "/v1/chat/completions", {
        "model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": prompts[0][0]}],
        "max_tokens": MAX_NEW, "temperature": 0})
    answer = response["choices"][0]["message"]["content"]
    assert answer == target.tokenizer.decode(engine_vanilla[0], skip_special_tokens=True)


def test_ctrl_c_stops_the_server_and_its_workers(server):
    """Run last of the server's tests: Ctrl-C (SIGINT) stops vLLM, the command exits 0
    saying so, and the port no longer answers."""
    url, process, said = server
    assert "Ctrl-C stops it" in "".join(said)
    process.send_signal(2)
    rest, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and "stopped." in rest
    with pytest.raises(OSError):
        _request(url + "/health", timeout=5)


# ----------------------------------------------------------------------------- misread exports


def _reverse_heads(state, config):
    """The MLP heads read in the wrong order (head j's weights under head n-1-j)."""
    n = config["gumiho"]["mlp_heads"]
    moved = {}
    for name in [k for k in state if k.startswith("heads.")]:
        j, rest = name[len("heads."):].split(".", 1)
        moved[f"heads.{n - 1 - int(j)}.{rest}"] = state.pop(name)
    state.update(moved)


def _exchange_serial_inputs(state, config):
    """The heads reading the two serial inputs exchanged (newer first, not older first)."""
    h = config["hidden_size"]
    for name in [k for k in state if k.startswith("heads.") and k.endswith(".0.linear.weight")]:
        w = state[name]
        state[name] = torch.cat([w[:, h:], w[:, :h]], dim=1).contiguous()


@pytest.mark.parametrize("misread", [_reverse_heads, _exchange_serial_inputs])
def test_a_misread_export_falls_outside_the_tolerance(vllm_python, exported_default, shipped_export, prompts,
                                                      engine_vanilla, shipped_chain, tmp_path, misread):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "misread"
    shutil.copytree(shipped_export, bad)
    state = load_file(str(bad / "model.safetensors"))
    misread(state, json.loads((bad / "config.json").read_text()))
    save_file(state, str(bad / "model.safetensors"))
    spec = {"method": "eagle", "model": str(bad), "num_speculative_tokens": K}
    result = run_vllm(exported_default, prompts[1], MAX_NEW, speculative_config=spec, python=vllm_python, one_process=True)
    served = vllm_counts(result["spec_decode"])
    print(f"{misread.__name__}: engine {describe(shipped_chain[1], shipped_chain[1])}; "
          f"vLLM {describe(served, shipped_chain[1])}")
    assert result["tokens"] == engine_vanilla  # lossless whatever the drafter
    assert deviation(served, shipped_chain[1]) > ACCEPT_TOLERANCE


# ----------------------------------------------------------------------------- the official layout


def official_checkpoint(folder):
    """A checkpoint built to the official amd/Gumiho-* names and shapes (gumiho.formats.official)
    for the default target, from the shipped drafter's weights: the heads as mlp.*, no
    input norm on layer 0 (the official drafters have none), no draft vocabulary (they
    propose from the whole vocabulary), an embed_tokens of the target's shape."""
    from safetensors.torch import load_file

    shipped = load_file(os.path.join(shipped_drafter_path("gumiho"), "model.safetensors"))
    state = {}
    for name, tensor in shipped.items():
        if name in ("draft_vocab_ids", "layers.0.input_layernorm.weight"):
            continue
        state[("mlp." + name[len("heads."):]) if name.startswith("heads.") else name] = tensor
    state["embed_tokens.weight"] = torch.zeros(49152, 576)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def test_an_official_checkpoint_goes_through_the_same_export_and_plugin(vllm_python, exported_default, target,
                                                                        prompts, engine_vanilla, tmp_path):
    source = official_checkpoint(tmp_path / "official")
    out = tmp_path / "official-export"
    assert export_main(["gumiho", str(source), str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["EagleGumihoForCausalLM"]
    assert config["gumiho"]["first_layer_input_norm"] is False and config["gumiho"]["draft_vocab_size"] == 49152
    tokens, engine = chain_counts(target, source, prompts[1])
    spec = {"method": "eagle", "model": str(out), "num_speculative_tokens": K}
    result = run_vllm(exported_default, prompts[1], MAX_NEW, speculative_config=spec, python=vllm_python, one_process=True)
    served = vllm_counts(result["spec_decode"])
    print(f"official layout: engine {describe(engine, engine)}; vLLM {describe(served, engine)}")
    assert tokens == engine_vanilla and result["tokens"] == engine_vanilla
    assert rates(engine)[0] > 0.3
    assert deviation(served, engine) <= ACCEPT_TOLERANCE


# ----------------------------------------------------------------------------- refusals in words


def test_the_export_refuses_a_kind_the_plugin_cannot_serve(tmp_path, capsys):
    assert export_main(["gumiho", shipped_drafter_path("eagle3"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "'eagle3' kind" in err and "gumiho.export eagle3" in err and "Traceback" not in err


def test_vllm_refuses_more_tokens_than_the_drafter_has_heads_for(vllm_python, exported_default, shipped_export,
                                                                 prompts):
    spec = {"method": "eagle", "model": str(shipped_export), "num_speculative_tokens": 8}
    from gumiho.serving.vllm_env import VllmEnvError

    with pytest.raises(VllmEnvError, match="more than this Gumiho drafter drafts"):
        run_vllm(exported_default, prompts[1][:1], 4, speculative_config=spec, python=vllm_python, one_process=True)


def _serve(*argv, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "gumiho.serve", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


def test_the_serve_command_refuses_more_tokens_than_the_drafter_has_heads_for(vllm_python):
    done = _serve("--drafter", os.path.join(ROOT, "assets", "drafters", "smollm2-135m-gumiho"),
                  "--num-speculative-tokens", "9", "--port", str(_free_port()))
    assert done.returncode == 2
    assert "at most 7" in done.stderr and "Traceback" not in done.stderr


def test_the_serve_command_refuses_a_kind_vllm_cannot_serve(vllm_python):
    done = _serve("--drafter", os.path.join(ROOT, "assets", "drafters", "smollm2-135m-serial"),
                  "--port", str(_free_port()))
    assert done.returncode == 2
    assert "'serial' kind, which vLLM cannot serve" in done.stderr and "Traceback" not in done.stderr


def test_the_serve_command_says_in_one_message_when_vllm_cannot_be_built(tmp_path):
    """No package index to build vLLM from (pip told to use none): one message, no traceback."""
    env = dict(os.environ, GUMIHO_VLLM_ENV=str(tmp_path / "env"), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path))
    done = _serve("--drafter", "none", "--port", str(_free_port()), env=env)
    assert done.returncode == 2
    assert "vLLM cannot be built on this machine" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


PLUGIN_CHECK = """
import json, vllm, vllm_gumiho
from vllm.v1.spec_decode.eagle import EagleProposer
vllm_gumiho.register()
from vllm.v1.worker import gpu_model_runner

swapped = gpu_model_runner.EagleProposer
vllm.__version__ = "0.99.0"
try:
    vllm_gumiho.check_vllm_version()
    refusal = None
except vllm_gumiho.GumihoPluginError as e:
    refusal = str(e)
print(json.dumps({"swapped": swapped is not EagleProposer and issubclass(swapped, EagleProposer),
                  "name": swapped.__name__, "refusal": refusal}))
"""


def test_the_plugin_swaps_in_its_proposer_and_refuses_an_untested_vllm_in_words(vllm_python):
    """In the vLLM environment: the entry point's register() puts a subclass of vLLM's
    EagleProposer where the model runner looks it up, and a vLLM version the plugin was
    not tested with is refused with a sentence that names both versions."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_GUMIHO_ALLOW_UNTESTED")}
    done = subprocess.run([str(vllm_python), "-I", "-c", PLUGIN_CHECK], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["swapped"] and result["name"] == "GumihoProposer"
    assert "tested with vLLM 0.32.0" in result["refusal"] and "0.99.0" in result["refusal"]


def test_the_serving_section_compares_each_row_with_vanilla_at_its_own_batch_size(tmp_path):
    """BENCHMARKS.md's serving section (gumiho.bench.report_sections.serving_section) from an
    engines record: ratios to vLLM vanilla at the same batch, and a verdict per batch."""
    from gumiho.bench.report_sections import serving_section

    def row(method, batch, tps, **extra):
        return {"engine": "vLLM", "method": method, "batch": batch, "tokens_per_s": tps,
                "identical_to_vanilla": True, **extra}

    rows = [row("vanilla", 1, 10.0), row("vanilla", 8, 40.0), row("eagle3", 1, 11.0, accepted_per_draft=0.2),
            row("gumiho", 1, 12.5, accepted_per_draft=0.6, accepted_per_position=[0.4, 0.2]),
            row("gumiho", 8, 30.0, accepted_per_draft=0.6)]
    path = tmp_path / "serving.json"
    path.write_text(json.dumps({"prompts": 2, "prompts_file": "x.jsonl", "max_new_tokens": 8, "rows": rows,
                                "settings": {"vllm": "v"}, "note": "Shared machine."}))
    text = "\n".join(serving_section(path))
    assert "| gumiho | 1 | 12.5 | 1.25x | yes | 0.60 | 0.40, 0.20 |" in text
    assert "| gumiho | 8 | 30.0 | 0.75x |" in text
    assert "at batch 1 the Gumiho drafter runs at 1.25x vanilla (ahead) and 1.14x the eagle3 drafter (ahead)" in text
    assert "at batch 8 the Gumiho drafter runs at 0.75x vanilla (not ahead)" in text
    assert "Shared machine." in text
