"""python -m gumiho.train.evaluate: widening a drafter's draft vocabulary for scoring."""
import torch

from gumiho.train.evaluate import widened_vocab as widen


def test_widened_vocab_keeps_the_drafters_tokens_first_then_the_lowest_others():
    ids = torch.tensor([7, 2, 9])
    assert widen(ids, 6, 12).tolist() == [7, 2, 9, 0, 1, 3]
    assert widen(ids, 0, 12).tolist() == [7, 2, 9, 0, 1, 3, 4, 5, 6, 8, 10, 11]  # 0: the whole vocabulary
    assert widen(ids, 2, 12).tolist() == [7, 2, 9]  # never narrower than the drafter's own
    assert widen(ids, 50, 12).numel() == 12
