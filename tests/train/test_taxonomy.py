"""Human-written prompts from a taxonomy clone: history walk, formats, benchmark filter, bad input."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from gumiho.train.sources import taxonomy

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

WRITING = """\
created_by: someone
seed_examples:
- question: Write a limerick about a cat
    who sails.
  answer: There once was a cat...
- question: Summarise this note in one sentence.
  context: The meeting moved to Tuesday because the room was booked.
  answer: The meeting is on Tuesday.
task_description: limericks
"""
KNOWLEDGE = """\
version: 3
domain: astronomy
seed_examples:
- context: Mars is the fourth planet from the Sun.
  questions_and_answers:
  - question: Which planet is fourth from the Sun?
    answer: Mars.
"""
REMOVED = """\
seed_examples:
- question: Tell me how the quick brown fox jumps over the lazy dog today please.
  answer: It jumps.
- question: List three prime numbers.
  answer: 2, 3, 5
- question: "Write a  limerick about a cat who sails."
  answer: the same request as a writing question, so dropped
"""


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture()
def clone(tmp_path):
    repo = tmp_path / "taxonomy"
    (repo / "compositional_skills/writing/limerick").mkdir(parents=True)
    (repo / "knowledge/science/mars").mkdir(parents=True)
    (repo / "compositional_skills/old").mkdir(parents=True)
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "compositional_skills/writing/limerick/qna.yaml").write_text(WRITING)
    (repo / "knowledge/science/mars/qna.yaml").write_text(KNOWLEDGE)
    (repo / "compositional_skills/old/qna.yaml").write_text(REMOVED)
    (repo / "README.md").write_text("not a qna file\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "add")
    # A contribution removed later still counts: its last version is read from history.
    _git(repo, "rm", "-q", "compositional_skills/old/qna.yaml")
    _git(repo, "commit", "-q", "-m", "remove")
    return repo


def test_questions_come_from_every_version_format_and_deleted_files(clone, tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"question_id": 1, "turns": [
        "Explain how the quick brown fox jumps over the lazy dog today, in detail."]}) + "\n")
    records, counts = taxonomy.build(clone, [str(bench)], seed=0)
    prompts = sorted(r["prompt"] for r in records)
    assert prompts == sorted([
        "Write a limerick about a cat who sails.",          # folded YAML line joined once
        "Summarise this note in one sentence.\n\nThe meeting moved to Tuesday because the room was booked.",
        "Which planet is fourth from the Sun?\n\nMars is the fourth planet from the Sun.",
        "List three prime numbers.",                         # from the deleted file
    ])
    # The fox question shares an 8-word run with the benchmark prompt and is left out.
    assert counts == {"files": 3, "overlapping": 1, "too_long": 0}
    assert {r["source"] for r in records} == {"taxonomy:compositional_skills/writing",
                                              "taxonomy:knowledge/science", "taxonomy:compositional_skills/old"}
    assert [r["id"] for r in records] == [f"taxonomy-{i:05d}" for i in range(4)]
    assert records == taxonomy.build(clone, [str(bench)], seed=0)[0]  # seeded: same order again
    short, counts = taxonomy.build(clone, [str(bench)], seed=0, max_chars=40)
    assert counts["too_long"] == 3 and all(len(r["prompt"]) <= 40 for r in short) and len(short) == 2


def test_cli_writes_jsonl_and_refuses_bad_input(clone, tmp_path, capsys):
    out = tmp_path / "out" / "prompts.jsonl"
    assert taxonomy.main([str(clone), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 5
    assert taxonomy.main([str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "not a folder" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    assert taxonomy.main([str(plain), "--out", str(out)]) == 2
    assert "not a git clone" in capsys.readouterr().err
    assert taxonomy.main([str(clone), "--out", str(out), "--exclude", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read the prompts to exclude from" in capsys.readouterr().err


def test_malformed_yaml_gives_no_questions():
    assert taxonomy.questions_of("seed_examples: [unclosed") == []
    assert taxonomy.questions_of("- just a list") == []
    assert taxonomy.questions_of("seed_examples:\n- answer: no question here\n") == []
