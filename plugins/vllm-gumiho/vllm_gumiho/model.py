"""The Gumiho drafter as a vLLM model: ``EagleGumihoForCausalLM``.

Checkpoint layout (what ``python -m gumiho.export gumiho`` writes):

``config.json``: ``architectures: ["EagleGumihoForCausalLM"]``, ``model_type: "llama"``
and the Llama keys of the serial Transformer (``hidden_size``, ``intermediate_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``num_hidden_layers``,
``rms_norm_eps``, ``rope_parameters``, ``vocab_size``, ``max_position_embeddings``),
plus a ``gumiho`` dict: ``format`` (1), ``serial_positions`` (2), ``mlp_heads``,
``mlp_blocks``, ``first_layer_input_norm``, ``draft_vocab_size``.

``model.safetensors``:

    fc.weight [H, 2H], fc.bias [H]          the input projection of [embedding; state]
    layers.{i}.input_layernorm.weight       (absent for layer 0 when
                                             first_layer_input_norm is false)
    layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.post_attention_layernorm.weight,
    layers.{i}.mlp.{gate,up,down}_proj.weight    the serial Transformer's Llama layers
    heads.{j}.0.linear.{weight [H, 2H], bias}    head j's first block (no residual)
    heads.{j}.{b}.linear.{weight [H, H], bias}   b = 1..mlp_blocks, residual blocks
    draft_vocab_ids [V'] int64              the target ids the drafter may propose

No embedding and no LM head: the target's are used (vLLM shares them).

The math, for a target state ``h_i`` (after the target's final norm) and the token
``x_{i+1}`` that followed it, at position ``i``:

    u_i   = fc(cat(embed(x_{i+1}), h_i))                  the serial Transformer's input
    s_i   = layers(u_i)   (causal attention over the drafter's own KV cache; the first
                           layer's input norm left out when first_layer_input_norm is false)
    logits(s) = s @ lm_head[draft_vocab_ids].T            over the draft vocabulary

Draft position 1 is the argmax of logits(s_n) at the last verified position n; position
2 is one more serial step on u = fc(cat(embed(t_1), s_n)) at position n + 1, giving
s' and t_2; the MLP heads then read ``cat(u, fc(cat(embed(t_2), s')))`` (the serial
Transformer's inputs of the last two serial steps, older first), and head j's output
o_j gives position 3 + j as the argmax of logits(o_j). A head is a SiLU block 2H -> H
(``silu(linear(x))``), then ``mlp_blocks`` residual blocks ``x + silu(linear(x))``.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import ARCHITECTURE, GumihoPluginError, check_vllm_version

FORMAT = 1
SERIAL_POSITIONS = 2  # what the gumiho kind drafts serially; the proposer is written for it


def gumiho_settings(config) -> dict:
    """The drafter config's ``gumiho`` dict, checked; refuses a layout it does not know."""
    settings = getattr(config, "gumiho", None)
    if not isinstance(settings, dict):
        raise GumihoPluginError(
            f"The drafter config names the architecture {ARCHITECTURE} but has no 'gumiho' settings: write the "
            f"drafter with `python -m gumiho.export gumiho SRC OUT`.")
    if settings.get("format") != FORMAT:
        raise GumihoPluginError(f"This plugin reads Gumiho exports of format {FORMAT}; the drafter's is "
                                f"{settings.get('format')!r}. Export it again with a matching gumiho.")
    if settings.get("serial_positions") != SERIAL_POSITIONS:
        raise GumihoPluginError(
            f"The drafter drafts {settings.get('serial_positions')!r} positions serially; this plugin serves the "
            f"Gumiho kind, which drafts {SERIAL_POSITIONS} (then its MLP heads).")
    for key in ("mlp_heads", "mlp_blocks", "draft_vocab_size"):
        value = settings.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GumihoPluginError(f"The drafter's gumiho setting {key!r} must be a whole number, got {value!r}.")
    return settings


def max_draft_tokens(config) -> int:
    """How many tokens the drafter can draft: its serial positions and its heads."""
    settings = gumiho_settings(config)
    return SERIAL_POSITIONS + settings["mlp_heads"]


def check_draft_length(config, k: int) -> None:
    limit = max_draft_tokens(config)
    if k > limit:
        raise GumihoPluginError(
            f"num_speculative_tokens {k} is more than this Gumiho drafter drafts: {SERIAL_POSITIONS} serial "
            f"positions and {limit - SERIAL_POSITIONS} MLP heads, so at most {limit}. Ask for {limit} or fewer.")


class SiLUBlock(nn.Module):
    def __init__(self, d_in: int, d_out: int, residual: bool, dtype):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out, bias=True, dtype=dtype)
        self.residual = residual

    def forward(self, x):
        y = F.silu(self.linear(x))
        return x + y if self.residual else y


class GumihoModel(nn.Module):
    def __init__(self, *, vllm_config, config, start_layer_id: int, prefix: str = ""):
        super().__init__()
        from vllm.model_executor.layers.linear import ReplicatedLinear
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
        from vllm.model_executor.models.llama_eagle import LlamaDecoderLayer
        from vllm.model_executor.models.utils import maybe_prefix

        settings = gumiho_settings(config)
        dtype = vllm_config.model_config.dtype
        h = config.hidden_size
        # A placeholder: vLLM replaces it with the target's (has_own_embed_tokens False).
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, h, prefix=maybe_prefix(prefix, "embed_tokens"))
        self.fc = ReplicatedLinear(2 * h, h, bias=True, params_dtype=dtype, prefix=maybe_prefix(prefix, "fc"),
                                   return_bias=False)
        # Layer i is registered as layers.{start_layer_id + i}: its attention (and KV
        # cache) must not share a name with the target's layers.
        first_norm = bool(settings.get("first_layer_input_norm", True))
        self.layers = nn.ModuleList([
            LlamaDecoderLayer(vllm_config, i == 0 and not first_norm,
                              prefix=maybe_prefix(prefix, f"layers.{i + start_layer_id}"), config=config)
            for i in range(config.num_hidden_layers)])
        blocks = settings["mlp_blocks"]
        self.heads = nn.ModuleList([
            nn.Sequential(SiLUBlock(2 * h, h, False, dtype), *[SiLUBlock(h, h, True, dtype) for _ in range(blocks)])
            for _ in range(settings["mlp_heads"])])
        # What the last forward computed, for the proposer's MLP step: the serial
        # Transformer's input u and its output s, one row per token.
        self.last_input: torch.Tensor | None = None
        self.last_output: torch.Tensor | None = None

    def project(self, input_ids: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """u = fc(cat(embed(token), state))."""
        return self.fc(torch.cat((self.embed_tokens(input_ids), hidden_states), dim=-1))

    def forward(self, input_ids, positions, hidden_states):
        u = self.project(input_ids, hidden_states)
        x, residual = u, None
        for layer in self.layers:
            x, residual = layer(positions, x, residual)
        out = x + residual
        self.last_input, self.last_output = u, out
        return out, out

    def run_heads(self, head_input: torch.Tensor, count: int) -> torch.Tensor:
        """[N, 2H] -> [N, count, H]: the first ``count`` heads' states."""
        return torch.stack([head(head_input) for head in self.heads[:count]], dim=1)


class EagleGumihoForCausalLM(nn.Module):
    """The drafter vLLM loads for a Gumiho export (module docstring)."""

    has_own_embed_tokens = False
    has_own_lm_head = False

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        from vllm.model_executor.models.utils import maybe_prefix

        check_vllm_version()
        speculative = vllm_config.speculative_config
        if speculative is None:
            raise GumihoPluginError(f"{ARCHITECTURE} is a drafter: serve it as the speculative config's model "
                                    f"(\"method\": \"eagle\"), not as the model itself.")
        self.config = speculative.draft_model_config.hf_config
        check_draft_length(self.config, speculative.num_speculative_tokens)
        if speculative.method != "eagle":
            raise GumihoPluginError(f"A Gumiho drafter is served with \"method\": \"eagle\"; the speculative config "
                                    f"asks for {speculative.method!r}.")
        settings = gumiho_settings(self.config)
        target_layers = vllm_config.model_config.get_num_layers(vllm_config.parallel_config)
        self.model = GumihoModel(vllm_config=vllm_config, config=self.config, start_layer_id=target_layers,
                                 prefix=maybe_prefix(prefix, "model"))
        self.vocab_size = self.config.vocab_size
        self.draft_vocab_size = settings["draft_vocab_size"] or self.vocab_size
        self.register_buffer("draft_vocab_ids", torch.arange(self.draft_vocab_size, dtype=torch.long),
                             persistent=False)
        self.lm_head = None  # the target's, set by vLLM after loading
        self._draft_rows = None  # the target LM head's rows for the draft vocabulary

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids, positions, hidden_states, inputs_embeds=None):
        if inputs_embeds is not None:
            raise GumihoPluginError(f"{ARCHITECTURE} drafts from token ids; multimodal inputs are not supported.")
        return self.model(input_ids, positions, hidden_states)

    def _draft_weight(self) -> torch.Tensor:
        weight = self.lm_head.weight
        if self._draft_rows is None or self._draft_rows.device != weight.device:
            ids = self.draft_vocab_ids.to(weight.device)
            self._draft_rows = weight[ids].contiguous()
        return self._draft_rows

    def compute_draft_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [N, V'] (index them through draft_vocab_ids)."""
        return F.linear(hidden_states, self._draft_weight())

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits over the target's vocabulary [N, V]: the draft vocabulary's, and -inf
        for every token the drafter never proposes (so vLLM's argmax proposes a draft
        token)."""
        draft = self.compute_draft_logits(hidden_states)
        if self.draft_vocab_size == self.vocab_size and self._identity_vocab():
            return draft
        full = draft.new_full((draft.shape[0], self.vocab_size), float("-inf"))
        full[:, self.draft_vocab_ids.to(draft.device)] = draft
        return full

    def _identity_vocab(self) -> bool:
        if not hasattr(self, "_is_identity"):
            self._is_identity = bool(torch.equal(self.draft_vocab_ids.cpu(),
                                                 torch.arange(self.vocab_size, dtype=torch.long)))
        return self._is_identity

    def draft_argmax(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The drafter's top token (a target id) for each state: argmax over the draft vocabulary."""
        return self.draft_vocab_ids.to(hidden_states.device)[self.compute_draft_logits(hidden_states).argmax(-1)]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        stacked = ((".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
                   (".gate_proj", ".gate_up_proj", 0), (".up_proj", ".gate_up_proj", 1))
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name == "draft_vocab_ids":
                if tensor.numel() != self.draft_vocab_size:
                    raise GumihoPluginError(f"draft_vocab_ids holds {tensor.numel()} ids; the config says "
                                            f"draft_vocab_size {self.draft_vocab_size}.")
                ids = tensor.to(torch.long)
                if int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size or ids.unique().numel() != ids.numel():
                    raise GumihoPluginError("draft_vocab_ids must be distinct target ids within the vocabulary.")
                self.draft_vocab_ids = ids.to(self.draft_vocab_ids.device)
                self._draft_rows = None
                if hasattr(self, "_is_identity"):
                    del self._is_identity
                loaded.add("draft_vocab_ids")
                continue
            if name.startswith(("embed_tokens.", "lm_head.")):
                continue  # the target's are used
            for old, new, shard in stacked:
                if old in name:
                    key = "model." + name.replace(old, new)
                    if key not in params:
                        raise GumihoPluginError(f"The drafter checkpoint has a tensor {name!r} this drafter has no "
                                                f"place for: export it again with `python -m gumiho.export gumiho`.")
                    params[key].weight_loader(params[key], tensor, shard)
                    loaded.add(key)
                    break
            else:
                key = "model." + name
                if key not in params:
                    raise GumihoPluginError(f"The drafter checkpoint has a tensor {name!r} this drafter has no place "
                                            f"for: export it again with `python -m gumiho.export gumiho`.")
                param = params[key]
                if tuple(param.shape) != tuple(tensor.shape) and not hasattr(param, "weight_loader"):
                    raise GumihoPluginError(f"Tensor {name!r} has shape {tuple(tensor.shape)}; the config makes it "
                                            f"{tuple(param.shape)}.")
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
                loaded.add(key)
        missing = sorted(k for k in params if not k.startswith("model.embed_tokens.") and k not in loaded)
        if missing or "draft_vocab_ids" not in loaded:
            raise GumihoPluginError(f"The drafter checkpoint lacks {len(missing) + ('draft_vocab_ids' not in loaded)} "
                                    f"tensor(s), e.g. {(missing or ['draft_vocab_ids'])[:3]}: export it again with "
                                    f"`python -m gumiho.export gumiho`.")
        return loaded | {k for k in params if k.startswith("model.embed_tokens.")}
