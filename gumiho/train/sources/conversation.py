"""One conversation's token ids as it grows turn by turn through the target's chat
template: the prompt of each user turn, then the target's answer, with the mask of
which ids are the target's (the tokens the drafter learns from)."""
from __future__ import annotations

from gumiho.files.prompt_files import Conversation


def _render(tokenizer, messages, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _encode(tokenizer, text: str) -> list[int]:
    # The chat template already contains every special token.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class ConversationTokens:
    """Token ids of one conversation as it grows turn by turn."""

    def __init__(self, conv: Conversation):
        self.conv = conv
        self.messages = [{"role": "system", "content": conv.system}] if conv.system is not None else []
        self.ids: list[int] = []
        self.mask: list[int] = []

    def next_prompt(self, tokenizer, turn: int, eos_id: int) -> list[int]:
        """Ids of the conversation so far plus the template for user turn ``turn``."""
        previous = list(self.messages)
        self.messages.append({"role": "user", "content": self.conv.user_turns[turn]})
        full = _render(tokenizer, self.messages, True)
        if turn == 0:
            new = _encode(tokenizer, full)
        else:
            # Keep the exact generated tokens of earlier answers (re-tokenising
            # decoded text can change them) and only tokenise the template text
            # that follows the previous answer's end-of-turn token.
            before = _render(tokenizer, previous, False)
            eos_text = tokenizer.convert_ids_to_tokens(eos_id)
            cut = before.rfind(eos_text) + len(eos_text)
            if cut < len(eos_text) or not full.startswith(before[:cut]):
                raise ValueError("chat template is not prefix-stable across turns; multi-turn prompts unsupported")
            if self.ids[-1] != eos_id:  # previous answer hit max_new_tokens: close the turn
                self.ids.append(eos_id)
                self.mask.append(0)
            new = _encode(tokenizer, full[cut:])
        self.ids += new
        self.mask += [0] * len(new)
        return list(self.ids)

    def add_answer(self, tokenizer, answer: list[int]) -> None:
        self.ids += answer
        self.mask += [1] * len(answer)
        text = tokenizer.decode(answer, skip_special_tokens=True)
        self.messages.append({"role": "assistant", "content": text})
