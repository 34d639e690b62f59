"""Speculative sampling must leave the output distribution exactly the target's.

The reference distribution is computed independently of the engine: from-scratch
forwards of the target over every prefix, processed by transformers' own logits
warpers (temperature, then top-k, then top-p, the order HF generate uses). The
engine's samples are compared with it by a chi-square goodness-of-fit test.

Significance: a correct engine must give p > 1e-3 (deterministic: fixed seeds);
the same statistic on deliberately wrong acceptance rules must give p < 1e-6,
which shows the sample size is large enough for the test to fail when it should.
"""
from collections import Counter

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from gumiho import GenerationSettings, TreeSettings, stream
from gumiho.engine.acceptance import Acceptance, accept_sampling, process_logits
from gumiho.tree import DraftTree
from helpers import FixedTreeDrafter, tiny_target

VOCAB, EOS = 6, 1
PROMPT = [3, 4, 2, 5]
NEW_TOKENS = 3  # token 1 from the prefill, tokens 2 and 3 from the tree (depth 1 and depth 2)
# Three children at depth 1 (including a token the target almost never picks), three below each.
BRANCHES = [[3, 0, 2], [0, 3, 5]]
N_SAMPLES = 3000
N_POWER = 1500  # the wrong rules are rejected even with half the samples the real test uses
PASS_P = 1e-3  # a correct engine must not be rejected at this level
FAIL_P = 1e-6  # a wrong rule must be rejected at this level

CONFIGS = [
    dict(temperature=0.9, top_p=1.0, top_k=0),
    dict(temperature=0.9, top_p=0.8, top_k=0),
    dict(temperature=1.3, top_p=0.95, top_k=3),
]


@pytest.fixture(scope="module")
def target():
    # This seed and init give spread next-token distributions (first token: max 0.29,
    # EOS 0.14) that depend clearly on the prefix.
    return tiny_target("llama", vocab=VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, init=0.5, seed=1, eos=EOS)


def hf_probs(logits: torch.Tensor, temperature: float, top_p: float, top_k: int) -> torch.Tensor:
    """logits [B, V] -> processed probabilities, by transformers' warpers (independent of gumiho)."""
    scores = TemperatureLogitsWarper(temperature)(None, logits.float())
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.softmax(-1)


@torch.no_grad()
def exact_distribution(target, temperature, top_p, top_k) -> dict[tuple, float]:
    """Probability of every possible output (sequences of NEW_TOKENS tokens, or shorter
    ones ending in EOS), by brute-force forwards over all prefixes."""
    out: dict[tuple, float] = {}

    def walk(seq: tuple, prob: float):
        if len(seq) == NEW_TOKENS or (seq and seq[-1] == EOS):
            out[seq] = prob
            return
        logits = target.model(torch.tensor([PROMPT + list(seq)])).logits[:, -1]
        p = hf_probs(logits, temperature, top_p, top_k)[0].double()
        for tok in range(VOCAB):
            if p[tok] > 0:
                walk(seq + (tok,), prob * float(p[tok]))

    walk((), 1.0)
    assert abs(sum(out.values()) - 1) < 1e-6
    return out


def sample_outputs(target, n: int, temperature, top_p, top_k, seed0: int = 0, rule=accept_sampling):
    """n speculative generations with the acceptance ``rule``, seeds seed0.. ; returns the
    output counts and a histogram of accepted draft lengths over all verify steps."""
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    tree = TreeSettings(total_tokens=12, depth=2)
    counts: Counter = Counter()
    accepted: Counter = Counter()
    for i in range(n):
        settings = GenerationSettings(max_new_tokens=NEW_TOKENS, temperature=temperature, top_p=top_p,
                                      top_k=top_k, seed=seed0 + i, tree=tree)
        steps = list(stream(target, PROMPT, drafter, settings, acceptance_rule=rule))
        counts[tuple(t for s in steps for t in s.tokens)] += 1
        accepted.update(s.accepted_length for s in steps[1:])
    return counts, accepted


def chi_square_p(counts: Counter, expected: dict, n: int) -> float:
    """Chi-square goodness-of-fit p-value. Cells with expected count < 5 are pooled into
    one cell (merged with the smallest other cell if the pool itself is still < 5).
    An observed outcome of probability 0 returns p = 0."""
    if any(seq not in expected for seq in counts):
        return 0.0
    cells = sorted(expected, key=lambda s: expected[s])
    big = [s for s in cells if n * expected[s] >= 5]
    small = [s for s in cells if n * expected[s] < 5]
    obs = [counts.get(s, 0) for s in big]
    exp = [n * expected[s] for s in big]
    if small:
        o, e = sum(counts.get(s, 0) for s in small), n * sum(expected[s] for s in small)
        if e >= 5 or not big:
            obs.append(o)
            exp.append(e)
        else:
            obs[0] += o
            exp[0] += e
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    df = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def test_process_logits_matches_hf_warpers():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        logits = torch.randn(4, 11, generator=g) * 3
        for temperature, top_p, top_k in [(0.7, 1.0, 0), (1.0, 0.9, 0), (1.5, 0.6, 4), (0.3, 1.0, 2), (2.0, 0.3, 0)]:
            ours = process_logits(logits, temperature, top_p, top_k)
            assert torch.allclose(ours, hf_probs(logits, temperature, top_p, top_k), atol=1e-6)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"T{c['temperature']}-p{c['top_p']}-k{c['top_k']}")
def test_speculative_sampling_matches_target_distribution(target, cfg):
    exact = exact_distribution(target, **cfg)
    counts, accepted = sample_outputs(target, N_SAMPLES, **cfg)
    # Both draft depths were really exercised: drafts accepted at depth 1 and at depth 2.
    verify_steps = sum(accepted.values())
    assert accepted[1] + accepted[2] > 0.2 * verify_steps and accepted[2] > 0.05 * verify_steps, accepted
    p = chi_square_p(counts, exact, N_SAMPLES)
    assert p > PASS_P, f"speculative sampling deviates from the target distribution (chi-square p={p:.2e})"


def wrong_no_renormalisation(tree: DraftTree, probs: torch.Tensor, generator, children=None,
                             records=False) -> Acceptance:
    """WRONG: accepts child c with probability p(c), without renormalising by the mass
    left after earlier rejections; the bonus comes from the residual as it should."""
    children = tree.children()
    node, path, chosen = 0, [], []
    while True:
        p = probs[node].clone()
        moved = False
        for c in children[node]:
            tok = tree.tokens[c]
            if float(torch.rand((), generator=generator)) < float(probs[node, tok]):
                chosen.append(tok)
                path.append(c)
                node, moved = c, True
                break
            p[tok] = 0.0
        if not moved:
            if p.sum() <= 0:
                p = probs[node].clone()
            y = int(torch.multinomial(p / p.sum(), 1, generator=generator))
            chosen.append(y)
            return Acceptance(path, y, chosen)


def wrong_bonus_from_full_p(tree: DraftTree, probs: torch.Tensor, generator, children=None,
                            records=False) -> Acceptance:
    """WRONG (the classic subtle bug): correct acceptance probabilities, but after all
    children are rejected the bonus is drawn from the full p instead of the residual."""
    children = tree.children()
    node, path, chosen = 0, [], []
    while True:
        p = probs[node].clone()
        moved = False
        for c in children[node]:
            tok = tree.tokens[c]
            mass = float(p.sum())
            if mass > 0 and float(torch.rand((), generator=generator)) * mass < float(p[tok]):
                chosen.append(tok)
                path.append(c)
                node, moved = c, True
                break
            p[tok] = 0.0
        if not moved:
            y = int(torch.multinomial(probs[node], 1, generator=generator))
            chosen.append(y)
            return Acceptance(path, y, chosen)


@pytest.mark.parametrize("rule", [wrong_no_renormalisation, wrong_bonus_from_full_p], ids=lambda f: f.__name__)
def test_wrong_acceptance_rule_is_detected(target, rule):
    """The same statistic, the same sample size, a broken rule handed to the loop: it must be rejected."""
    cfg = CONFIGS[0]
    exact = exact_distribution(target, **cfg)
    counts, _ = sample_outputs(target, N_POWER, **cfg, rule=rule)
    p = chi_square_p(counts, exact, N_POWER)
    assert p < FAIL_P, f"the chi-square test failed to detect a wrong acceptance rule (p={p:.2e})"


def _tree(spec: list[tuple[int, int]]) -> DraftTree:
    """spec: (parent, token) per drafted node, parents-first; probs give the order children are tried."""
    tree = DraftTree.root_only(0)
    for k, (parent, tok) in enumerate(spec):
        tree.add(tok, parent, 0.9 - 0.1 * k, 0.0, "serial")
    return tree.check()


def _within(freq: torch.Tensor, p: torch.Tensor, n: int):
    """Per-token check, tolerance 5 standard deviations of a binomial frequency (plus
    1e-9); a token of probability 0 must never appear."""
    tol = 5 * torch.sqrt(p * (1 - p) / n) + 1e-9
    assert torch.all((freq - p).abs() <= tol), (freq, p)
    assert torch.all(freq[p == 0] == 0)


@pytest.mark.parametrize("case", ["mixed", "children_cover_support", "certain_child"])
def test_accept_sampling_first_token_is_distributed_as_p(case):
    V = 7
    # Root children: 3 (likely), 5 (p = 0 at the root), 1 (less likely); node 1 (token 3) has children 2 and 6.
    tree = _tree([(0, 3), (0, 5), (0, 1), (1, 2), (1, 6)])
    probs = torch.zeros(len(tree), V)
    root = {"mixed": [0.05, 0.15, 0.1, 0.4, 0.2, 0.0, 0.1],
            "children_cover_support": [0.0, 0.3, 0.0, 0.7, 0.0, 0.0, 0.0],
            "certain_child": [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]}[case]
    probs[0] = torch.tensor(root)
    probs[1] = torch.tensor([0.1, 0.0, 0.35, 0.05, 0.2, 0.0, 0.3])  # after token 3
    for i in range(2, len(tree)):
        probs[i] = torch.full((V,), 1.0 / V)
    n = 20000
    g = torch.Generator().manual_seed(1234)
    first = torch.zeros(V)
    second_after_3 = torch.zeros(V)
    n_after_3 = 0
    for _ in range(n):
        acc = accept_sampling(tree, probs, g)
        # Well-formed: a chain from the root, tokens and choices consistent.
        assert acc.target_choices == [tree.tokens[c] for c in acc.path] + [acc.bonus]
        assert all(tree.parents[c] == (acc.path[k - 1] if k else 0) for k, c in enumerate(acc.path))
        first[acc.target_choices[0]] += 1
        if acc.path and acc.path[0] == 1:
            second_after_3[acc.target_choices[1]] += 1
            n_after_3 += 1
    _within(first / n, probs[0], n)
    assert n_after_3 > 1000
    # Given the first token was the accepted child 3, the next token has the target's distribution there.
    _within(second_after_3 / n_after_3, probs[1], n_after_3)
