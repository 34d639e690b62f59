"""The llama.cpp runtime's files (gumiho.runtimes.llamacpp_files): the shipped Q4_1 file as it
is (the default), and the Q4_0 rewrite written once from it by llama.cpp's own quantiser into the
user's cache, checked by hash, written again when damaged. Exactness on each file is
tests/runtimes/test_llamacpp_runtime.py's (its target fixture runs on both)."""
import json
import os

import pytest

from gumiho.errors import GumihoError
from gumiho.files import file_sha256 as sha256
from gumiho.runtimes.llamacpp_files import LAYOUTS, layout_file, pick_layout

pytest.importorskip("llama_cpp", reason="llama-cpp-python (requirements.txt) is not installed")


@pytest.fixture(scope="module")
def shipped():
    from gumiho.loading import default_target_files
    return os.path.join(*default_target_files())


def gguf_types(path):
    import gguf

    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def test_the_rewrite_is_written_once_into_the_cache_and_checked_by_hash(shipped, tmp_path, library_paths):
    library_paths(cache_root=tmp_path)
    path = layout_file(shipped, LAYOUTS["q4_0"])
    assert path.startswith(str(tmp_path)) and path != shipped
    record = json.loads(open(path + ".json").read())
    assert record["sha256"] == sha256(path) and record["source_sha256"] == sha256(shipped)
    types = gguf_types(path)
    # The layers' matrices are Q4_0; the embedding (also the LM head) and the norms are kept.
    assert types["blk.0.attn_q.weight"] == "Q4_0" and types["blk.29.ffn_down.weight"] == "Q4_0"
    assert types["token_embd.weight"] == gguf_types(shipped)["token_embd.weight"] == "Q8_0"
    stamp = os.stat(path).st_mtime_ns
    assert layout_file(shipped, LAYOUTS["q4_0"]) == path and os.stat(path).st_mtime_ns == stamp  # not written again
    # A damaged file (a byte changed) no longer matches its hash and is written again, whole.
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert layout_file(shipped, LAYOUTS["q4_0"]) == path and sha256(path) == record["sha256"]
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.endswith((".part", ".tmp"))]


def test_the_shipped_layout_is_the_wheels_file_itself(shipped, tmp_path, library_paths):
    library_paths(cache_root=tmp_path)
    assert layout_file(shipped, LAYOUTS["q4_1"]) == shipped
    assert not os.listdir(tmp_path)


def test_layouts_are_named_in_words_and_bad_names_refused(monkeypatch):
    assert pick_layout(None).key == "q4_1" and pick_layout("shipped").key == "q4_1"
    assert pick_layout(" Q4_0 ").key == "q4_0" and pick_layout("fast").key == "q4_0"
    monkeypatch.setenv("GUMIHO_LAYOUT", "q4_0")
    assert pick_layout(None).key == "q4_1"  # the library reads no environment: the app and the bench command do
    from gumiho.bench.cli import build_parser

    assert build_parser().parse_args(["--prompts", "p.jsonl"]).layout == "q4_0"
    for bad in ("q3_k", "../etc/passwd", 4):
        with pytest.raises(GumihoError, match="layout"):
            pick_layout(bad)
    from gumiho.loading import load_target

    with pytest.raises(GumihoError, match="layout= chooses the llama.cpp runtime's 4-bit file"):
        load_target(runtime="torch", layout="q4_0")


@pytest.mark.slow


def test_the_runtime_runs_the_file_it_names(tmp_path, library_paths):
    from gumiho.loading import load_target

    library_paths(cache_root=tmp_path)
    default = load_target(runtime="llama.cpp")
    assert default.runtime.weights == LAYOUTS["q4_1"].label and default.runtime.path.endswith("Q4_1.gguf")
    fast = load_target(runtime="llama.cpp", layout="q4_0")
    assert fast.runtime.weights == LAYOUTS["q4_0"].label and fast.runtime.path.startswith(str(tmp_path))
