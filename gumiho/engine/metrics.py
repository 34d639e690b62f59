"""What we compute from steps. The words mean the same everywhere (code, UI, docs):

* tau = new tokens / target forwards. The prefill counts as a forward that produced
  one token, and every verify forward's bonus token counts, so vanilla decoding has
  tau = 1 exactly and speculative decoding tau = 1 + mean accepted draft length
  (before EOS / length cuts).
* acceptance at position d (unconditional) = share of verify steps whose accepted
  draft length is >= d.
* conditional acceptance at position d = acceptance at d / acceptance at d-1: the
  share of steps that reached position d-1 and also accepted position d.
* speedup = vanilla wall time / speculative wall time (computed by the benchmark,
  same prompts, same process) when both wrote the same number of tokens on every
  prompt (greedy decoding); otherwise (sampling) speculative tokens/s / vanilla
  tokens/s, the "throughput" kind (:func:`speedup`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..heads import HeadFamily


@dataclass
class GenerationStats:
    new_tokens: int = 0
    target_forwards: int = 0
    verify_steps: int = 0  # verify forwards that carried a draft
    wall_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    accepted_hist: list[int] = field(default_factory=list)  # accepted_hist[k] = verify steps that accepted exactly k
    drafted_nodes: int = 0  # drafted tokens verified, over all verify steps
    # Accepted draft tokens by the proposer of each ("serial", "mlp", "copy"), and
    # the drafted nodes the copy proposer added (its share of drafted_nodes).
    accepted_by_head: dict = field(default_factory=dict)
    copy_nodes: int = 0
    # copied_by_position[d-1] = verify steps whose accepted token at draft position d
    # was copied from the context: the copy proposer's part of acceptance at d.
    copied_by_position: list[int] = field(default_factory=list)

    @property
    def mean_drafted(self) -> float:
        """Drafted tokens per verify step (a cost-aware tree varies it step by step)."""
        return self.drafted_nodes / self.verify_steps if self.verify_steps else 0.0

    @property
    def tau(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def acceptance_by_position(self, depth: int | None = None) -> list[float]:
        return acceptance_by_position(self.accepted_hist, depth)

    def conditional_acceptance_by_position(self, depth: int | None = None) -> list[float]:
        return conditional_acceptance(self.acceptance_by_position(depth))

    def copied_acceptance_by_position(self, depth: int) -> list[float]:
        """[c_1, ..., c_D]: c_d = share of verify steps whose accepted token at position
        d was copied from the context, the copy proposer's part of the unconditional
        acceptance a_d (a_d - c_d is the drafter's heads')."""
        steps = sum(self.accepted_hist)
        if not steps:
            return [0.0] * depth
        counts = (list(self.copied_by_position) + [0] * depth)[:depth]
        return [c / steps for c in counts]

    def merge(self, other: "GenerationStats") -> "GenerationStats":
        hist = _add_lists(self.accepted_hist, other.accepted_hist)
        return GenerationStats(self.new_tokens + other.new_tokens, self.target_forwards + other.target_forwards,
                               self.verify_steps + other.verify_steps, self.wall_s + other.wall_s,
                               self.draft_s + other.draft_s, self.verify_s + other.verify_s, hist,
                               self.drafted_nodes + other.drafted_nodes,
                               {h: self.accepted_by_head.get(h, 0) + other.accepted_by_head.get(h, 0)
                                for h in {**self.accepted_by_head, **other.accepted_by_head}},
                               self.copy_nodes + other.copy_nodes,
                               _add_lists(self.copied_by_position, other.copied_by_position))


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


SPEEDUP_WALL_TIME = "wall time"
SPEEDUP_THROUGHPUT = "throughput"


def speedup_kind(pairs: Iterable[tuple]) -> str:
    """Which speedup compares runs ``pairs`` = (vanilla new tokens, vanilla wall s,
    method new tokens, method wall s) per prompt: "wall time" when every prompt got
    as many tokens from both (greedy decoding, or sampling that hit the length limit
    every time), else "throughput". Sampled runs write texts of different lengths,
    and taking longer to write more tokens is not slowness (a token count of None,
    from records that kept none, counts as equal)."""
    return SPEEDUP_WALL_TIME if all(p[0] == p[2] for p in pairs) else SPEEDUP_THROUGHPUT


def speedup(pairs: Iterable[tuple], kind: str | None = None) -> float | None:
    """The method's speedup over vanilla on ``pairs`` (see :func:`speedup_kind`, which
    decides ``kind`` when it is None): vanilla's summed wall time over the method's,
    or the method's tokens per second over vanilla's, both over the summed prompts.
    None when a time or a token count is 0."""
    pairs = list(pairs)
    kind = kind or speedup_kind(pairs)
    v_wall, m_wall = sum(p[1] for p in pairs), sum(p[3] for p in pairs)
    if m_wall <= 0 or v_wall <= 0:
        return None
    if kind == SPEEDUP_WALL_TIME:
        return v_wall / m_wall
    v_tokens, m_tokens = sum(p[0] for p in pairs), sum(p[2] for p in pairs)
    return (m_tokens / m_wall) / (v_tokens / v_wall) if v_tokens > 0 else None


def acceptance_by_position(accepted_hist: list[int], depth: int | None = None) -> list[float]:
    """[a_1, ..., a_D] with a_d = P(accepted length >= d) over verify steps."""
    total = sum(accepted_hist)
    depth = depth if depth is not None else max(len(accepted_hist) - 1, 0)
    if total == 0:
        return [0.0] * depth
    out = []
    for d in range(1, depth + 1):
        out.append(sum(accepted_hist[d:]) / total)
    return out


def conditional_acceptance(unconditional: list[float]) -> list[float]:
    """a_d / a_{d-1} (a_0 = 1); 0 where no step reached d-1."""
    out, prev = [], 1.0
    for a in unconditional:
        out.append(a / prev if prev > 0 else 0.0)
        prev = a
    return out


def summarize(steps: Iterable, depth: int = 0) -> GenerationStats:
    st = GenerationStats(accepted_hist=[0] * (depth + 1))
    for s in steps:
        if s.finish_reason == "stopped" and not s.emitted:
            continue
        st.new_tokens += len(s.emitted)
        for e in s.emitted:
            if e.head != HeadFamily.TARGET:
                st.accepted_by_head[e.head] = st.accepted_by_head.get(e.head, 0) + 1
        st.target_forwards += 1
        st.draft_s += s.draft_s
        st.verify_s += s.verify_s
        st.wall_s = max(st.wall_s, s.elapsed_s)
        if s.step > 0 and s.drafted > 0:
            st.verify_steps += 1
            st.drafted_nodes += s.drafted
            st.copy_nodes += s.copy_nodes
            k = s.accepted_length
            if k >= len(st.accepted_hist):
                st.accepted_hist.extend([0] * (k + 1 - len(st.accepted_hist)))
            st.accepted_hist[k] += 1
            for d in s.copied_positions:
                if d > len(st.copied_by_position):
                    st.copied_by_position.extend([0] * (d - len(st.copied_by_position)))
                st.copied_by_position[d - 1] += 1
    return st
