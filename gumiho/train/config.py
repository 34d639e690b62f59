"""What a training run is asked to do (TrainConfig), where its target states come
from (cached in the shards, or computed on the fly), and its mixed precision."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ..errors import GumihoError
from ..kernels.machine import cpu_has_native_bf16
from . import data as tdata
from .objective import LossConfig

FEATURE_SOURCES = ("auto", "cached", "on-the-fly")


def cached_states_fit(seqs: list, feature_layers) -> bool:
    """Whether every sequence carries the states a drafter reading ``feature_layers``
    trains on: the final hidden state and, when fused, features of those layers."""
    return all(s.hidden is not None and (not feature_layers or (s.features is not None
                                                                and tuple(s.feature_layers) == tuple(feature_layers)))
               for s in seqs)


def states_source(cfg: "TrainConfig", feature_layers) -> tuple[list, bool]:
    """The training sequences and whether their states are computed on the fly,
    as ``cfg.features`` asks, refused with a clear message when cached states are asked
    for and the shards do not hold them."""
    if cfg.features not in FEATURE_SOURCES:
        raise GumihoError(f"features must be one of {', '.join(FEATURE_SOURCES)}, not {cfg.features!r}")
    if cfg.features == "on-the-fly":
        return tdata.load_sequences(cfg.data, cfg.max_len, states=False), True
    seqs = tdata.load_sequences(cfg.data, cfg.max_len)
    if cached_states_fit(seqs, feature_layers):
        return seqs, False
    if cfg.features == "cached":
        what = (f"the target's features of layers {list(feature_layers)}" if feature_layers
                else "the target's hidden states")
        raise GumihoError(f"The shards in {cfg.data!r} do not hold {what} for every sequence: cache them with "
                          f"`python -m gumiho.train.features --data DIR --out DIR_WITH_FEATURES"
                          + (f" --layers {','.join(map(str, feature_layers))}`" if feature_layers else "`")
                          + ", or train with --features on-the-fly.")
    for s in seqs:  # on the fly: the cached states are not used, do not keep them
        s.hidden = s.features = s.feature_layers = None
    return seqs, True


@dataclass(slots=True)  # an unknown setting raises (as TreeSettings)
class TrainConfig:
    data: str
    out: str
    kind: str = "gumiho"
    epochs: float = 2.0
    batch_tokens: int = 4096
    max_len: int = 512
    lr: float = 5e-4
    warmup_steps: int = 30
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    draft_vocab: int = 8192
    eval_fraction: float = 0.03
    checkpoint_every: int = 50
    seed: int = 0
    precision: str = "auto"  # "auto", "bf16" or "fp32": see mixed_precision()
    max_minutes: Optional[float] = None  # stop (with a checkpoint) after this much wall time
    max_steps: Optional[int] = None
    stop_at_step: Optional[int] = None  # pause here with a checkpoint; rerun to continue (schedule unchanged)
    init_from: Optional[str] = None  # a saved drafter folder to continue training from (fresh optimizer/schedule)
    # Where the target's states come from: "cached" (the shards'), "on-the-fly" (a target
    # forward inside every step, gumiho.train.states), "auto" (cached when the shards
    # hold what the drafter reads, else on the fly).
    features: str = "auto"
    loss: LossConfig = field(default_factory=LossConfig)
    drafter_overrides: dict = field(default_factory=dict)


def mixed_precision(precision: str) -> str:
    """accelerate's ``mixed_precision`` for ``--precision``: "bf16" (autocast; weights,
    optimizer state and the loss reductions stay float32) or "no". "auto" picks bf16
    where the hardware does it natively: a bf16-capable GPU, or a CPU with
    AVX512-BF16/AMX."""
    if precision not in ("auto", "bf16", "fp32"):
        raise GumihoError(f"precision must be auto, bf16 or fp32, not {precision!r}")
    if precision != "auto":
        return "bf16" if precision == "bf16" else "no"
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if cpu_has_native_bf16() else "no"
