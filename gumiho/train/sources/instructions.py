"""Prompts people wrote, from two instruction collections, for self-distillation.

Two sources, both Apache-2.0, read straight from a git repository (a bare mirror
or a clone, at its HEAD commit) or from a plain folder of their files:

* Self-Instruct (https://github.com/yizhongw/self-instruct): the 175 seed tasks
  of ``data/seed_tasks.jsonl``, written by the authors. Nothing else of that
  repository is read: ``human_eval/`` is an evaluation set, ``data/finetuning/``
  is rebuilt from other datasets (CNN/DailyMail among them), and
  ``data/gpt3_generations/`` was written by a model.
* Natural Instructions v1 (https://github.com/allenai/natural-instructions-v1):
  crowdsourcing instructions of 61 tasks over existing datasets. A folder of the
  task files (``subtaskNNN_<name>.json``: ``Definition``, ``Prompt``, examples,
  ``Instances``) is read when there is one, for instance the dataset download
  of https://instructions.apps.allenai.org unpacked next to a clone. The git
  repository itself ships no task files, only GPT-3's predictions on its 12
  held-out tasks; each of those records the encoded request (definition, prompt
  and one instance input), so without task files the instances are read from
  ``predictions/gpt3_outputs/<task>@_Definition_Prompt@0_<n>.json``.

The successor, Super-NaturalInstructions (allenai/natural-instructions, 1,600+
tasks), is too large to bring to this machine and is not read.

Each instance becomes one user prompt: the task's instruction (Natural
Instructions: its definition, then its short prompt) followed by the instance
input. Only the prompt text is kept; the target writes every answer itself. At
most ``--per-task`` instances are drawn from each task with a seeded random
generator, so every task is represented. Left out: tasks built on a benchmark
source (MT-Bench, HumanEval, GSM8K, Alpaca, Natural Questions, CNN/DailyMail,
WMT; matched on the task's name and stated source), instances whose task needs
an input and has none, prompts longer than ``--max-chars``, prompts sharing an
8-word run with a prompt of an ``--exclude`` file, and repeats.

Usage::

    python -m gumiho.train.sources.instructions --self-instruct self-instruct \\
        --natural-instructions-v1 natural-instructions-v1 --out corpus/prompts/instructions.jsonl \\
        --exclude benchmarks/prompts/mt_bench.jsonl ...

Output: JSONL, one ``{"id", "source", "prompt"}`` per line in a seeded shuffle;
``source`` is ``self-instruct/<task name>`` or ``natural-instructions-v1/<task id>``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import GumihoError
from ...files import LibraryPaths, configure
from .prompts import write_jsonl
from .source_tree import SourceTree, open_tree
from .taxonomy import OVERLAP_WORDS, banned_shingles, shingles

SELF_INSTRUCT = "self-instruct"
NI_V1 = "natural-instructions-v1"
SELF_INSTRUCT_URL = "https://github.com/yizhongw/self-instruct"
NI_V1_URL = "https://github.com/allenai/natural-instructions-v1"
SEED_TASKS = "data/seed_tasks.jsonl"

# The 135M target's context is short; a long passage costs prefill for little.
MAX_PROMPT_CHARS = 1500
# Natural Instructions tasks hold thousands of instances each.
PER_TASK = 40

# Benchmarks this project reports on, and how a task's name or source names them
# (the text is lower-cased and every run of other characters becomes "_").
EVAL_SOURCES = [
    ("MT-Bench", r"mt_?bench"),
    ("HumanEval", r"human_?eval"),
    ("GSM8K", r"gsm_?8k"),
    ("Alpaca", r"alpaca"),
    ("Natural Questions", r"natural_?questions|nq|nq_open"),
    ("CNN/DailyMail", r"cnn|daily_?mail"),
    ("WMT", r"wmt\d*"),
]
_EVAL_RES = [(name, re.compile(rf"_(?:{pat})_")) for name, pat in EVAL_SOURCES]
# Marks in an instance's text that give its origin away whatever the task is called
# (Self-Instruct's news summary seed task holds a CNN article, for one).
EVAL_MARKS = [("CNN/DailyMail", re.compile(r"\(CNN\)|Daily Mail Reporter"))]

# A Self-Instruct instruction with an empty input is meant to stand alone, unless it
# points at material it does not contain.
_POINTS_AT_INPUT = re.compile(r"\b(given|following|below|above)\b", re.I)
# A Natural Instructions v1 task file, anywhere but among the predictions (their names hold "@").
_NI_TASK_FILE = re.compile(r"(?:^|/)(subtask\d{3}_[^/@]+)\.json$")
_NI_PREDICTIONS = re.compile(r"^predictions/gpt3_outputs/(subtask\d{3}_[^/@]+)@_Definition_Prompt@0_\d+\.json$")
_NI_ENCODED = re.compile(r"\ADefinition: (.*?)\nPrompt: (.*?)\ninput: (.*?)\noutput:\s*\Z", re.S)


@dataclass
class Task:
    source: str            # SELF_INSTRUCT or NI_V1
    id: str                # seed_task_12, subtask002_quoref_answer_generation
    label: str             # the record's source field
    instruction: str       # the text put before every input
    inputs: list[str]
    needs_input: bool      # an instance with an empty input is no request
    origin: list[str]      # names and stated sources, checked against the benchmarks


def self_instruct_tasks(tree: SourceTree) -> list[Task]:
    """The seed tasks of a Self-Instruct repository (only data/seed_tasks.jsonl is read)."""
    if SEED_TASKS not in tree.files():
        raise GumihoError(f"{tree.path} is not a Self-Instruct repository: it has no {SEED_TASKS}; "
                          f"pass a clone or mirror of {SELF_INSTRUCT_URL}")
    tasks = []
    lines = [(n, line) for n, line in enumerate(tree.read(SEED_TASKS).splitlines(), start=1) if line.strip()]
    for lineno, line in lines:
        where = f"{tree.path}:{SEED_TASKS}:{lineno}"
        obj = _parse_json(line, where)
        instances = obj.get("instances") if isinstance(obj, dict) else None
        if not (isinstance(obj, dict) and isinstance(obj.get("instruction"), str) and isinstance(instances, list)):
            raise GumihoError(f"{where}: a seed task needs an 'instruction' string and an 'instances' list")
        task_id = str(obj.get("id", f"seed_task_line{lineno}"))
        name = str(obj.get("name") or task_id)
        instruction = obj["instruction"].strip()
        inputs = [_input_of(i) for i in instances if isinstance(i, dict)]
        tasks.append(Task(SELF_INSTRUCT, task_id, f"{SELF_INSTRUCT}/{name}", instruction, inputs,
                          bool(_POINTS_AT_INPUT.search(instruction)), [task_id, name]))
    return tasks


def _input_of(instance: dict) -> str:
    text = instance.get("input")
    return text if isinstance(text, str) else ""


def _text(value) -> str:
    """A task-file field as text ("-" marks an empty one); lists are joined."""
    if isinstance(value, list):
        value = "\n".join(v for v in value if isinstance(v, str))
    if not isinstance(value, str) or value.strip() in ("", "-"):
        return ""
    return value.strip()


def _ni_instruction(definition: str, prompt: str) -> str:
    if prompt and prompt not in definition:
        return f"{definition}\n\n{prompt}" if definition else prompt
    return definition


def _ni_task(task_id: str, instruction: str, inputs: list[str], origin: list[str]) -> Task:
    return Task(NI_V1, task_id, f"{NI_V1}/{task_id}", instruction, inputs, True, [task_id, *origin])


def ni_v1_tasks(tree: SourceTree) -> tuple[list[Task], str]:
    """Natural Instructions v1 tasks and the layout they were read from ("task files" or
    "predictions")."""
    names = tree.files()
    task_files = [(m.group(1), n) for n in names if (m := _NI_TASK_FILE.search(n))]
    if task_files:
        return [_ni_task_file(tree, task_id, name) for task_id, name in sorted(task_files)], "task files"
    predictions = [(m.group(1), n) for n in names if (m := _NI_PREDICTIONS.match(n))]
    if predictions:
        return [_ni_predictions(tree, task_id, name) for task_id, name in sorted(predictions)], "predictions"
    raise GumihoError(f"{tree.path} is not Natural Instructions v1: it has neither task files "
                      "(subtaskNNN_<name>.json) nor predictions/gpt3_outputs/; pass a clone or mirror of "
                      f"{NI_V1_URL}, or a folder of its task files")


def _parse_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise GumihoError(f"{where}: invalid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


def _load_json(tree: SourceTree, name: str):
    return _parse_json(tree.read(name), f"{tree.path}:{name}")


def _ni_task_file(tree: SourceTree, task_id: str, name: str) -> Task:
    obj = _load_json(tree, name)
    instances = obj.get("Instances") if isinstance(obj, dict) else None
    if not isinstance(instances, list) or not ("Definition" in obj or "Prompt" in obj):
        raise GumihoError(f"{tree.path}:{name}: not a Natural Instructions task file "
                          "(expected 'Definition', 'Prompt' and an 'Instances' list)")
    instruction = _ni_instruction(_text(obj.get("Definition")), _text(obj.get("Prompt")))
    inputs = [_input_of(i) for i in instances if isinstance(i, dict)]
    origin = [_text(obj.get(k)) for k in ("Title", "Source", "Categories") if _text(obj.get(k))]
    return _ni_task(task_id, instruction, inputs, origin)


def _ni_predictions(tree: SourceTree, task_id: str, name: str) -> Task:
    obj = _load_json(tree, name)
    preds = obj.get("predictions") if isinstance(obj, dict) else None
    if not isinstance(preds, list):
        raise GumihoError(f"{tree.path}:{name}: expected a 'predictions' list")
    instruction, by_index = None, {}
    for p in preds:
        m = _NI_ENCODED.match(p.get("input", "")) if isinstance(p, dict) else None
        if m is None:
            continue
        if instruction is None:
            instruction = _ni_instruction(m.group(1).strip(), m.group(2).strip())
        by_index.setdefault(p.get("index", len(by_index)), m.group(3))
    if instruction is None:
        raise GumihoError(f"{tree.path}:{name}: no prediction holds an encoded request "
                          "('Definition: ...\\nPrompt: ...\\ninput: ...\\noutput:')")
    return _ni_task(task_id, instruction, list(by_index.values()), [])


def eval_source(task: Task) -> str | None:
    """Why a task is left out as built on a benchmark source, or None."""
    for text in task.origin:
        norm = "_" + re.sub(r"[^a-z0-9]+", "_", text.lower()) + "_"
        for bench, pattern in _EVAL_RES:
            if pattern.search(norm):
                return f"built on {bench} ({text!r})"
    for bench, mark in EVAL_MARKS:
        for text in task.inputs:
            if found := mark.search(text):
                return f"built on {bench} (an input holds {found.group()!r})"
    return None


def _clean_input(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def compose(instruction: str, instance_input: str) -> str:
    """One user prompt: the task's instruction, a blank line, then the instance input."""
    return f"{instruction}\n\n{instance_input}" if instance_input else instruction


def _pick(task: Task, rng: random.Random, per_task: int | None, max_chars: int,
          banned: set, seen: set, dropped: dict) -> list[str]:
    """Up to per_task prompts of one task, drawn in a seeded order; skips are counted."""
    order = list(range(len(task.inputs)))
    rng.shuffle(order)
    out: list[str] = []
    for i in order:
        if per_task is not None and len(out) >= per_task:
            break
        text = _clean_input(task.inputs[i])
        prompt = compose(task.instruction, text)
        key = " ".join(prompt.lower().split())
        reason = ("empty input" if not text and task.needs_input
                  else "too long" if len(prompt) > max_chars
                  else "overlap" if shingles(prompt) & banned
                  else "duplicate" if key in seen
                  else None)
        if reason:
            dropped[reason] += 1
            continue
        seen.add(key)
        out.append(prompt)
    return out


def build(self_instruct: str | Path | None = None, natural_instructions_v1: str | Path | None = None,
          exclude: list[str] = (), per_task: int | None = PER_TASK, seed: int = 0,
          max_chars: int = MAX_PROMPT_CHARS) -> tuple[list[dict], dict]:
    """The prompt records and a summary: what each source was read from, counts per source,
    the tasks left out and why, and the prompts dropped and why (see module doc).
    per_task None keeps every instance."""
    if self_instruct is None and natural_instructions_v1 is None:
        raise GumihoError("no source given: pass a Self-Instruct or a Natural Instructions v1 folder")
    banned = banned_shingles(list(exclude))
    sources = []
    if self_instruct is not None:
        tree = open_tree(self_instruct, f"a clone or mirror of {SELF_INSTRUCT_URL}")
        sources.append((SELF_INSTRUCT, tree, self_instruct_tasks(tree), SEED_TASKS))
    if natural_instructions_v1 is not None:
        tree = open_tree(natural_instructions_v1, f"a clone or mirror of {NI_V1_URL}, or a folder of its task files")
        tasks, layout = ni_v1_tasks(tree)
        sources.append((NI_V1, tree, tasks, layout))

    records, seen = [], set()
    dropped = {"empty input": 0, "too long": 0, "overlap": 0, "duplicate": 0}
    summary = {"sources": {}, "excluded_tasks": [], "dropped": dropped}
    for name, tree, tasks, layout in sources:
        kept_tasks, n_prompts, empty_tasks = 0, 0, []
        for task in tasks:
            reason = eval_source(task)
            if reason:
                summary["excluded_tasks"].append({"task": task.label, "reason": reason})
                continue
            rng = random.Random(f"{seed}/{task.source}/{task.id}")
            prompts = _pick(task, rng, per_task, max_chars, banned, seen, dropped)
            records += [{"source": task.label, "prompt": p} for p in prompts]
            n_prompts += len(prompts)
            kept_tasks += bool(prompts)
            if not prompts:
                empty_tasks.append(task.label)
        summary["sources"][name] = {
            "path": str(tree.path), "read_from": tree.read_from, "commit": tree.commit,
            "modified": tree.modified, "layout": layout, "tasks": len(tasks),
            "tasks_with_prompts": kept_tasks, "tasks_without_prompts": empty_tasks, "prompts": n_prompts}
    random.Random(seed).shuffle(records)
    return [{"id": f"instructions-{i:05d}", **rec} for i, rec in enumerate(records)], summary


def report(summary: dict, out: str, total: int, max_chars: int) -> str:
    lines = [f"wrote {total} prompts to {out}"]
    for name, s in summary["sources"].items():
        commit = s["commit"] or "none (plain folder)"
        lines.append(f"  {name}: {s['prompts']} prompts from {s['tasks_with_prompts']} of {s['tasks']} tasks "
                     f"({s['layout']}; {s['read_from']} {s['path']}, commit {commit}"
                     f"{', modified' if s['modified'] else ''})")
        for label in s["tasks_without_prompts"]:
            lines.append(f"    no prompt left from {label}")
    excluded = summary["excluded_tasks"]
    lines.append(f"  tasks left out as built on a benchmark source: {len(excluded) or 'none'}")
    lines += [f"    {e['task']}: {e['reason']}" for e in excluded]
    d = summary["dropped"]
    lines.append(f"  instances left out: {d['empty input']} with an empty input their task needs, "
                 f"{d['too long']} longer than {max_chars} characters, {d['overlap']} sharing "
                 f"{OVERLAP_WORDS} words with an excluded prompt, {d['duplicate']} repeats")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    p = argparse.ArgumentParser(prog="python -m gumiho.train.sources.instructions",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--self-instruct", metavar="DIR", help=f"a clone, bare mirror or folder of {SELF_INSTRUCT_URL}")
    p.add_argument("--natural-instructions-v1", metavar="DIR",
                   help=f"a clone, bare mirror or folder of {NI_V1_URL}, or a folder of its task files")
    p.add_argument("--out", required=True, help="output JSONL of {id, source, prompt}")
    p.add_argument("--per-task", type=int, default=PER_TASK, metavar="N",
                   help=f"at most N instances of each task, drawn with the seed; 0 keeps all (default {PER_TASK}; "
                        "Self-Instruct seed tasks hold one instance each)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws and of the shuffle")
    p.add_argument("--max-chars", type=int, default=MAX_PROMPT_CHARS,
                   help=f"leave out prompts longer than this (default {MAX_PROMPT_CHARS})")
    p.add_argument("--exclude", action="append", default=[], metavar="FILE",
                   help="prompt files (benchmarks) whose prompts must not appear: a prompt sharing "
                        f"{OVERLAP_WORDS} words in a row with one of theirs is left out; repeatable")
    args = p.parse_args(argv)
    if args.per_task < 0:
        p.error("--per-task must be 0 or more")
    if args.max_chars < 1:
        p.error("--max-chars must be at least 1")
    try:
        records, summary = build(args.self_instruct, args.natural_instructions_v1, args.exclude,
                                 args.per_task or None, args.seed, args.max_chars)
        if not records:
            raise GumihoError("no prompt is left after the exclusions; nothing written")
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_jsonl(records, args.out)
    print(report(summary, args.out, len(records), args.max_chars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
