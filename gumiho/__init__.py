"""Gumiho speculative decoding: a hybrid serial/parallel drafter, tree verification
that keeps the output exactly the target's, and the statistics to show it."""
from .drafter import Drafter, DrafterConfig
from .engine.decode import GenerationResult, GenerationSettings, generate, stream
from .engine.events import EmittedToken, NodeCheck, RejectedToken, Residual, StepEvent
from .engine.metrics import GenerationStats, summarize
from .engine.target import Target
from .errors import GumihoError
from .heads import HeadFamily
from .lab.lossless import LosslessCheck, chi_square_homogeneity, lossless_check
from .lab.rules import RULE_DESCRIPTIONS, SAMPLING_RULES
from .lab.speedmodel import (
    SpeedPrediction,
    predict_from_runs,
    predicted_run_tau,
    predicted_speedup,
    predicted_speedup_from_ratios,
    predicted_tau,
)
from .loading import DEFAULT_TARGET, load_drafter, load_target, prepare_target, shipped_drafter_path
from .proposers import Budget, CopyDrafter, CopySettings, Head, Proposer, Verified, as_proposer, with_copy
from .tree import DraftTree, TreeSettings

__all__ = [
    "Budget", "Head", "Proposer", "Verified", "as_proposer", "CopyDrafter", "CopySettings", "Drafter", "DrafterConfig", "DraftTree", "EmittedToken", "GenerationResult",
    "GenerationSettings", "GenerationStats", "GumihoError", "HeadFamily", "RejectedToken", "StepEvent", "Target", "TreeSettings",
    "DEFAULT_TARGET", "generate", "load_drafter", "load_target", "prepare_target", "shipped_drafter_path", "stream",
    "summarize", "with_copy",
    "NodeCheck", "Residual", "LosslessCheck", "chi_square_homogeneity", "lossless_check", "RULE_DESCRIPTIONS",
    "SAMPLING_RULES", "SpeedPrediction", "predict_from_runs", "predicted_run_tau", "predicted_speedup",
    "predicted_speedup_from_ratios", "predicted_tau",
]
__version__ = "0.1.0"
