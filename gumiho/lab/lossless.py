"""Does speculative sampling give the target's distribution? An experiment to run.

At temperature 0 losslessness is plain to see: speculative decoding writes exactly
vanilla's tokens. When sampling, each run writes different tokens, and the claim is
about distributions: the sequences speculative sampling writes must be distributed
exactly as those the target writes alone (gumiho.engine.acceptance has the proof for the
engine's rule). :func:`lossless_check` puts that to a test: it draws ``samples``
sequences of the first ``tokens`` new tokens by vanilla sampling and as many by
speculative sampling with a drafter and an acceptance rule (gumiho.lab.rules), each
generation with its own seed, and asks whether the two samples could come from one
distribution.

The test is the chi-square test of homogeneity on the 2 x m table of counts (row
i: the arm, column j: a sequence seen in either). With row totals R_i, column
totals n_j and N = R_1 + R_2, one distribution for both arms predicts the counts
E_ij = R_i n_j / N, and

    chi2 = sum_ij (O_ij - E_ij)^2 / E_ij,   dof = (2 - 1)(m - 1) = m - 1,

is then approximately chi-square distributed with dof degrees of freedom, provided
every E_ij is not too small (the usual rule: at least 5). Sequences whose expected
count is below 5 are pooled into one "other" column (and that column, if itself
still below 5, into the smallest column). The p-value is the chi-square upper tail,
P(X >= chi2) = Q(dof/2, chi2/2), Q the regularised upper incomplete gamma function.

Reading it: with a correct rule the p-value is about uniform on [0, 1], so p < 0.01
still happens one time in a hundred by chance. With a wrong rule the two
distributions differ by a fixed amount, and the statistic grows in proportion to
the samples: enough samples drive p towards 0.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import torch

from ..engine.decode import GenerationSettings, SharedPrompt
from ..engine.target import Target
from ..errors import GumihoError
from ..tree import TreeSettings
from .rules import EXACT, RULE_NAMES, SAMPLING_RULES, check_rule

MIN_EXPECTED = 5.0  # the chi-square approximation's usual minimum expected count per cell
# The first new token comes from the prefill's forward, before anything is drafted:
# both arms draw it from the target's own distribution, so only from the second token
# on can the acceptance rule change what is written.
MIN_TOKENS = 2
FIRST_TOKEN_ONLY = ("The check needs at least 2 first tokens: the first token comes from the prefill, before "
                    "anything is drafted, so both arms draw it from the target alone and the test cannot tell a "
                    "right acceptance rule from a wrong one. The rule decides from the second token on.")


def chi2_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X chi-square with ``dof`` degrees of freedom: the regularised
    upper incomplete gamma Q(dof/2, stat/2) (the chi-square law is Gamma(dof/2, 2)).
    dof 0: 1.0 (nothing was tested)."""
    if dof <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(max(stat, 0.0) / 2, dtype=torch.float64)))


@dataclass
class Homogeneity:
    """A chi-square test of homogeneity of two samples of counts."""

    chi2: float
    dof: int
    p_value: float
    pooled: int  # distinct sequences pooled into the "other" cell (their expected count was below 5)


def rare_outcomes(a: Mapping, b: Mapping, min_expected: float = MIN_EXPECTED) -> set:
    """The outcomes :func:`chi_square_homogeneity` pools: those whose smaller expected
    count, min(R_a, R_b) n_j / N, is below ``min_expected`` (none when a sample is empty)."""
    ra, rb = sum(a.values()), sum(b.values())
    n = ra + rb
    if ra == 0 or rb == 0:
        return set()
    return {key for key in set(a) | set(b) if min(ra, rb) * (a.get(key, 0) + b.get(key, 0)) / n < min_expected}


def chi_square_homogeneity(a: Mapping, b: Mapping, min_expected: float = MIN_EXPECTED) -> Homogeneity:
    """Could counts ``a`` and ``b`` ({outcome: count}) come from one distribution?
    Outcomes whose smaller expected count min_i R_i n_j / N is below ``min_expected``
    are pooled into one "other" cell; when that cell is itself below it, it joins the
    smallest remaining cell. With one cell left (or an empty sample) there is nothing
    to test: chi2 0, dof 0, p 1."""
    ra, rb = sum(a.values()), sum(b.values())
    n = ra + rb
    if ra == 0 or rb == 0:
        return Homogeneity(0.0, 0, 1.0, 0)
    small_row = min(ra, rb)
    pooled = rare_outcomes(a, b, min_expected)
    cells, rare = [], []
    for key in sorted(set(a) | set(b)):
        (rare if key in pooled else cells).append((a.get(key, 0), b.get(key, 0)))
    if rare:
        other = (sum(c[0] for c in rare), sum(c[1] for c in rare))
        if small_row * (other[0] + other[1]) / n >= min_expected or not cells:
            cells.append(other)
        else:
            k = min(range(len(cells)), key=lambda i: cells[i][0] + cells[i][1])
            cells[k] = (cells[k][0] + other[0], cells[k][1] + other[1])
    if len(cells) < 2:
        return Homogeneity(0.0, 0, 1.0, len(rare))
    stat = 0.0
    for oa, ob in cells:
        col = oa + ob
        for observed, row in ((oa, ra), (ob, rb)):
            expected = row * col / n
            stat += (observed - expected) ** 2 / expected
    dof = len(cells) - 1
    return Homogeneity(stat, dof, chi2_sf(stat, dof), len(rare))


@dataclass
class LosslessCheck:
    """The result of :func:`lossless_check`: both samples, the test, and a verdict."""

    vanilla: dict[tuple, int]  # {first tokens (token ids): how many vanilla generations wrote them}
    speculative: dict[tuple, int]  # the same for speculative sampling with ``rule``
    chi2: float
    dof: int
    p_value: float
    rule: str
    samples: int  # generations per arm (fewer than asked when stopped)
    tokens: int
    temperature: float
    pooled: int  # distinct sequences pooled into the test's "other" cell (expected count below 5)
    seconds: float
    top_p: float = 1.0
    stopped: bool = False  # ``stop`` ended the draws early: the test is over what was drawn
    sequences: int = field(init=False)  # distinct sequences seen in either sample

    def __post_init__(self):
        self.sequences = len(set(self.vanilla) | set(self.speculative))

    def headline(self, alpha: float = 0.01) -> str:
        """The verdict in a few words, as a page's heading shows it."""
        if self.dof == 0:
            return "Nothing to compare."
        return "No difference found." if self.p_value >= alpha else "The two samples differ."

    def reading(self, alpha: float = 0.01) -> str:
        """What the test found, in plain words, without the headline: the page puts it
        after :meth:`headline` and the figures, and :meth:`verdict` after the headline."""
        what = (f"speculative sampling with {RULE_NAMES[self.rule]} and the target alone, over the first "
                f"{self.tokens} tokens ({self.samples} samples each)")
        if self.dof == 0:
            return (f"Every sequence fell into one cell of the test ({what}). "
                    f"Draw more samples, or raise the temperature.")
        if self.p_value >= alpha:
            return (f"The two samples are consistent with one distribution (p = {self.p_value:.2g} >= {alpha:g}): "
                    f"no sign of a difference between {what}.")
        return (f"p = {self.p_value:.2g} < {alpha:g}: sampling from one distribution, a difference this large would "
                f"come up less than {alpha:.0%} of the time, so {what} do not look like one distribution.")

    def verdict(self, alpha: float = 0.01) -> str:
        """One plain sentence: does the test find a difference at level ``alpha``?"""
        if self.dof and self.p_value >= alpha:
            return self.reading(alpha)  # it opens with its own headline
        reading = self.reading(alpha)
        return f"{self.headline(alpha)[:-1]}: {reading[0].lower()}{reading[1:]}"


def lossless_check(target: Target, prompt_ids, drafter, temperature: float, samples: int = 200,
                   tokens: int = 2, rule: str = EXACT, seed: int = 0, top_p: float = 1.0,
                   progress: Optional[Callable[[int, int], None]] = None,
                   stop: Optional[threading.Event] = None, top_k: int = 0,
                   tree: Optional[TreeSettings] = None) -> LosslessCheck:
    """Draw ``samples`` sequences of the first ``tokens`` new tokens after ``prompt_ids``
    by vanilla sampling and as many by speculative sampling with ``drafter`` and the
    acceptance ``rule`` (a name from gumiho.lab.rules: "exact", or a wrong one), and test whether the
    two samples come from one distribution (the module's docstring has the test).

    Every generation runs through the library's decode loop with its own seed, the
    seeds drawn from ``seed`` and distinct across both arms; each arm prefills the
    prompt once and starts every generation from it (gumiho.engine.decode.SharedPrompt: the
    same tokens :func:`gumiho.engine.decode.stream` writes, without its repeated prefill,
    most of a two-token generation's time). The arms take turns, so
    that ``stop`` (checked between generations) leaves them the same size; the test
    then covers what was drawn. ``progress(done, total)`` is called after each
    generation, ``total`` = 2 x ``samples``. ``tree``: the draft tree's settings (None:
    the target's default). A sequence shorter than ``tokens`` ended in an EOS.

    Both arms draw the first token alike, from the prefill's distribution; the
    acceptance rule decides from the second token on, so ``tokens`` = 1 would test
    nothing about it (a wrong rule passes as surely as the right one) and is
    refused: 2 is the smallest length that can tell. Longer sequences test more
    positions but spread the samples over more sequences, and more of them end up
    pooled."""
    for name, value, low in (("samples", samples, 1), ("tokens", tokens, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise GumihoError(f"{name} must be a whole number >= {low}, got {value!r}.")
    if tokens < MIN_TOKENS:
        raise GumihoError(FIRST_TOKEN_ONLY)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise GumihoError(f"The losslessness check samples: it needs a temperature above 0, got {temperature!r}. "
                          f"At temperature 0 speculative decoding writes exactly vanilla's tokens, which "
                          f"comparing the two outputs shows.")
    check_rule(rule)
    # Distinct seeds, none shared by the arms (sample() draws without replacement; a
    # range it can take the length of, well inside what a seed may be).
    seeds = random.Random(seed).sample(range(2**62), 2 * samples)

    settings = GenerationSettings(max_new_tokens=tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                                  tree=tree)
    t0 = time.perf_counter()
    # Every check of both arms (prompt, settings, drafter, rule) is made here, before a sample is drawn.
    # The draws read tokens only: the rule's records are not asked for (they change no token).
    arms = (SharedPrompt(target, prompt_ids, None, settings),
            SharedPrompt(target, prompt_ids, drafter, settings, acceptance_rule=SAMPLING_RULES[rule]))

    def draw(arm: SharedPrompt, draw_seed: int) -> tuple:
        return tuple(t for event in arm.stream(draw_seed) for t in event.tokens)

    vanilla: dict[tuple, int] = {}
    speculative: dict[tuple, int] = {}
    done, stopped = 0, False
    for i in range(samples):
        if stop is not None and stop.is_set():
            stopped = True
            break
        seq = draw(arms[0], seeds[2 * i])
        vanilla[seq] = vanilla.get(seq, 0) + 1
        if progress is not None:
            progress(2 * i + 1, 2 * samples)
        seq = draw(arms[1], seeds[2 * i + 1])
        speculative[seq] = speculative.get(seq, 0) + 1
        done = i + 1
        if progress is not None:
            progress(2 * i + 2, 2 * samples)
    test = chi_square_homogeneity(vanilla, speculative)
    return LosslessCheck(vanilla=vanilla, speculative=speculative, chi2=test.chi2, dof=test.dof,
                         p_value=test.p_value, rule=rule, samples=done, tokens=tokens,
                         temperature=float(temperature), pooled=test.pooled, seconds=time.perf_counter() - t0,
                         top_p=top_p, stopped=stopped)
