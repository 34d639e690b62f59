"""Prompts from Self-Instruct seed tasks and Natural Instructions v1: reading a bare mirror, a clone or a
plain folder, prompt layout, per-task draws, benchmark-source tasks, the 8-word filter, repeats, long
prompts, the seed, bad folders; and the committed corpus against the benchmark prompt sets."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gumiho.errors import GumihoError
from gumiho.files.prompt_files import read_prompts
from gumiho.train.sources import instructions
from gumiho.train.sources.taxonomy import shingles

ROOT = Path(__file__).resolve().parents[2]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

def _seed(n: int, name: str, instruction: str, text: str = "") -> dict:
    return {"id": f"seed_task_{n}", "name": name, "instruction": instruction,
            "instances": [{"input": text, "output": "an answer"}], "is_classification": False}


SEEDS = [
    _seed(0, "breakfast_ideas", "Suggest a breakfast without eggs."),  # an empty input stands alone
    _seed(1, "antonym_relation", "What is the relation between the given pairs?", "Night : Day :: Right : Left  "),
    # Points at a text it does not hold: no request without an input.
    _seed(2, "summarize_text", "Summarize the following text in one line."),
    _seed(3, "long_story", "Give this story a title.", "Once upon a time. " * 120),
    _seed(4, "fox_question", "Tell me how the quick brown fox jumps over the lazy dog today please."),
    # The same request as seed_task_1 but for spacing and case: a repeat.
    _seed(5, "antonym_relation_again", "What is the relation between  the given pairs?", "night : day :: right : left"),
    _seed(6, "gsm8k_word_problem", "Solve the problem.", "Tom has 3 apples and eats one."),
    # A news article with the CNN dateline: built on CNN/DailyMail whatever the task's name.
    _seed(7, "news_summary", "Summarize the news in a sentence.", "LONDON, England (CNN) -- Rain fell."),
]
NOT_READ = "This request lives outside the seed tasks and must never be read."


def _ni_task(definition, prompt, inputs, **extra):
    return {"Title": "t", "Prompt": prompt, "Definition": definition, "Things to Avoid": "-",
            "Emphasis & Caution": "-", "Examples": {"Positive Examples": [], "Negative Examples": []},
            "Instances": [{"input": i, "output": ["x"]} for i in inputs], **extra}


QUOREF_INPUTS = [f"Passage: Ann met Bob on day {i}.  \nQuestion: Who met Bob on day {i}?" for i in range(30)]
QUOREF_INPUTS[3] = QUOREF_INPUTS[17] = QUOREF_INPUTS[25] = "  "
NI_FILES = {
    "Dataset_Jsons/subtask001_quoref_question_generation.json": _ni_task(
        "Write a question about a person named in the passage.", "Ask a question.", QUOREF_INPUTS),
    "Dataset_Jsons/subtask010_mctaco_answer_generation_event_ordering.json": _ni_task(
        "Answer the question about the order of events.", "-", [f"Sentence: Step {i} came next." for i in range(5)]),
    "Dataset_Jsons/subtask090_cnn_dailymail_summarization.json": _ni_task(
        "Summarize the article.", "Summarize.", ["Article: a story."]),
    "Dataset_Jsons/subtask091_math_word_problems.json": _ni_task(
        "Solve the word problem.", "Solve.", ["Ann has two pens."], Source=["gsm8k"]),
}


def _encoded(definition, prompt, text):
    return f"Definition: {definition}\nPrompt: {prompt}\ninput: {text}\noutput:"


PREDICTIONS = {
    "predictions/gpt3_outputs/subtask039_qasc_find_overlapping_words@_Definition_Prompt@0_3.json": {
        "predictions": [{"index": 60 + i, "output": " x", "input": _encoded(
            "Find a word the two sentences share.", "Write down an overlapping word.",
            f"Sentence1: Cats sleep {i} hours. \nSentence2: Dogs sleep too.")} for i in range(3)]},
    # Another encoding of the same instances: not read.
    "predictions/gpt3_outputs/subtask039_qasc_find_overlapping_words@_Prompt@0_3.json": {
        "predictions": [{"index": 60, "output": " x", "input": "Prompt: Write.\ninput: " + NOT_READ + "\noutput:"}]},
    "src/evaluation.py": "print('not a task')\n",
}


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _repo(root: Path, files: dict) -> Path:
    """A git repository with one commit holding files (dicts and lists are written as JSON)."""
    root.mkdir(parents=True)
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "add")
    return root


@pytest.fixture()
def si(tmp_path):
    return _repo(tmp_path / "self-instruct", {
        "data/seed_tasks.jsonl": "".join(json.dumps(s) + "\n" for s in SEEDS),
        "human_eval/user_oriented_instructions.jsonl": json.dumps({"instruction": NOT_READ}) + "\n",
        "data/finetuning/superni_50k/train.jsonl": json.dumps({"prompt": NOT_READ}) + "\n",
    })


@pytest.fixture()
def ni(tmp_path):
    return _repo(tmp_path / "ni-v1", {**NI_FILES, **PREDICTIONS})


@pytest.fixture()
def bench(tmp_path):
    path = tmp_path / "bench.jsonl"
    # Shares "how the quick brown fox jumps over the lazy dog" (8+ words) with seed_task_4.
    path.write_text(json.dumps({"question_id": 1, "turns": [
        "Explain how the quick brown fox jumps over the lazy dog, in detail."]}) + "\n")
    return path


def _prompts(records, prefix=""):
    return sorted(r["prompt"] for r in records if r["source"].startswith(prefix))


@needs_git
def test_self_instruct_seed_tasks_only(si, bench):
    records, summary = instructions.build(self_instruct=si, exclude=[str(bench)])
    assert _prompts(records) == sorted([
        "Suggest a breakfast without eggs.",  # an empty input stands alone
        "What is the relation between the given pairs?\n\nNight : Day :: Right : Left",
    ])
    assert {r["source"] for r in records} == {"self-instruct/breakfast_ideas", "self-instruct/antonym_relation"}
    assert all(set(r) == {"id", "source", "prompt"} for r in records)
    assert summary["dropped"] == {"empty input": 1, "too long": 1, "overlap": 1, "duplicate": 1}
    assert summary["excluded_tasks"] == [
        {"task": "self-instruct/gsm8k_word_problem", "reason": "built on GSM8K ('gsm8k_word_problem')"},
        {"task": "self-instruct/news_summary", "reason": "built on CNN/DailyMail (an input holds '(CNN)')"}]
    s = summary["sources"]["self-instruct"]
    head = _git(si, "rev-parse", "HEAD").strip()
    assert (s["read_from"], s["commit"], s["tasks"], s["prompts"]) == ("work tree", head, 8, 2)
    assert not any(NOT_READ in r["prompt"] for r in records)


@needs_git
def test_bare_mirror_clone_and_plain_folder_read_the_same(si, tmp_path):
    bare = tmp_path / "mirror.git"
    _git(tmp_path, "clone", "-q", "--bare", str(si), str(bare))
    plain = tmp_path / "plain"
    shutil.copytree(si, plain, ignore=shutil.ignore_patterns(".git"))
    runs = {str(p): instructions.build(self_instruct=p) for p in (si, bare, plain)}
    assert len({json.dumps(records) for records, _ in runs.values()}) == 1
    kinds = {p: (s["sources"]["self-instruct"]["read_from"], s["sources"]["self-instruct"]["commit"])
             for p, (_, s) in runs.items()}
    head = _git(si, "rev-parse", "HEAD").strip()
    assert kinds == {str(si): ("work tree", head), str(bare): ("git", head), str(plain): ("folder", None)}
    # A clone is read from disk, changes included (and flagged); the bare mirror keeps its commit.
    (si / "data/seed_tasks.jsonl").write_text(json.dumps(SEEDS[0]) + "\n")
    records, summary = instructions.build(self_instruct=si)
    assert len(records) == 1 and summary["sources"]["self-instruct"]["modified"]
    assert len(instructions.build(self_instruct=bare)[0]) == 3


@needs_git
def test_ni_task_files_per_task_cap_layout_and_benchmark_tasks(ni):
    records, summary = instructions.build(natural_instructions_v1=ni, per_task=10)
    by_task = {}
    for r in records:
        by_task.setdefault(r["source"], []).append(r["prompt"])
    assert {k: len(v) for k, v in by_task.items()} == {
        "natural-instructions-v1/subtask001_quoref_question_generation": 10,
        "natural-instructions-v1/subtask010_mctaco_answer_generation_event_ordering": 5}
    quoref = by_task["natural-instructions-v1/subtask001_quoref_question_generation"]
    every = {f"Write a question about a person named in the passage.\n\nAsk a question.\n\n"
             f"Passage: Ann met Bob on day {i}.\nQuestion: Who met Bob on day {i}?" for i in range(30)}
    assert len(set(quoref)) == 10 and set(quoref) <= every
    assert not any(instructions.NI_V1 in p or "\n\n  " in p for p in quoref)
    assert not any(NOT_READ in r["prompt"] for r in records)  # task files come before predictions
    # A "-" prompt is no text; the definition stands alone before the input.
    assert "Answer the question about the order of events.\n\nSentence: Step 0 came next." in by_task[
        "natural-instructions-v1/subtask010_mctaco_answer_generation_event_ordering"]
    assert summary["excluded_tasks"] == [
        {"task": "natural-instructions-v1/subtask090_cnn_dailymail_summarization",
         "reason": "built on CNN/DailyMail ('subtask090_cnn_dailymail_summarization')"},
        {"task": "natural-instructions-v1/subtask091_math_word_problems", "reason": "built on GSM8K ('gsm8k')"}]
    s = summary["sources"]["natural-instructions-v1"]
    assert (s["layout"], s["tasks"], s["tasks_with_prompts"]) == ("task files", 4, 2)
    # With no cap every instance with an input is kept; the three blank ones are not.
    records, summary = instructions.build(natural_instructions_v1=ni, per_task=None)
    assert sum(r["source"].endswith("quoref_question_generation") for r in records) == 27
    assert summary["dropped"]["empty input"] == 3


@needs_git
def test_ni_predictions_layout_when_there_are_no_task_files(tmp_path):
    repo = _repo(tmp_path / "ni-v1", PREDICTIONS)
    records, summary = instructions.build(natural_instructions_v1=repo)
    assert _prompts(records) == [
        f"Find a word the two sentences share.\n\nWrite down an overlapping word.\n\n"
        f"Sentence1: Cats sleep {i} hours.\nSentence2: Dogs sleep too." for i in range(3)]
    assert {r["source"] for r in records} == {"natural-instructions-v1/subtask039_qasc_find_overlapping_words"}
    assert summary["sources"]["natural-instructions-v1"]["layout"] == "predictions"


@needs_git
def test_eight_word_runs_exclude_and_seven_do_not(si, tmp_path):
    seven = tmp_path / "seven.jsonl"
    seven.write_text(json.dumps({"prompt": "so: the quick brown fox jumps over the cat"}) + "\n")
    kept = _prompts(instructions.build(self_instruct=si, exclude=[str(seven)])[0])
    assert "Tell me how the quick brown fox jumps over the lazy dog today please." in kept
    eight = tmp_path / "eight.txt"
    eight.write_text("Relation between the given pairs?\nnight : DAY :: right : left, said the fox.\n")
    records, summary = instructions.build(self_instruct=si, exclude=[str(seven), str(eight)])
    assert "What is the relation between the given pairs?\n\nNight : Day :: Right : Left" not in _prompts(records)
    assert summary["dropped"]["overlap"] == 2  # the relation question and its repeat


@needs_git
def test_long_prompts_are_left_out(si):
    records, summary = instructions.build(self_instruct=si, max_chars=40)
    assert _prompts(records) == ["Suggest a breakfast without eggs."]
    assert summary["dropped"]["too long"] == 4  # the long story, the fox, both relation questions
    assert len(instructions.build(self_instruct=si, max_chars=10_000)[0]) == 4


@needs_git
def test_same_seed_same_file_other_seed_other_draw(si, ni, tmp_path, capsys):
    def run(seed, name):
        out = tmp_path / name
        argv = ["--self-instruct", str(si), "--natural-instructions-v1", str(ni), "--out", str(out),
                "--per-task", "10", "--seed", str(seed)]
        assert instructions.main(argv) == 0
        return out.read_bytes()

    assert run(3, "a.jsonl") == run(3, "b.jsonl")
    other = run(4, "c.jsonl")
    assert other != run(3, "d.jsonl")
    convs = read_prompts(tmp_path / "c.jsonl")  # the project's prompt reader takes the file
    assert len(convs) == 3 + 10 + 5 and len({c.id for c in convs}) == len(convs)
    printed = capsys.readouterr().out
    assert "self-instruct: 3 prompts from 3 of 8 tasks" in printed
    assert "subtask090_cnn_dailymail_summarization: built on CNN/DailyMail" in printed


@needs_git
def test_missing_or_wrong_folders_are_clear_errors(si, ni, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GumihoError, match="is not a folder"):
        instructions.build(self_instruct=tmp_path / "missing")
    with pytest.raises(GumihoError, match="is not a Self-Instruct repository"):
        instructions.build(self_instruct=empty)
    with pytest.raises(GumihoError, match="is not a Self-Instruct repository"):
        instructions.build(self_instruct=ni)
    with pytest.raises(GumihoError, match="is not Natural Instructions v1"):
        instructions.build(natural_instructions_v1=si)
    with pytest.raises(GumihoError, match="no source given"):
        instructions.build()
    with pytest.raises(GumihoError, match="cannot read the prompts to exclude"):
        instructions.build(self_instruct=si, exclude=[str(tmp_path / "no-bench.jsonl")])
    out = tmp_path / "out.jsonl"
    for argv in (["--self-instruct", str(tmp_path / "missing")], ["--natural-instructions-v1", str(si)]):
        assert instructions.main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(tmp_path) in err
    assert not out.exists()


def test_committed_corpus_shares_no_eight_words_with_the_benchmarks():
    corpus = ROOT / "corpus/prompts/instructions.jsonl"
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    assert records and all(set(r) == {"id", "source", "prompt"} for r in records)
    assert len({" ".join(r["prompt"].lower().split()) for r in records}) == len(records)
    assert all(len(r["prompt"]) <= instructions.MAX_PROMPT_CHARS for r in records)
    banned = set()
    for path in sorted((ROOT / "benchmarks/prompts").glob("*.jsonl")):
        for conv in read_prompts(path):
            for turn in conv.user_turns:
                banned |= shingles(turn)
    assert len(banned) > 10_000
    assert [r["id"] for r in records if shingles(r["prompt"]) & banned] == []
