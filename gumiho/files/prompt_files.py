"""The one reader of prompt files, for every command that takes one.

The bench, distillation, the taxonomy and instruction builders' ``--exclude``,
``gumiho.train.sources.prompts --exclude`` and the scripts all read a user's file here,
so a file is read, and refused, the same way whichever command is given it.

Accepted inputs:

* ``.jsonl`` (or ``.json`` with one object per line), each line one of
  - ``{"prompt": "..."}``
  - ``{"turns": ["user turn 1", "user turn 2", ...]}`` (the MT-Bench question
    format; ``{"role", "content"}`` items are read like ``messages``)
  - ``{"messages": [{"role": ..., "content": ...}, ...]}``
  with an optional ``"id"`` (or ``"question_id"``), ``"source"`` (or
  ``"category"``) and ``"system"``; other fields (MT-Bench's ``reference``) are
  ignored. Blank lines are skipped.
* ``.txt``: every paragraph (lines separated by a blank or whitespace-only line)
  is one prompt.

Only the user side of a conversation is kept: distillation has the target write
every assistant reply itself, and the bench sends the first user turn, so
assistant messages in the input are dropped. A leading system message is kept.

Every problem raises :class:`PromptFileError` (a :class:`GumihoError`) naming the
file, the line and what a valid line looks like.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from ..engine.target import check_text
from ..errors import GumihoError

RECORD_FORMAT = ('{"prompt": "..."}, {"turns": ["first user turn", ...]} or '
                 '{"messages": [{"role": "user", "content": "..."}, ...]}, with optional "id" (or "question_id") '
                 'and "source" (or "category")')
JSONL_SUFFIXES = (".jsonl", ".json")
TEXT_SUFFIXES = (".txt",)
USER_ROLES = ("user", "human")
ASSISTANT_ROLES = ("assistant", "gpt", "model")
# A blank line ends a .txt paragraph even when an editor left spaces on it.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\f\v]*\n")


class PromptFileError(GumihoError):
    """A prompt file that cannot be read; the message says where and what would fix it."""


@dataclass
class Conversation:
    """One prompt of a file: its user turns (the first is the prompt) and where it came from.

    ``id`` is the record's ``id`` or ``question_id`` as written (a string or a whole
    number, so the bench's records keep MT-Bench's numeric question ids), else
    ``"<file stem>:<line>"``; ``source`` is its ``source`` or ``category``, else
    the file's stem."""

    id: Union[str, int]
    source: str
    user_turns: list[str]
    system: str | None = None
    # Filled in during distillation.
    meta: dict = field(default_factory=dict)


def _text(value, what: str, where: str) -> str:
    """A non-empty string a tokenizer can take, else a PromptFileError naming ``what``."""
    if not isinstance(value, str):
        raise PromptFileError(f"{where}: {what} must be a string, got {type(value).__name__}; "
                              f"each line must be one object like {RECORD_FORMAT}.")
    if not value.strip():
        raise PromptFileError(f"{where}: {what} is empty; write the request there or remove the line.")
    try:
        return check_text(value, f"{where}: {what}")
    except GumihoError as e:
        raise PromptFileError(str(e)) from None


def _from_messages(messages, field_name: str, where: str) -> tuple[str | None, list[str]]:
    if not isinstance(messages, list) or not messages:
        raise PromptFileError(f'{where}: "{field_name}" must be a non-empty list of {{"role", "content"}} '
                              f"messages, got {messages!r:.60}.")
    system, turns = None, []
    for i, m in enumerate(messages):
        what = f'message {i} of "{field_name}"'
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise PromptFileError(f'{where}: {what} needs "role" and "content", got {m!r:.60}.')
        role = m["role"]
        if role == "system":
            if i:
                raise PromptFileError(f"{where}: {what} is a system message; one is allowed only first.")
            system = _text(m["content"], what, where)
        elif role in USER_ROLES:
            turns.append(_text(m["content"], what, where))
        elif role in ASSISTANT_ROLES:
            # Dropped (the target writes its own replies), but it must still be text.
            if not isinstance(m["content"], str):
                raise PromptFileError(f"{where}: {what} content must be a string, got "
                                      f"{type(m['content']).__name__}.")
        else:
            raise PromptFileError(f"{where}: {what} has the unknown role {role!r}; use "
                                  f"{', '.join(('system',) + USER_ROLES + ASSISTANT_ROLES)}.")
    if not turns:
        raise PromptFileError(f'{where}: "{field_name}" has no user message; add a {{"role": "user", '
                              f'"content": "..."}} message.')
    return system, turns


def _label(obj: dict, names: tuple[str, str], where: str, whole_numbers: bool):
    """The first of ``names`` the record has (``id`` / ``question_id``, ``source`` /
    ``category``), checked: a string, or with ``whole_numbers`` also an int."""
    for name in names:
        if name in obj:
            value = obj[name]
            if isinstance(value, str) or (whole_numbers and isinstance(value, int) and not isinstance(value, bool)):
                return value
            kinds = "a string or a whole number" if whole_numbers else "a string"
            raise PromptFileError(f'{where}: "{name}" must be {kinds}, got {value!r:.60}.')
    return None


def parse_record(obj, where: str, default_id: str, default_source: str) -> Conversation:
    """One JSONL record as a Conversation; ``where`` ("FILE, line N") starts every error."""
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: expected a JSON object like {RECORD_FORMAT}, got {type(obj).__name__}.")
    system = None
    if "prompt" in obj:
        turns = [_text(obj["prompt"], '"prompt"', where)]
    elif "messages" in obj:
        system, turns = _from_messages(obj["messages"], "messages", where)
    elif "turns" in obj:
        raw = obj["turns"]
        if isinstance(raw, list) and raw and all(isinstance(t, str) for t in raw):
            turns = [_text(t, f'turn {i} of "turns"', where) for i, t in enumerate(raw)]
        elif isinstance(raw, list) and raw and all(isinstance(t, dict) for t in raw):
            system, turns = _from_messages(raw, "turns", where)
        else:
            raise PromptFileError(f'{where}: "turns" must be a non-empty list of strings (the user turns; the first '
                                  f'is the prompt) or of {{"role", "content"}} messages, got {raw!r:.60}.')
    else:
        found = ", ".join(f'"{k}"' for k in list(obj)[:6]) or "none"
        raise PromptFileError(f'{where}: no "prompt", "turns" or "messages" field (fields: {found}); '
                              f"each line must be one object like {RECORD_FORMAT}.")
    if "system" in obj:
        if system is not None:
            raise PromptFileError(f'{where}: both a "system" field and a system message; keep one.')
        system = _text(obj["system"], '"system"', where)
    ident = _label(obj, ("id", "question_id"), where, whole_numbers=True)
    source = _label(obj, ("source", "category"), where, whole_numbers=False)
    return Conversation(id=default_id if ident is None else ident,
                        source=default_source if source is None else source,
                        user_turns=turns, system=system)


def _read_jsonl(path: Path, text: str) -> list[Conversation]:
    convs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptFileError(f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line must be one "
                                  f"object like {RECORD_FORMAT}.") from None
        convs.append(parse_record(obj, where, f"{path.stem}:{lineno}", path.stem))
    return convs


def _read_txt(path: Path, text: str) -> list[Conversation]:
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n"))]
    return [Conversation(id=f"{path.stem}:{i}", source=path.stem,
                         user_turns=[_text(p, f"paragraph {i}", str(path))])
            for i, p in enumerate(x for x in paragraphs if x)]


def read_prompts(path: Union[str, Path]) -> list[Conversation]:
    """Every prompt of a ``.jsonl`` / ``.json`` / ``.txt`` file, in file order; a
    missing, unreadable, empty or malformed file raises PromptFileError."""
    if path is None or not str(path).strip():
        raise PromptFileError(f"No prompt file given; give a .jsonl file with one object a line ({RECORD_FORMAT}) "
                              f"or a .txt file of blank-line separated prompts.")
    path = Path(path)
    if not path.exists():
        raise PromptFileError(f"Prompt file {path} does not exist; give a .jsonl file with one object a line "
                              f"({RECORD_FORMAT}) or a .txt file of blank-line separated prompts.")
    if path.is_dir():
        raise PromptFileError(f"Prompt file {path} is a folder; give a .jsonl or .txt file inside it.")
    suffix = path.suffix.lower()
    if suffix not in JSONL_SUFFIXES + TEXT_SUFFIXES:
        raise PromptFileError(f"Prompt file {path} has the unsupported type {path.suffix or '(none)'!r}; "
                              f"use .jsonl (or .json, one object a line) or .txt.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PromptFileError(f"Prompt file {path} is not UTF-8 text ({e.reason} at byte {e.start}); "
                              f"save it as UTF-8.") from None
    except OSError as e:
        raise PromptFileError(f"Prompt file {path} cannot be read ({e.strerror or e}); check its permissions.") \
            from None
    convs = _read_txt(path, text) if suffix in TEXT_SUFFIXES else _read_jsonl(path, text)
    if not convs:
        example = "a paragraph of text" if suffix in TEXT_SUFFIXES else f"lines like {RECORD_FORMAT}"
        raise PromptFileError(f"Prompt file {path} has no prompts; add {example}.")
    return convs
