"""Native code never takes the process down: with a stand-in llama-cpp-python whose
decode dies by SIGILL or SIGSEGV (tests/fakes/dying_llama_cpp), the library's default
load falls back to the torch runtime with one logged line, asking for llama.cpp by
name is refused in words, and the process lives. Each case runs in a process of its
own, the stand-in first on its path, as a user's would."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "dying_llama_cpp"


# Each child is a script of its own, and its entry reads the library's paths (its cache
# folder, GUMIHO_CACHE) from its environment, as a command's main does.
ENTRY = "import os\nfrom gumiho.files import LibraryPaths, configure\nconfigure(LibraryPaths.from_environment(os.environ))\n"


def run(code: str, cache: Path, death: str = "SIGILL", fake: Path = FAKE, at: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]), GUMIHO_CACHE=str(cache),
               GUMIHO_TEST_NATIVE_DEATH=death, GUMIHO_TEST_NATIVE_DEATH_AT=at, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", ENTRY + code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


DEFAULT_LOAD = """
import json, gumiho
target = gumiho.load_target()
out = gumiho.generate(target, "Name one colour.", max_new_tokens=6)
print(json.dumps({"runtime": target.runtime.name, "note": target.runtime_note, "tokens": out.tokens,
                  "view_is_itself": target.torch_view() is target}))
"""


def test_the_default_load_falls_back_to_torch_with_one_line(tmp_path):
    done = run(DEFAULT_LOAD, tmp_path, "SIGILL")
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["runtime"] == "torch"
    assert "SIGILL" in answer["note"] and "illegal instruction" in answer["note"]
    assert len(answer["tokens"]) == 6 and answer["view_is_itself"]  # generated, on the float32 weights
    said = [line for line in done.stderr.splitlines() if "SIGILL" in line]
    assert len(said) == 1 and "llama.cpp" in said[0] and "torch runtime" in said[0]
    assert "Traceback" not in done.stderr


def test_a_kernel_that_aborts_only_in_a_tree_after_a_long_prompt_is_caught(tmp_path):
    """The trial runs the runtime's forwards, not one token: a library that decodes short
    prompts but aborts (a failed GGML_ASSERT) on a batch over two sequences once more than
    512 cells are cached is found out in the child, and the default load runs on torch."""
    done = run(DEFAULT_LOAD, tmp_path, "SIGABRT", at="tree")
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["runtime"] == "torch" and "SIGABRT" in answer["note"] and "abort" in answer["note"].lower()
    assert "GGML_ASSERT(stand-in) failed" in answer["note"]  # the assertion's own words, kept from the child
    assert len(answer["tokens"]) == 6


BY_NAME = """
import gumiho
from gumiho.runtimes.llamacpp import LlamaCppRuntime
from gumiho.loading import default_target_files
import os
for ask in (lambda: gumiho.load_target(runtime="llama.cpp"), lambda: gumiho.load_target(layout="q4_1"),
            lambda: LlamaCppRuntime(os.path.join(*default_target_files()), 512)):
    try:
        ask()
        print("LOADED")
    except gumiho.GumihoError as e:
        print("REFUSED", type(e).__name__, e)
print("ALIVE")
"""


@pytest.mark.parametrize("death, words", [("SIGILL", "illegal instruction"), ("SIGSEGV", "segmentation fault")])
def test_asked_by_name_it_is_refused_in_words(tmp_path, death, words):
    done = run(BY_NAME, tmp_path, death)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "ALIVE" and "LOADED" not in done.stdout
    refusals = [line for line in lines if line.startswith("REFUSED")]
    assert len(refusals) == 3
    for line in refusals:
        assert death in line and words in line.lower() and "runtime='torch'" in line
        assert "NativeRuntimeUnusable" in line
    assert "Traceback" not in done.stderr


KEYED = """
import json, os
from gumiho.runtimes.llamacpp import check_runtime, NativeRuntimeUnusable
from gumiho.loading import default_target_files
path = os.path.join(*default_target_files())
seen = []
for _ in range(2):
    try:
        check_runtime(path)
    except NativeRuntimeUnusable as e:
        seen.append([e.verdict.cached, e.verdict.signal, e.verdict.setting])
print(json.dumps(seen))
"""


def test_a_changed_build_is_tried_again(tmp_path):
    """The verdict is kept (the second use runs nothing), and a rebuilt library (another
    size or time of its native file) is tried again. With extra buffer types on by
    this CPU's rule, a death there is followed by a trial without them."""
    fake = tmp_path / "fake"
    shutil.copytree(FAKE, fake)
    first = json.loads(run(KEYED, tmp_path / "cache", fake=fake).stdout.strip().splitlines()[-1])
    assert [c for c, _, _ in first] == [False, True] and {s for _, s, _ in first} == {"SIGILL"}
    (fake / "llama_cpp" / "lib" / "libllama.so").write_text("another build\n")
    again = json.loads(run(KEYED, tmp_path / "cache", fake=fake).stdout.strip().splitlines()[-1])
    assert [c for c, _, _ in again] == [False, True]
    files = list((tmp_path / "cache" / "probes").iterdir())
    settings_tried = 2 if first[0][2] == {"extra_buffers": True} else 1  # the rule's setting, then without
    assert len(files) == 2 * settings_tried  # each build's verdicts kept beside the other's
