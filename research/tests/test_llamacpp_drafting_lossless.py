"""research/llamacpp_drafting_lossless.py against the suite's stand-in for llama-server
(tests/fakes/fake_llama_server.py): both servers started as gumiho.serve starts them,
every prompt asked of both, identical texts counted and the first differing token found."""
import json
import sys
from pathlib import Path

import llamacpp_drafting_lossless as lossless
import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
PROMPTS = [[5, 11, 12], [6, 1], [7, 7, 7], [9]]


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    binary.chmod(0o755)
    monkeypatch.setenv("GUMIHO_TEST_SERVER_DIES", "never")
    monkeypatch.setenv("GUMIHO_TEST_SERVER_ARGS", str(tmp_path / "args.jsonl"))
    (tmp_path / "target.gguf").write_bytes(b"GGUF")
    (tmp_path / "drafter.gguf").write_bytes(b"GGUF")
    return binary, tmp_path


def run(stand_in, repack=False):
    binary, folder = stand_in
    return lossless.measure(PROMPTS, 16, binary, str(folder / "target.gguf"), str(folder / "drafter.gguf"),
                            threads=2, repack=repack, work=folder)


def test_texts_that_part_are_counted_and_placed(stand_in, monkeypatch):
    monkeypatch.setenv("GUMIHO_TEST_DRAFT_DIFFERS", json.dumps({"7": 9}))  # prompt 2 parts at new token 9
    record = run(stand_in)
    assert (record["prompts"], record["identical"]) == (4, 3)
    rows = record["per_prompt"]
    assert [r["first_difference"] for r in rows] == [None, None, 9, None]
    plain = (21 + 7 * 9) % 1000
    assert rows[2]["there"] == [plain, plain + 1]
    assert record["drafted"] == 3 * 16 * 4 and record["accepted"] == 16 * 4
    lines = lossless.summary(record)
    assert "3 of 4 texts identical (greedy, 16 new tokens, 2 threads, weight repacking off" in lines[0]
    assert lines[1] == f"prompt 2: first difference at new token 9 (plain wrote {plain}, drafted wrote {plain + 1})."
    # The servers were started as gumiho.serve starts them: one with the drafter, one without.
    starts = [json.loads(line)["args"] for line in (stand_in[1] / "args.jsonl").read_text().splitlines()]
    drafted = [a for a in starts if "-md" in a]
    assert len(starts) == 2 and len(drafted) == 1
    assert drafted[0][drafted[0].index("--spec-type") + 1] == "draft-eagle3"
    assert drafted[0][drafted[0].index("--spec-draft-n-max") + 1] == str(lossless.DEFAULT_K)
    assert all("--no-repack" in a for a in starts)


def test_identical_texts_are_all_counted(stand_in, monkeypatch):
    monkeypatch.delenv("GUMIHO_TEST_DRAFT_DIFFERS", raising=False)
    record = run(stand_in, repack=True)
    assert (record["prompts"], record["identical"]) == (4, 4)
    assert len(lossless.summary(record)) == 2  # the count and the acceptance: no text parted


def test_first_difference():
    assert lossless.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert lossless.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert lossless.first_difference([1, 2], [1, 2, 3]) == 2  # one stopped early
    record = lossless.compare([[1, 2], [4]], [[1, 2, 3], [4]])
    assert record["identical"] == 1 and record["per_prompt"][0]["there"] == [None, 3]
