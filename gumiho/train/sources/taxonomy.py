"""Prompts written by people: the seed questions of the InstructLab taxonomy.

The taxonomy (https://github.com/instructlab/taxonomy, Apache-2.0) is a tree of
``qna.yaml`` files in which contributors wrote example requests by hand:
writing tasks, extraction from a given text, reasoning puzzles, STEM and
knowledge questions. Most contributions were later removed from the default
branch, so this script reads every ``qna.yaml`` that ever existed in the
repository's history (the last version of each path) and keeps the questions
only: the target writes every answer itself during self-distillation.

A question that comes with a ``context`` (a text to extract from or reason
about) becomes one prompt holding both. Exact duplicates are dropped, and any
prompt that shares a long word run with a benchmark prompt (``--exclude``, any
file ``gumiho.files.prompt_files`` reads) is left out, so benchmarks stay unseen.

Usage::

    git clone https://github.com/instructlab/taxonomy
    python -m gumiho.train.sources.taxonomy taxonomy --out data/prompts-taxonomy.jsonl \\
        --exclude benchmarks/prompts/mt_bench.jsonl ...

Output: JSONL, one ``{"id", "source", "prompt"}`` per line, in a seeded shuffle.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ...files import LibraryPaths, configure
from ...files.prompt_files import PromptFileError, read_prompts
from .prompts import write_jsonl

# A prompt longer than this (question plus context) costs prefill time on the
# CPU without teaching the drafter anything a shorter one would not.
MAX_PROMPT_CHARS = 2000
# Two prompts sharing a run of this many words are treated as the same request.
OVERLAP_WORDS = 8


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def last_versions(repo: Path) -> dict[str, str]:
    """path -> text of its last version, for every qna.yaml in the history."""
    # Newest first: the first time a path shows up with content is its last version.
    log = _git(repo, "log", "--all", "--format=@%H", "--name-status", "--", "*qna.yaml")
    seen: dict[str, str] = {}
    commit = None
    for line in log.splitlines():
        if line.startswith("@"):
            commit = line[1:]
            continue
        parts = line.split("\t")
        if len(parts) < 2 or commit is None:
            continue
        status, path = parts[0], parts[-1]
        if not path.endswith("qna.yaml") or path in seen:
            continue
        # A deletion's last content is in the parent commit.
        ref = f"{commit}^" if status.startswith("D") else commit
        try:
            seen[path] = _git(repo, "show", f"{ref}:{path}")
        except subprocess.CalledProcessError:
            seen[path] = ""
    return seen


def questions_of(text: str) -> list[str]:
    """The prompts one qna.yaml holds: question, with its context when it has one."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    if not isinstance(doc, dict):
        return []
    examples = doc.get("seed_examples") or []
    out = []
    for ex in examples if isinstance(examples, list) else []:
        if not isinstance(ex, dict):
            continue
        # Knowledge files (version 3) nest their questions under one context.
        pairs = ex.get("questions_and_answers")
        if isinstance(pairs, list):
            context = ex.get("context")
            for qa in pairs:
                if isinstance(qa, dict) and isinstance(qa.get("question"), str):
                    out.append(_join(qa["question"], context))
            continue
        if isinstance(ex.get("question"), str):
            out.append(_join(ex["question"], ex.get("context")))
    return [q for q in out if q]


def _join(question: str, context) -> str:
    # One-line questions get their stray spaces collapsed; multi-line ones (tables, lists) keep their layout.
    question = " ".join(question.split()) if "\n" not in question.strip() else question.strip()
    if isinstance(context, str) and context.strip():
        return f"{question}\n\n{context.strip()}"
    return question


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def shingles(text: str, n: int = OVERLAP_WORDS) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i:i + n]) for i in range(max(0, len(w) - n + 1))}


def banned_shingles(paths: list[str]) -> set[tuple[str, ...]]:
    """The word runs of every user turn of the ``--exclude`` files; a file that cannot be
    read raises PromptFileError saying it was one of those."""
    banned: set[tuple[str, ...]] = set()
    for path in paths:
        try:
            conversations = read_prompts(path)
        except PromptFileError as e:
            raise PromptFileError(f"cannot read the prompts to exclude from {path}: {e}") from None
        for conv in conversations:
            for turn in conv.user_turns:
                banned |= shingles(turn)
    return banned


def build(repo: str | Path, exclude: list[str], seed: int = 0,
          max_chars: int = MAX_PROMPT_CHARS) -> tuple[list[dict], dict]:
    """The prompt records and counts of what was left out (see module doc)."""
    repo = Path(repo)
    if not repo.is_dir():
        raise PromptFileError(f"{repo} is not a folder; pass a git clone of instructlab/taxonomy")
    try:
        _git(repo, "rev-parse", "--git-dir")
    except FileNotFoundError:
        raise PromptFileError("git is not installed; it is needed to read the taxonomy's history") from None
    except subprocess.CalledProcessError:
        raise PromptFileError(f"{repo} is not a git clone; clone instructlab/taxonomy with its history") from None
    banned = banned_shingles(exclude)
    versions = last_versions(repo)
    records, seen = [], set()
    counts = {"files": len(versions), "overlapping": 0, "too_long": 0}
    for path in sorted(versions):
        for q in questions_of(versions[path]):
            key = " ".join(_words(q))
            if not key or key in seen:
                continue
            seen.add(key)
            if len(q) > max_chars:
                counts["too_long"] += 1
                continue
            if shingles(q) & banned:
                counts["overlapping"] += 1
                continue
            records.append({"source": "taxonomy:" + "/".join(path.split("/")[:2]), "prompt": q})
    random.Random(seed).shuffle(records)
    return [{"id": f"taxonomy-{i:05d}", **rec} for i, rec in enumerate(records)], counts


def main(argv: list[str] | None = None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    p = argparse.ArgumentParser(prog="python -m gumiho.train.sources.taxonomy", description=__doc__.split("\n\n")[0])
    p.add_argument("repo", help="a git clone of instructlab/taxonomy (full history)")
    p.add_argument("--out", required=True, help="output JSONL of {id, source, prompt}")
    p.add_argument("--exclude", action="append", default=[], metavar="FILE",
                   help="prompt files whose requests must not appear (benchmarks); repeatable")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffle")
    p.add_argument("--max-chars", type=int, default=MAX_PROMPT_CHARS,
                   help="leave out prompts longer than this, question and context together "
                        f"(default {MAX_PROMPT_CHARS}; long prompts make CPU distillation slow)")
    args = p.parse_args(argv)
    if args.max_chars < 1:
        p.error("--max-chars must be at least 1")
    try:
        records, counts = build(args.repo, args.exclude, args.seed, args.max_chars)
    except (OSError, PromptFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not records:
        print(f"error: no seed questions found in {args.repo} ({counts['files']} qna.yaml files)", file=sys.stderr)
        return 2
    write_jsonl(records, args.out)
    print(f"{counts['files']} qna.yaml files; {len(records)} prompts written to {args.out} "
          f"({counts['overlapping']} left out for sharing {OVERLAP_WORDS} words with an excluded prompt, "
          f"{counts['too_long']} longer than {args.max_chars} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
