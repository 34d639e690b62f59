"""The torch runtime: the target's transformers model runs its own forwards, in the
dtype it was loaded in (float32 on a CPU, half precision on a GPU).

Any Hugging Face causal LM runs here. The runtime owns what it changes: it runs a
view of the model (:func:`runtime_view`: its own module objects over the same
weights) and changes only that view. Every parameter is frozen there; on a CPU the
view's linear layers are pre-packed (gumiho.kernels.cpulinear), so a forward over a few rows
costs about one one-token forward, as on a GPU (the cost curve drafting needs), and
its attention is the tree-verify one (gumiho.runtimes.treeattn). The model the caller gave
keeps its classes, attention implementation, mode and requires_grad. The runtime
hands a drafter any inner layer's states (forward_with_features)."""
from __future__ import annotations

import copy
import inspect
import threading

import torch

from ..errors import GumihoError
from ..kernels.cpulinear import pack_linears
from .base import Forward, Runtime, tree_depths
from .kvcache import keep_tree_entries, new_cache, truncate_entries
from .treeattn import use_tree_attention
from .treemask import tree_inputs

_CACHE_KEYWORD: dict = {}


def cache_keyword(model_class) -> str:
    """The name of the KV-cache argument of a base model's forward: transformers 5.x
    renamed `past_key_values` to `cache`; accept both generations. Looked up once
    per class (inspect.signature is slow next to a decode step's other work)."""
    kw = _CACHE_KEYWORD.get(model_class)
    if kw is None:
        params = inspect.signature(model_class.forward).parameters
        kw = _CACHE_KEYWORD[model_class] = "cache" if "cache" in params else "past_key_values"
    return kw


def forward_with_features(base, inputs: dict, layers) -> tuple:
    """``base(**inputs)`` (a model's body: embeddings, decoder layers, final norm) and
    the states after ``layers`` in transformers' ``hidden_states`` numbering (0: the
    embedding output, which is the first decoder layer's input; l: the output of
    decoder layer l; N, the number of layers: the final-norm state), concatenated in
    the order given [B, T, k*H].

    They are read by forward hooks on just the layers concerned, set for this forward
    and removed after it. ``output_hidden_states`` hands back the same tensors (in
    transformers 5 it records them with hooks too), but it hooks every decoder layer
    and attention of the model for good, so that every later forward, vanilla ones
    included, runs through them. A hook records only on the thread that set it: a
    forward of another thread in between is not mixed in. A body without a ``layers``
    list falls back to ``output_hidden_states=True``."""
    blocks = getattr(base, "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
        out = base(**inputs, output_hidden_states=True)
        states = out.hidden_states
        if max(layers) >= len(states):
            raise GumihoError(f"The drafter reads the target's layers {list(layers)}, but the target has only "
                              f"{len(states) - 1} layers.")
        return out, torch.cat([states[i] for i in layers], dim=-1)
    n = len(blocks)
    if max(layers) > n:
        raise GumihoError(f"The drafter reads the target's layers {list(layers)}, but the target has only {n} layers.")
    owner = threading.get_ident()
    got: dict = {}

    def record_input(layer):  # entry 0: what goes into the first decoder layer
        def hook(module, args, kwargs):
            if threading.get_ident() == owner:
                got[layer] = args[0] if args else kwargs["hidden_states"]
        return hook

    def record_output(layer):  # entry l: what comes out of decoder layer l
        def hook(module, args, output):
            if threading.get_ident() == owner:
                got[layer] = output[0] if isinstance(output, tuple) else output
        return hook

    handles = []
    try:
        for i in set(layers):
            if i == 0:
                handles.append(blocks[0].register_forward_pre_hook(record_input(i), with_kwargs=True))
            elif i < n:
                handles.append(blocks[i - 1].register_forward_hook(record_output(i)))
        out = base(**inputs)
    finally:
        for h in handles:
            h.remove()
    got[n] = out.last_hidden_state  # entry N: after the final norm, not the last layer's raw output
    return out, torch.cat([got[i] for i in layers], dim=-1)


def runtime_view(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model``'s module objects (and config) over the same weights: every
    parameter a new, frozen Parameter on the same storage, every buffer the same
    tensor. Whatever is done to the view (classes swapped, attention implementation
    set, eval mode) leaves ``model`` as it was, and no weight is copied."""
    memo = {id(p): torch.nn.Parameter(p.detach(), requires_grad=False) for p in model.parameters()}
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo).eval()


class TorchRuntime(Runtime):
    name = "torch"
    flat_verify = True
    truncates = True

    def __init__(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype):
        """``model``: the module the runtime runs as it is (:meth:`for_model` makes one)."""
        self.model, self.device, self.dtype = model, torch.device(device), dtype
        self.weights = str(dtype).removeprefix("torch.")

    @classmethod
    def for_model(cls, model: torch.nn.Module, device, dtype: torch.dtype, packed: bool = True,
                  prepack: bool = True) -> "TorchRuntime":
        """The runtime over a view of ``model`` (:func:`runtime_view`), prepared for
        decoding: on a CPU, the linear layers packed (``packed``: now, or with ``prepack``
        False on each layer's first product, the same kernel either way) and the
        tree-verify attention where the model takes it."""
        view = runtime_view(model)
        if torch.device(device).type == "cpu":
            if packed:
                pack_linears(view, prepack=prepack)
            use_tree_attention(view)
        return cls(view, device, dtype)

    def new_cache(self):
        return new_cache()

    def forward(self, tokens, past, cache, parents=None, last_logits_only=False, feature_layers=None):
        dev = self.device
        if parents is None:
            ids = torch.tensor([list(tokens)], dtype=torch.long, device=dev)
            pos = torch.arange(past, past + len(tokens), device=dev)[None]
            mask = None  # a chain: the model's own causal mask
        else:
            ids, pos, mask = tree_inputs(list(tokens), parents, tree_depths(parents), past, dev, self.dtype)
        base = self.model.base_model
        inputs = dict(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                      **{cache_keyword(type(base)): cache})
        if feature_layers:
            out, states = forward_with_features(base, inputs, feature_layers)
        else:
            out = base(**inputs)
        hidden = out.last_hidden_state[0]
        logits = self.model.get_output_embeddings()(hidden[-1:] if last_logits_only else hidden)
        return Forward(hidden, logits, states[0] if feature_layers else None)

    def keep(self, cache, past, kept):
        keep_tree_entries(cache, past, kept)

    def truncate(self, cache, length):
        truncate_entries(cache, length)
