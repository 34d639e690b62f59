"""The proposer and runtime interfaces are abstract: a class that lacks one of their
methods fails when an object of it is made, not at the first step that calls it."""
import pytest

from gumiho.proposers import Proposer
from gumiho.proposers.base import ProposerSession
from gumiho.runtimes.base import Runtime


def test_a_proposer_without_start_cannot_be_made():
    class NoStart(Proposer):
        @property
        def heads(self):
            return ()

    with pytest.raises(TypeError, match="start"):
        NoStart()


def test_a_session_without_update_cannot_be_made():
    class NoUpdate(ProposerSession):
        def propose(self, root_token, budget):
            return None

    with pytest.raises(TypeError, match="update"):
        NoUpdate()


def test_a_runtime_without_keep_cannot_be_made():
    class NoKeep(Runtime):
        def new_cache(self):
            return None

        def forward(self, tokens, past, cache, parents=None, last_logits_only=False, feature_layers=None):
            return None

    with pytest.raises(TypeError, match="keep"):
        NoKeep()
