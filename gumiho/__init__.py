"""Gumiho speculative decoding: a hybrid serial/parallel drafter, tree verification
that keeps the output exactly the target's, and the statistics to show it."""
from .decode import GenerationResult, GenerationSettings, generate, stream
from .drafter import Drafter, DrafterConfig
from .errors import GumihoError
from .events import EmittedToken, RejectedToken, StepEvent
from .heads import HeadFamily
from .loading import DEFAULT_TARGET, load_drafter, load_target, prepare_target, shipped_drafter_path
from .metrics import GenerationStats, summarize
from .proposers import Budget, CopyDrafter, CopySettings, Head, Proposer, Verified, as_proposer, with_copy
from .target import Target
from .tree import DraftTree, TreeSettings

__all__ = [
    "Budget", "Head", "Proposer", "Verified", "as_proposer", "CopyDrafter", "CopySettings", "Drafter", "DrafterConfig", "DraftTree", "EmittedToken", "GenerationResult",
    "GenerationSettings", "GenerationStats", "GumihoError", "HeadFamily", "RejectedToken", "StepEvent", "Target", "TreeSettings",
    "DEFAULT_TARGET", "generate", "load_drafter", "load_target", "prepare_target", "shipped_drafter_path", "stream",
    "summarize", "with_copy",
]
__version__ = "0.1.0"
