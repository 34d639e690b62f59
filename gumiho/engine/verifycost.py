"""What a verify forward costs on this machine, by tree size, and how many drafted
nodes a step should verify.

A target forward over T tree tokens does not cost T one-token forwards, and how it
grows with T depends on the machine's kernels: on a GPU it is flat up to dozens of
tokens; on an AVX-512 CPU the float32 products take rows in blocks of about six, so a
forward over 3-6 tokens costs no more than over one and the 7th token adds a step;
on an AVX2 CPU the cost climbs from the second token on. So the cost is measured,
once per target (``measure_verify_cost``), and every step picks its node count from
it (``best_node_count``):

Let the drafted nodes be ranked by path probability q_i, the product of the
drafter's conditional probabilities along the path from the root (a child's q never
exceeds its parent's, so the best n nodes always form a tree). Under greedy
verification node i is accepted exactly when the target's own choices follow its
whole path. For a calibrated drafter (``research/tree_shape.py --calibration``
measures it; the shipped ones are) P(node i accepted) ~ q_i, and the accepted length
is the number of accepted nodes, so verifying the best n nodes gives

    E[tokens of the step] = 1 + sum_{i<=n} q_i          (the 1: the bonus token)

and the step verifies the n (0 = the root alone) that maximizes

    (1 + sum_{i<=n} q_i) / cost(n + 1)                  cost(T): seconds of a verify over T tokens

Drafting is left out of the denominator: it is done by the time n is chosen and
costs the same whatever n is, so leaving it out only makes the rule a little
cautious about larger trees. Under sampling q_i estimates the acceptance less well;
the output is exact either way, only the step's size is chosen less well.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

CONTEXT_TOKENS = 128  # context the cost is measured after: about a short prompt
ROUNDS = 4  # interleaved rounds over all sizes, after one discarded warm-up round


def non_decreasing(values: list[float]) -> list[float]:
    """The least-squares non-decreasing fit of ``values`` (pool adjacent violators):
    every run that dips is replaced by its mean.

    Why: a forward that reads more tokens never does less work, so a measured dip
    (size 6 timed below size 5) is mostly the machine's noise, and the rule below
    would chase it, trading a likely node for a cost difference that is not there.
    On CPUs whose one-token forward runs a slower kernel than a few-token one (AVX-512
    here), the fit pools those sizes into one flat stretch, which is what they are
    to within noise."""
    blocks: list[list[float]] = []  # [sum, count] per pooled run
    for v in values:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [total / count for total, count in blocks for _ in range(count)]


@dataclass(frozen=True)
class VerifyCost:
    """Seconds of a target forward over 1, 2, ..., len(seconds) tokens after a cached
    context, as the rule uses them; ``measured``: the medians they were fitted to."""

    seconds: tuple[float, ...]
    measured: tuple[float, ...] = ()

    @property
    def max_tokens(self) -> int:
        return len(self.seconds)

    def of(self, tokens: int) -> float:
        """Seconds of a verify over ``tokens`` tokens (beyond the measured range: the
        largest measured size's cost, grown in proportion)."""
        if tokens <= self.max_tokens:
            return self.seconds[tokens - 1]
        return self.seconds[-1] * tokens / self.max_tokens

    def relative(self) -> list[float]:
        """Costs as multiples of a one-token forward (for display)."""
        return [s / self.seconds[0] for s in self.seconds]


def best_node_count(path_probs: list[float], cost: VerifyCost, extra_tokens: int = 0) -> int:
    """How many of the nodes whose path probabilities are ``path_probs`` (best first)
    to verify: the n maximizing (1 + sum of the first n) / cost(n + 1 + extra_tokens).
    ``extra_tokens``: nodes the tree gets on top of the n (the full-tree extension's
    budget), which the forward pays for too. Ties go to the smaller tree."""
    best_n, best_rate, expected = 0, (1.0) / cost.of(1 + extra_tokens), 1.0
    for n, q in enumerate(path_probs, start=1):
        expected += q
        rate = expected / cost.of(n + 1 + extra_tokens)
        if rate > best_rate:
            best_n, best_rate = n, rate
    return best_n


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_verify_cost(target, max_tokens: int, rounds: int = ROUNDS,
                        context_tokens: int = CONTEXT_TOKENS) -> VerifyCost:
    """Time target forwards over 1..max_tokens tokens after a context of
    ``context_tokens`` (fewer when the target's window is short), the sizes
    interleaved round by round so that a busy moment of the machine spreads over all
    of them; the median of each, made non-decreasing in size. Uses its own cache: nothing of a generation is
    touched. A chain of tokens stands for a tree of that size: the forward's cost
    depends on how many tokens it reads, not on how they branch."""
    max_tokens = max(1, int(max_tokens))
    dev = target.device
    context = max(1, min(context_tokens, target.context_length - max_tokens - 1))
    vocab = int(target.model.get_input_embeddings().weight.shape[0])
    # Arbitrary but fixed tokens: the cost does not depend on which.
    ids = [int(t) for t in ((torch.arange(max(context, max_tokens)) * 7919 + 11) % vocab).tolist()]
    samples: dict[int, list[float]] = {n: [] for n in range(1, max_tokens + 1)}
    with torch.inference_mode():
        cache = target.new_cache()
        target.forward(ids[:context], 0, cache, last_logits_only=True)
        # A chain written as a tree, as the decode loop hands it over (the root alone: no tree).
        parents = {n: None if n == 1 else list(range(-1, n - 1)) for n in samples}
        for r in range(rounds + 1):
            for n in samples:
                _sync(dev)
                t0 = time.perf_counter()
                target.forward(ids[:n], context, cache, parents[n])
                _sync(dev)
                if r:  # round 0 warms up every shape
                    samples[n].append(time.perf_counter() - t0)
                target.keep(cache, context, [])  # back to the context alone
    medians = [statistics.median(v) for v in samples.values()]
    return VerifyCost(tuple(non_decreasing(medians)), tuple(medians))


def tokens_needed(settings) -> int:
    """The largest verify forward a tree of ``settings`` (TreeSettings) can make: its
    drafted nodes, the root and the full-tree extension's budget."""
    return settings.total_tokens + 1 + (settings.full_tree_tokens if settings.full_tree else 0)


def verify_cost_for(target, max_tokens: int) -> VerifyCost:
    """The target's measured verify cost covering ``max_tokens`` tokens: measured on
    first use and kept on the target (a few seconds on a CPU, once)."""
    cost = getattr(target, "verify_cost", None)
    if cost is None or cost.max_tokens < max_tokens:
        cost = measure_verify_cost(target, max_tokens)
        target.verify_cost = cost
    return cost
