"""The benchmark's prompts: what one is, how a prompt file is read and sampled, and how a
prompt becomes the token ids the target decodes (the bench, and the scripts that time
or tune on the same prompts, share this one reading)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from ..engine.target import Target
from ..errors import GumihoError
from ..files.prompt_files import read_prompts


@dataclass
class Prompt:
    """One benchmark prompt: ``text`` goes through the target's chat template;
    ``ids``, when given, are used as they are (tests with tokenizer-less targets)."""

    question_id: object = None
    category: str = ""
    text: str = ""
    ids: Optional[list[int]] = None
    system: Optional[str] = None  # the prompt file's system message, sent before the prompt


def load_prompts(path: str, limit: Optional[int] = None, spread: bool = True) -> list[Prompt]:
    """The prompts of a prompt file, read by :func:`gumiho.files.prompt_files.read_prompts`
    (the reader every command shares: MT-Bench's ``{"question_id", "category",
    "turns"}`` lines, ``prompt`` / ``messages`` lines, ``.txt`` paragraphs); the first
    user turn is the prompt, after the record's system message if it has one. Every
    problem raises GumihoError naming the file, the line and what a valid line looks like.

    With ``limit``, ``spread`` takes the prompts category by category in turn (the
    first of each category, then the second of each, ...) and keeps them in file
    order, so a few prompts of a file sorted by category (MT-Bench: ten writing
    prompts first) still cover every category; a single-category file gives its
    first ``limit`` prompts either way. ``spread=False`` takes the first ``limit``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise GumihoError(f"--limit must be a whole number >= 1, got {limit!r}.")
    prompts = [Prompt(question_id=c.id, category=c.source, text=c.user_turns[0], system=c.system)
               for c in read_prompts(path)]
    if limit is None or len(prompts) <= limit:
        return prompts
    if not spread:
        return prompts[:limit]
    by_category: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        by_category.setdefault(p.category, []).append(i)
    chosen: list[int] = []
    rank = 0
    while len(chosen) < limit:
        for rows in by_category.values():  # categories in order of first appearance
            if rank < len(rows) and len(chosen) < limit:
                chosen.append(rows[rank])
        rank += 1
    return [prompts[i] for i in sorted(chosen)]


def prompt_ids(target: Target, p: Union[Prompt, str, Sequence[int]]) -> list[int]:
    """The token ids ``target`` decodes for ``p``: a :class:`Prompt`'s own ids when it
    has them, else its text (after its system message) through the chat template; a
    string through the chat template; a sequence of ids as it is."""
    if isinstance(p, Prompt):
        if p.ids is not None:
            return list(p.ids)
        if p.system is not None:
            return target.encode([{"role": "system", "content": p.system}, {"role": "user", "content": p.text}])
        return target.encode(p.text)
    if isinstance(p, str):
        return target.encode(p)
    return [int(t) for t in p]


def as_prompt(p, i: int) -> Prompt:
    """``p`` (a Prompt, a string or token ids, the i-th given) as a Prompt, so that every
    row of a record has a question id."""
    if isinstance(p, Prompt):
        return p
    if isinstance(p, str):
        return Prompt(question_id=i, text=p)
    return Prompt(question_id=i, ids=[int(t) for t in p])
