"""The verify step: one target forward over the whole draft tree, the acceptance rule
over its logits, and the cache and the proposer keeping the accepted path.

The rule is the one the generation was started with (Run.acceptance_rule, a callable:
gumiho.engine.acceptance); greedy decoding has its own. The rule fills its records
(NodeCheck, Residual) only when the generation asked for them (Run.records).
"""
from __future__ import annotations

import torch

from ..proposers import Verified
from ..runtimes.base import Forward
from ..tree import DraftTree
from .acceptance import Acceptance, accept_greedy, process_logits
from .run import Run


def verify(run: Run, tree: DraftTree) -> Forward:
    """One target forward over the whole tree after the cache: the states the
    proposer reads and the logits, one row per node."""
    parents = None if len(tree) == 1 else tree.parents  # the root alone is a one-token chain
    return run.target.forward(tree.tokens, run.past, run.cache, parents,
                              feature_layers=run.proposer.feature_layers)


def accept(run: Run, tree: DraftTree, logits: torch.Tensor, children: list[list[int]]) -> Acceptance:
    """The accepted path and the bonus token: greedy's rule at temperature 0, else the
    run's sampling rule on the processed distribution, copied to the host in one read
    (the walk then tests one child after another without a device sync each)."""
    if run.greedy:
        return accept_greedy(tree, logits, children=children, records=run.records)
    s = run.settings
    probs = process_logits(logits, s.temperature, s.top_p, s.top_k).cpu()
    return run.acceptance_rule(tree, probs, run.gen, children=children, records=run.records)


def commit(run: Run, tree: DraftTree, acc: Acceptance, states: torch.Tensor) -> list[int]:
    """Keep the root's and the accepted path's cache entries, hand the proposer
    their states, and return the step's new tokens (the path's, then the bonus)."""
    kept = [0] + acc.path
    if len(tree) > 1:
        run.target.keep(run.cache, run.past, kept)
    new_tokens = [tree.tokens[i] for i in acc.path] + [acc.bonus]
    run.session.update(Verified(tokens=new_tokens, states=states[kept], tree=tree, accepted=acc.path))
    return new_tokens

