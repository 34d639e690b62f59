"""Read prompt files into conversations for the target to answer.

Accepted inputs:

* ``.jsonl`` (or ``.json`` with one object per line), each line one of
  - ``{"prompt": "..."}``
  - ``{"turns": ["user turn 1", "user turn 2", ...]}``  (strings are user turns;
    ``{"role", "content"}`` items are read like ``messages``)
  - ``{"messages": [{"role": ..., "content": ...}, ...]}``
  with optional ``"id"`` and ``"source"``.
* ``.txt``: every blank-line separated paragraph is one prompt.

For self-distillation only the user side of a conversation is kept: the target
writes every assistant reply itself, so assistant messages in the input are
dropped. A leading system message is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class PromptFileError(ValueError):
    pass


@dataclass
class Conversation:
    id: str
    source: str
    user_turns: list[str]
    system: str | None = None
    # Filled in during distillation.
    meta: dict = field(default_factory=dict)


def _from_messages(messages, where: str) -> tuple[str | None, list[str]]:
    if not isinstance(messages, list):
        raise PromptFileError(f"{where}: expected a list of messages")
    system, turns = None, []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise PromptFileError(f"{where}: message {i} needs 'role' and 'content'")
        role, content = m["role"], m["content"]
        if not isinstance(content, str):
            raise PromptFileError(f"{where}: message {i} content must be a string")
        if role == "system":
            if turns or system is not None:
                raise PromptFileError(f"{where}: a system message is only allowed first")
            system = content
        elif role in ("user", "human"):
            turns.append(content)
        elif role not in ("assistant", "gpt", "model"):
            raise PromptFileError(f"{where}: unknown role {role!r} in message {i}")
    return system, turns


def _parse_record(obj, where: str, default_id: str, default_source: str) -> Conversation:
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    system = obj.get("system")
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise PromptFileError(f"{where}: 'prompt' must be a string")
        turns = [obj["prompt"]]
    elif "messages" in obj:
        system, turns = _from_messages(obj["messages"], where)
    elif "turns" in obj:
        raw = obj["turns"]
        if isinstance(raw, list) and all(isinstance(t, str) for t in raw):
            turns = list(raw)
        else:
            system, turns = _from_messages(raw, where)
    else:
        raise PromptFileError(f"{where}: expected a 'prompt', 'turns' or 'messages' field")
    turns = [t for t in turns if t.strip()]
    if not turns:
        raise PromptFileError(f"{where}: no non-empty user turn")
    return Conversation(
        id=str(obj.get("id", default_id)),
        source=str(obj.get("source", default_source)),
        user_turns=turns,
        system=system,
    )


def _read_jsonl(path: Path) -> list[Conversation]:
    convs = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise PromptFileError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            convs.append(_parse_record(obj, where, f"{path.stem}:{lineno}", path.stem))
    return convs


def _read_txt(path: Path) -> list[Conversation]:
    text = path.read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
    return [
        Conversation(id=f"{path.stem}:{i}", source=path.stem, user_turns=[p])
        for i, p in enumerate(x for x in paragraphs if x)
    ]


def read_prompts(path: str | Path) -> list[Conversation]:
    """Read a prompt file; raise a clear error for missing, empty or malformed files."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"prompt file not found: {path}")
    if not path.is_file():
        raise PromptFileError(f"not a file: {path}")
    if path.suffix == ".txt":
        convs = _read_txt(path)
    elif path.suffix in (".jsonl", ".json"):
        convs = _read_jsonl(path)
    else:
        raise PromptFileError(f"{path}: unsupported file type {path.suffix!r} (use .jsonl or .txt)")
    if not convs:
        raise PromptFileError(f"{path}: file contains no prompts")
    return convs
