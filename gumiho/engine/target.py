"""A loaded target model as the decode loop sees it: the HF model, its tokenizer, the
runtime its forwards run on, and the prompt's way into token ids. Loading one:
gumiho.loading."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from ..errors import GumihoError
from ..runtimes.base import Runtime
from ..runtimes.pytorch import TorchRuntime


def check_text(text: str, what: str) -> str:
    """Text a tokenizer can take: valid Unicode. A lone surrogate (half of a UTF-16
    pair, which JSON's \\ud800 escapes and broken copy-paste produce) cannot be
    encoded, and tokenizers fail on it with a raw TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise GumihoError(f"{what} holds an invalid character at position {e.start} (a lone surrogate, "
                          f"U+{ord(text[e.start]):04X}: half of a character, from a broken copy or escape); "
                          f"remove it or paste the text again.") from None
    return text


@dataclass
class Target:
    """A target model ready for decoding: the HF model, its tokenizer, and what the
    decode loop needs to know about it."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    # How its forwards run (gumiho.runtimes): chosen once, at load; every generation on
    # this target runs there. prepare_target gives the torch runtime over ``model``.
    runtime: Runtime = field(default=None, repr=False, compare=False)
    # Seconds of a verify forward per tree size on this machine, measured on first use
    # by a cost-aware tree (gumiho.engine.verifycost.verify_cost_for).
    verify_cost: Optional[object] = field(default=None, repr=False, compare=False)
    # Set by load_target when the runtime is not the model's own (llama.cpp): the same
    # model as a target on the torch runtime (see torch_view).
    _torch_view: Optional["Target"] = field(default=None, repr=False, compare=False)
    # Why the target is not on the runtime its load would have chosen ("" when it is): the
    # 4-bit runtime died in its trial on this machine, so 'auto' took the torch runtime.
    runtime_note: str = field(default="", repr=False, compare=False)

    def __post_init__(self):
        # (A target without a model runs nothing: a description of one, for settings.)
        self.runtime = self.runtime or (TorchRuntime.for_model(self.model, self.device, self.dtype)
                                        if self.model is not None else TorchRuntime(None, self.device, self.dtype))

    def __repr__(self):
        # Short: the dataclass's own would print the whole model and tokenizer.
        runtime = getattr(self.runtime, "name", "?")
        weights = getattr(self.runtime, "weights", "")
        # A runtime that multiplies its own stored weights (llama.cpp's 4-bit) is described by
        # them alone: the dtype is the float32 model kept beside it, which it does not run.
        dtype = "" if getattr(self.runtime, "quantized", False) else f"{str(self.dtype).replace('torch.', '')}, "
        return (f"Target({self.name!r}, {self.device.type}, {dtype}"
                f"runtime={runtime}{f' ({weights})' if weights else ''})")

    @property
    def runtime_choice(self) -> str:
        """What runs this target's weights here, with the load's setting and why, in one
        line for a status line or a hint: "4-bit in llama.cpp, weight repacking off:
        this CPU advertises AMX, ...", or "float32 in PyTorch" (with why, when the load
        meant llama.cpp and its trial found it unusable)."""
        rt = self.runtime
        if getattr(rt, "quantized", False):
            weights = "4-bit" if "4-bit" in str(getattr(rt, "weights", "")) else str(getattr(rt, "weights", ""))
            setting = getattr(rt, "load_words", "")
            return f"{weights} in {rt.name}" + (f", {setting}" if setting else "")
        words = f"{getattr(rt, 'weights', '') or str(self.dtype).removeprefix('torch.')} in PyTorch"
        return words + (f", not llama.cpp: {self.runtime_note}" if self.runtime_note else "")

    def new_cache(self):
        """An empty KV cache for this target's forwards."""
        return self.runtime.new_cache()

    def torch_view(self) -> "Target":
        """The same model as a target of its own on the torch runtime (the dequantised
        float32 weights), for a caller who chooses those weights: itself when it already
        runs there. The view shares the model and tokenizer, so it costs no memory; it
        keeps its own verify-cost measurement. Nothing moves a generation there unasked."""
        return self._torch_view or self

    @property
    def runtime_model(self) -> torch.nn.Module:
        """The model as the torch runtime runs it: a view of :attr:`model` over the same
        weights, frozen, packed on a CPU (gumiho.runtimes.pytorch.runtime_view), for
        work that runs the model's own forwards and wants them fast (batched
        generation, hidden states). :attr:`model` is as the caller gave it."""
        return self.torch_view().runtime.model

    @property
    def config(self):
        return self.model.config

    @property
    def eos_ids(self) -> set[int]:
        ids = set()
        for src in (getattr(self.model, "generation_config", None), self.model.config):
            e = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(e, int):
                ids.add(e)
            elif isinstance(e, (list, tuple)):
                ids.update(int(x) for x in e)
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int) and not ids:
            ids.add(tok_eos)
        return ids

    @property
    def context_length(self) -> int:
        cfg = self.model.config
        cfg = getattr(cfg, "get_text_config", lambda: cfg)()
        return int(getattr(cfg, "max_position_embeddings", None) or 2048)

    def forward(self, tokens: list[int], past: int, cache, parents: Optional[list[int]] = None,
                last_logits_only: bool = False, feature_layers: Optional[tuple] = None):
        """One target forward on this target's runtime (see gumiho.runtimes.base.Runtime.forward):
        ``tokens`` after ``past`` cached ones, a chain or (with ``parents``) a draft
        tree. Returns a Forward: the final-norm states [T, H] and the logits [T, V], or
        with ``last_logits_only`` the last row's [1, V] (the prompt's prefill needs only
        that row, and the LM head over a whole prompt is about 15% of a long prefill on a
        CPU); with ``feature_layers`` (a fused drafter's) also those layers' states."""
        return self.runtime.forward(tokens, past, cache, parents, last_logits_only, feature_layers)

    def keep(self, cache, past: int, kept: list[int]) -> None:
        """The cache keeps ``kept`` of the last forward's nodes (see Runtime.keep)."""
        self.runtime.keep(cache, past, kept)

    def encode(self, prompt: Union[str, list, None], chat: bool = True) -> list[int]:
        """Token ids of a prompt. A string goes through the target's own chat template
        as one user turn; a list of {"role", "content"} messages as a conversation."""
        if prompt is None or (isinstance(prompt, str) and not prompt.strip()):
            raise GumihoError("The prompt is empty: type some text to start from.")
        if isinstance(prompt, list):
            if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                       for m in prompt):
                raise GumihoError("Chat messages must be a list of {'role': ..., 'content': ...} with text content.")
            if not any(m["content"].strip() for m in prompt):
                raise GumihoError("The prompt is empty: the conversation has no text; type some text to start from.")
        elif not isinstance(prompt, str):
            raise GumihoError(f"The prompt must be text or a list of chat messages, got {type(prompt).__name__}.")
        for text in ([m["content"] for m in prompt] if isinstance(prompt, list) else [prompt]):
            check_text(text, "The prompt")
        tok = self.tokenizer
        if isinstance(prompt, list):
            messages = prompt
        else:
            messages = [{"role": "user", "content": prompt}]
        if chat and getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = enc["input_ids"] if isinstance(enc, dict) or hasattr(enc, "keys") else enc
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(i) for i in ids]
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in messages)
        return [int(i) for i in tok(text)["input_ids"]]
