"""The drafter's configuration: sizes, layout and what it reads of the target, as
saved in a drafter folder's config.json. The kinds' defaults are one table
(gumiho.drafter.kinds)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import GumihoError
from ..heads import HeadFamily
from .kinds import DRAFTER_KINDS, KINDS, Kind, kind_layout

# The rotary scalings the drafter's layers compute (gumiho.drafter.layers.rope_inv_freq), what a
# config may ask for: kept here, with the check, so the config needs nothing from the layers.
ROPE_SCALINGS = ("default", "linear", "llama3")


@dataclass(slots=True)  # an unknown setting raises (as TreeSettings)
class DrafterConfig:
    hidden_size: int
    vocab_size: int
    kind: str = "gumiho"
    serial_positions: int = 2
    mlp_heads: int = 5
    num_layers: int = 2
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: Optional[int] = None
    intermediate_size: Optional[int] = None
    mlp_blocks: int = 5  # residual SiLU blocks per MLP head, after the input block
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # Optional restricted draft vocabulary (FR-Spec): the drafter only ever proposes
    # these token ids. Keeps the LM-head cost of drafting small on CPU.
    draft_vocab_size: Optional[int] = None
    # Official checkpoints have no input norm on the first layer (see official.py).
    first_layer_input_norm: bool = True
    # Target layers whose hidden states are fused into the drafter's input (see the
    # module docstring); None: the final-norm hidden state alone (official checkpoints).
    feature_layers: Optional[tuple] = None
    # eagle3: the first layer's residual is the normed state (True) or the state itself
    # (False, vLLM's default for EAGLE-3 checkpoints; speculators' default is True).
    norm_before_residual: bool = False
    # Rotary scaling of an imported checkpoint (transformers' rope_scaling: linear or llama3); None: plain.
    rope_scaling: Optional[dict] = None
    target: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise GumihoError(f"Unknown drafter kind {self.kind!r}; use one of {DRAFTER_KINDS}.")
        # Sizes come from a config.json that may be hand-edited or hostile: a size that
        # is not a whole number would fail deep inside torch with a raw error.
        for name, lo in _SIZE_FIELDS:
            v = getattr(self, name)
            if v is None and name in _DERIVED_SIZES:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise GumihoError(f"Drafter setting {name} must be a whole number >= {lo}, got {v!r}; keep the "
                                  f"config.json saved with the drafter's weights.")
        for name in ("rms_norm_eps", "rope_theta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise GumihoError(f"Drafter setting {name} must be a number > 0, got {v!r}; keep the config.json "
                                  f"saved with the drafter's weights.")
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.intermediate_size is None:
            self.intermediate_size = int(self.hidden_size * 8 / 3)
        if self.serial_positions > 0 and self.num_layers < 1:
            raise GumihoError("A drafter with serial positions needs at least one Transformer layer.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise GumihoError("num_attention_heads must be a multiple of num_key_value_heads.")
        if self.rope_scaling is not None:
            _check_rope_scaling(self.rope_scaling)
        if self.feature_layers is not None:
            layers = self.feature_layers
            if (not isinstance(layers, (list, tuple)) or not layers
                    or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)
                    or len(set(layers)) != len(layers)):
                raise GumihoError(f"feature_layers must be distinct layer indices >= 0, got {layers!r}.")
            self.feature_layers = tuple(layers)

    @property
    def kind_spec(self) -> Kind:
        """The kind's strategy (gumiho.drafter.kinds): what the drafter is built of and how it drafts."""
        return KINDS[self.kind]

    @property
    def own_head(self) -> bool:
        """Whether the drafter has its own final norm and LM head (eagle3)."""
        return self.kind_spec.own_head

    @property
    def feature_width(self) -> int:
        """Width of what the target hands the drafter per position: H, or k*H fused."""
        return self.hidden_size * (len(self.feature_layers) if self.feature_layers else 1)

    @classmethod
    def for_target(cls, target_config, kind: str = "gumiho", **overrides) -> "DrafterConfig":
        """A drafter sized from a target's HF config (the paper's choice: same width,
        same attention shape, two layers)."""
        text_cfg = getattr(target_config, "get_text_config", lambda: target_config)()
        rope = getattr(text_cfg, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(text_cfg, "rope_theta", 10000.0)) if isinstance(rope, dict) else 10000.0
        kw = dict(
            hidden_size=text_cfg.hidden_size,
            vocab_size=text_cfg.vocab_size,
            num_attention_heads=text_cfg.num_attention_heads,
            num_key_value_heads=getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads,
            head_dim=getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads,
            intermediate_size=getattr(text_cfg, "intermediate_size", None),
            rms_norm_eps=getattr(text_cfg, "rms_norm_eps", None) or 1e-6,
            rope_theta=float(theta),
        )
        kw.update(kind_layout(kind))
        if KINDS[kind].fused_by_default and "feature_layers" not in overrides:
            overrides = dict(overrides, feature_layers="default")  # EAGLE-3 reads three fused layers
        if overrides.get("feature_layers") == "default":
            overrides = dict(overrides, feature_layers=default_feature_layers(text_cfg.num_hidden_layers))
        kw.update(overrides)
        return cls(kind=kind, **kw)

    @property
    def max_depth(self) -> int:
        return self.serial_positions + self.mlp_heads

    @property
    def head_inputs(self) -> int:
        """How many serial inputs (H-wide each) the MLP heads read: the last two
        on the path, or only the root's when there is no serial step (parallel)."""
        return min(2, self.serial_positions + 1)

    def head_kind(self, position: int) -> str:
        """'serial' or 'mlp': which part of the drafter proposes draft position d."""
        return HeadFamily.SERIAL if position <= self.serial_positions else HeadFamily.MLP


def _check_rope_scaling(scaling) -> None:
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else None
    if kind not in ROPE_SCALINGS:
        raise GumihoError(f"Unsupported rope_scaling {scaling!r}: the drafter reads {', '.join(ROPE_SCALINGS)}.")
    need = {"default": (), "linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[kind]
    bad = [k for k in need if isinstance(scaling.get(k), bool) or not isinstance(scaling.get(k), (int, float))
           or not scaling[k] > 0]
    if bad or (kind == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]):
        raise GumihoError(f"rope_scaling {scaling!r} needs positive numbers {', '.join(need)} (llama3: high_freq_factor "
                          f"above low_freq_factor).")


_SIZE_FIELDS = (("hidden_size", 1), ("vocab_size", 1), ("serial_positions", 0), ("mlp_heads", 0), ("num_layers", 0),
                ("num_attention_heads", 1), ("num_key_value_heads", 1), ("head_dim", 1), ("intermediate_size", 1),
                ("mlp_blocks", 0), ("draft_vocab_size", 1))
_DERIVED_SIZES = ("head_dim", "intermediate_size", "draft_vocab_size")  # None: derived, or the whole vocabulary


def default_feature_layers(num_layers: int) -> tuple:
    """EAGLE-3's low, middle and high layers of an N-layer target: 2, N//2 and N-3
    (in ``hidden_states`` numbering; for small N, distinct layers within 1..N)."""
    picks = sorted({min(max(i, 1), num_layers) for i in (2, num_layers // 2, num_layers - 3)})
    return tuple(picks)
