"""The training objective: the drafter run exactly as it drafts, on cached target
hidden states, and the paper's loss on every draft position.

Notation as in gumiho.drafter: h_i target hidden state at i, x_i token at i.
For a batch of sequences, every position t is an "anchor" (the last position the
target has processed). From anchor t the drafter predicts h_{t+d} for draft
positions d = 1..S+M:

* serial step 1 reads u1_t = fc(embed(x_{t+1}), h_t + noise) causally over
  t' <= t and outputs s1_t ~ h_{t+1};
* serial step m >= 2 reads u_m_t = fc(embed(x_{t+m}), s_{m-1}_t) at position
  t+m-1 and attends to step 1 at t' <= t and to its own chain (steps 2..m at the
  same anchor t): the mask drafting uses (a draft node sees the context and its
  ancestors), so training sees what inference sees ("training-time test");
* MLP head j reads cat(u_S_t, u_{S+1}_t) (the serial inputs of the last two
  path positions; u_1 alone when S = 0) and outputs ~ h_{t+S+1+j}.

Tokens fed along the chain are the real ones (teacher forcing: they are what an
accepted path contains); hidden states fed along it are the drafter's own.

What each position reads, in training and when drafting (gumiho.proposers.learned),
for an anchor t whose token x_{t+1} is the last one the target emitted:

    position 1      train: s1_t from u1 over the context, u1_{t'} = fc(embed(x_{t'+1}), h_{t'})
                    draft: the same (DraftSession.extend builds the context from the
                           target's states only; its last output is s1)
    position m<=S   train: s_m_t from u_m = fc(embed(x_{t+m}), s_{m-1}_t), attending to
                           the context's u1 keys and its own chain
                    draft: the same with the drafted token at depth m-1 in place of
                           x_{t+m} (equal on every path that can be accepted)
    heads S+1..     train and draft: cat(u_S, u_{S+1}), u_{S+1} = fc(embed(x_{t+S+1}), s_S)

So the serial positions are already trained on the drafter's own states for all S
steps they draft (EAGLE-3's "training-time test"): a gumiho drafter unrolls 2 steps,
an eagle3 or serial one 7. ``ttt_steps = k`` unrolls the serial Transformer k steps
further, past the positions it drafts: step S+i reads fc(embed(x_{t+S+i}), s_{S+i-1})
(its own state, as every serial step does) and is scored against h_{t+S+i}, weighted
as position S+i is. Those steps are never drafted; their loss only reaches the
weights the drafted positions use (the layers, fc, and through the chain s_1..s_S and
u_{S+1}, the very input the MLP heads read), asking them for states a Transformer step
can continue from, as EAGLE-3's 7-step unroll does. The heads still read cat(u_S,
u_{S+1}), as when drafting; k = 0 is the recipe above, unchanged.

With fused target features (``feature_layers``), u1 reads fuse(f_t) in place of
h_t, f_t being the target's states after those layers (gumiho.train.states); the
later steps still feed the drafter's own H-wide outputs.

Loss per position d:

    reg_weight * SmoothL1(pred, h_{t+d})                       (feature regression)
  + ce_weight  * CE(softmax(W h_{t+d}), softmax(W pred))        (soft labels)
  + top1_weight * -log softmax(W pred)[argmax W h_{t+d}]        (the accepted token)
  + topk_weight * -sum_{x in topK(p)} p(x) log q(x)             (HASS: the target's top-K)
  + accept_weight * (1 - sum_x min(p(x), q(x)))                 (acceptance rate)
  + lk_weight * -log sum_x min(p(x), q(x))                      (LK: log acceptance rate)

with p = softmax(W h_{t+d}) the target's distribution and q = softmax(W pred) the
drafter's (an eagle3 drafter's own head: q = softmax(W' norm(pred)), and no regression). The top-K term is the soft cross-entropy restricted to the K tokens the
target ranks highest (HASS's distillation): the tail of p, which no draft tree ever
proposes, stops pulling q. The acceptance term is exact, not a surrogate: speculative
sampling accepts a token drawn from q with probability min(1, p/q), so a single draft
is accepted with probability sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)),
one minus the total variation distance. Its gradient moves mass only from tokens q
over-predicts to tokens it under-predicts, and is zero where q already matches p.

The LK term (arXiv 2602.23881) is the same acceptance rate alpha = sum_x min(p, q)
through a log: -log alpha >= 0, zero exactly when alpha = 1, i.e. when q == p. Its
gradient is -(1/alpha) d alpha: the plain term's direction scaled by 1/alpha, so it
pushes hardest where the drafter is accepted least (early in training, and at the
later, harder positions) instead of fading there as 1 - alpha's does. It is computed
in log space, log alpha = logsumexp_x min(log p(x), log q(x)), which stays finite
when alpha underflows. With ``lk_greedy`` the target distribution is the one greedy
verification uses, the point mass on its top token y* (within the draft vocabulary):
then sum_x min(delta_{y*}(x), q(x)) = q(y*), the probability that a token drawn from
q is the one greedy verification accepts, and the loss is -log q(y*), the same value
as the top-1 term's. (The draft's argmax, which greedy drafting proposes, is accepted
iff it is y*, a step function of q; -log q(y*) is the smooth quantity whose
minimisation raises q(y*) until y* is the argmax.)

all over the draft vocabulary (FR-Spec: the frequent tokens only, which is what the
drafter can propose anyway, and keeps the 49k-wide LM head off the CPU's critical
path). The paper's loss is reg 1, ce 0.1; EAGLE-3 drops the regression (ce only),
which it credits with most of its gain: a regressed hidden state is only a means,
the token the target picks is what verification checks. The top-1 term aims at
greedy acceptance directly (the draft is accepted iff its top token is the
target's). Position weights decay geometrically: later positions are harder and
matter less (they are only reached when all earlier ones were accepted).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from ..drafter import Drafter


@dataclass(slots=True)  # an unknown setting raises (as TreeSettings)
class LossConfig:
    ce_weight: float = 0.1
    position_decay: float = 0.8  # weight of draft position d is decay**(d-1)
    noise: float = 0.2  # uniform noise U(-noise/2, noise/2) * |h| scale added to input hidden states (paper)
    reg_weight: float = 1.0  # SmoothL1 feature regression (0: cross-entropy only, EAGLE-3)
    top1_weight: float = 0.0  # hard cross-entropy on the target's top token (greedy acceptance)
    topk_weight: float = 0.0  # soft cross-entropy over the target's top-K tokens only (HASS)
    topk: int = 10  # K of the top-K term
    accept_weight: float = 0.0  # 1 - sum(min(p, q)): one minus a sampled draft's acceptance rate
    lk_weight: float = 0.0  # -log sum(min(p, q)): LK, the log of a sampled draft's acceptance rate
    lk_greedy: bool = False  # LK against the target's top token's point mass: -log q(y*)
    ttt_steps: int = 0  # serial steps unrolled past the drafted positions, each with a loss


def lk_loss(t_logp: torch.Tensor, d_logp: torch.Tensor) -> torch.Tensor:
    """-log sum_x min(p(x), q(x)) over the last axis, from log p and log q: minus the
    log of the probability that speculative sampling accepts one token drawn from q.
    min commutes with the monotone log, so log sum_x min(p, q) =
    logsumexp_x min(log p(x), log q(x)), finite even where the sum underflows."""
    return -torch.logsumexp(torch.minimum(t_logp, d_logp), dim=-1)


def lk_greedy_loss(t_top: torch.Tensor, d_logp: torch.Tensor) -> torch.Tensor:
    """-log q(y*) for the target's top token y* [N] and log q [N, V]: the LK loss with p
    the point mass on y* (greedy verification), sum_x min(delta_{y*}(x), q(x)) = q(y*)."""
    return -d_logp.gather(-1, t_top[:, None])[:, 0]


def loss_depth(drafter_cfg, loss_cfg: LossConfig) -> int:
    """How many draft positions carry loss: the drafter's, or as many as the serial
    steps unrolled past them reach."""
    return max(drafter_cfg.max_depth, drafter_cfg.serial_positions + loss_cfg.ttt_steps)


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_x min(p(x), q(x)) over the last axis: the probability that speculative
    sampling accepts one token drawn from the draft distribution q against the target
    distribution p (accepting x with probability min(1, p(x)/q(x)))."""
    return torch.minimum(p, q).sum(-1)


def step_mask(L: int, n_prev_steps: int, device) -> torch.Tensor:
    """[1,1,L,(n_prev_steps+1)*L] bool for serial step m = n_prev_steps+1 >= 1.

    Block 0 (step 1 keys): causal, key t' <= t. Blocks 1.. (steps 2..m keys):
    only the same anchor, key t' == t."""
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=device))
    if n_prev_steps == 0:
        return causal[None, None]
    eye = torch.eye(L, dtype=torch.bool, device=device)
    return torch.cat([causal] + [eye] * n_prev_steps, dim=1)[None, None]


def draft_forward(drafter: Drafter, ids: torch.Tensor, states: torch.Tensor, noise: float = 0.0,
                  ttt_steps: int = 0):
    """Predicted hidden states for every anchor and draft position.

    ids [B, L] long; states [B, L, feature_width]: the target's final-norm hidden
    states, or its fused feature layers' for a drafter with ``feature_layers``.
    Returns a list over d = 1..S+M of tensors [B, L, H]; entry [b, t] predicts
    h_{t+d} (garbage where t+d >= L, masked by the loss). With ``ttt_steps`` = k the
    list goes on with the k serial steps unrolled past the drafted ones, predicting
    h_{t+S+1} .. h_{t+S+k} (after the heads' entries, which predict the same
    positions: the heads do not read these steps)."""
    cfg = drafter.cfg
    B, L = ids.shape
    dev = states.device
    h_in = states.to(drafter.weight_dtype)
    if noise > 0 and drafter.training:
        h_in = h_in + (torch.rand_like(h_in) - 0.5) * noise
    # Token x_{t+k} for each anchor t (padded with 0 past the end; masked later).
    def shifted(k):
        return F.pad(ids[:, k:], (0, k), value=0) if k < L else torch.zeros_like(ids)

    S = cfg.serial_positions
    if ttt_steps and (S == 0 or cfg.num_layers == 0):
        raise ValueError(f"a {cfg.kind} drafter has no serial Transformer to unroll: ttt_steps must be 0")
    preds = []
    u_prev = drafter.project_context(h_in, shifted(1))  # u1
    us = [u_prev]
    if S > 0:
        past = None
        s = None
        # Steps 1..S are the drafted positions; S+1..S+ttt_steps the extra unrolled ones,
        # the same computation one step further each (their u_{m+1} past the last is not needed).
        for m in range(1, S + ttt_steps + 1):
            u = us[-1]
            pos = torch.arange(L, device=dev)[None] + (m - 1)
            out, new = drafter.transformer(u, pos, step_mask(L, m - 1, dev), past)
            past = new if past is None else [(torch.cat([pk, nk], 2), torch.cat([pv, nv], 2))
                                             for (pk, pv), (nk, nv) in zip(past, new)]
            s = out
            preds.append(s)
            if m <= S or m < S + ttt_steps:  # u_{S+1} is also what the heads read
                us.append(drafter.project(s, shifted(m + 1)))  # u_{m+1}
    extra = preds[S:]
    preds = preds[:S]
    if cfg.mlp_heads > 0:
        if cfg.head_inputs == 2:
            head_in = torch.cat([us[S - 1], us[S]], dim=-1)
        else:
            head_in = us[S]
        preds.extend(drafter.run_heads(head_in))
    return preds + extra


def loss_token_counts(batch: dict, n_positions: int) -> torch.Tensor:
    """[n_positions] float64: for d = 1..n_positions, how many anchors of ``batch``
    carry loss at draft position d (the target position t + d is an answer token and
    both t and t + d are real tokens): the denominator of draft position d's mean in
    :func:`draft_loss`. It depends on the masks only, so data-parallel processes can
    add theirs up before any forward and divide by the whole batch's count."""
    mask, valid = batch["loss_mask"], batch["valid"]
    L = valid.shape[1]
    out = torch.zeros(n_positions, dtype=torch.float64)
    for d in range(1, min(n_positions, L - 1) + 1):
        out[d - 1] = float((mask[:, d:] * valid[:, d:] * valid[:, : L - d]).sum())
    return out


def _full_vocab_top(drafter: Drafter, hidden: torch.Tensor, rows: int = 256) -> torch.Tensor:
    """The target's top token id over its whole vocabulary, for each row of ``hidden``
    (in chunks: a full-vocabulary logits matrix for a whole batch is large)."""
    if not hidden.shape[0]:
        return torch.zeros(0, dtype=torch.long, device=hidden.device)
    return torch.cat([drafter.full_logits(hidden[i:i + rows]).argmax(-1) for i in range(0, hidden.shape[0], rows)])


def draft_loss(drafter: Drafter, batch: dict, loss_cfg: LossConfig, exact_top1: bool = False,
               denominators: Sequence[float] | None = None):
    """Loss and per-position top-1 accuracy on a batch with keys ids [B,L],
    hidden [B,L,H] (float), loss_mask [B,L] (1 = answer token), valid [B,L] (1 = not padding),
    and, for a drafter with fused features, features [B,L,k*H].

    The loss is sum_d w_d * mean_d / sum_d w_d over the positions d that carry loss,
    mean_d being the per-token loss of position d averaged over this batch's tokens.
    ``denominators`` (data-parallel training) replaces this batch's token counts by the
    whole global batch's (:func:`loss_token_counts` summed over processes, for
    :func:`loss_depth` positions), and which
    positions carry loss is then decided on the whole batch too: each process's loss is
    its share of the global batch's loss, and the sum of the processes' gradients is
    the gradient one process would compute on the whole batch.

    With ``loss_cfg.ttt_steps`` = k, the k serial steps unrolled past the drafted
    positions (:func:`draft_forward`) add their terms to the same sum, step i weighted
    as position S+i; their figures come apart, as ``ttt_top1``, ``ttt_count`` and
    ``ttt_loss``, so that ``top1`` stays the drafted positions' only.

    The loss, and by default the top-1 figure, live in the draft vocabulary: there a
    position counts as a hit when the drafter's top token is the target's top token
    *among the draft tokens*. With ``exact_top1`` the top-1 figure is agreement with the
    target's top token over its whole vocabulary, the token verification accepts, so a
    position whose true top token lies outside the draft vocabulary is a miss (the
    held-out reports use this; it costs a full-vocabulary product per answer token)."""
    ids, hidden, loss_mask, valid = batch["ids"], batch["hidden"], batch["loss_mask"], batch["valid"]
    B, L, H = hidden.shape
    if drafter.cfg.own_head and loss_cfg.reg_weight:
        raise ValueError(f"a {drafter.cfg.kind} drafter has no hidden state to regress onto: reg_weight must be 0")
    if drafter.cfg.feature_layers:
        if batch.get("features") is None:
            raise ValueError("this drafter reads fused target features: the batch needs 'features'")
        preds = draft_forward(drafter, ids, batch["features"], loss_cfg.noise, loss_cfg.ttt_steps)
    else:
        preds = draft_forward(drafter, ids, hidden, loss_cfg.noise, loss_cfg.ttt_steps)
    # Draft position of each prediction: 1..S+M, then the unrolled steps' S+1..S+k.
    n_drafted = len(preds) - loss_cfg.ttt_steps
    depths = list(range(1, n_drafted + 1)) + [drafter.cfg.serial_positions + 1 + i
                                               for i in range(loss_cfg.ttt_steps)]
    hidden_f = hidden.float()
    w_draft = drafter._draft_head_weight.float()
    # The target's distribution at position j is the same label for every draft
    # position d that lands on j (anchor t = j - d), so compute it once per batch, for
    # the answer positions only, and look rows up per d: row_of[b, j] indexes it.
    answer = (loss_mask * valid).bool()
    row_of = torch.full(answer.shape, -1, dtype=torch.long, device=answer.device)
    row_of[answer] = torch.arange(int(answer.sum()), device=answer.device)
    with torch.no_grad():
        t_logits_all = hidden_f[answer] @ w_draft.T
        t_prob_all = t_logits_all.softmax(-1)
        t_top_all = t_logits_all.argmax(-1)
        t_logp_all = t_logits_all.log_softmax(-1) if loss_cfg.lk_weight and not loss_cfg.lk_greedy else None
        true_top_all = _full_vocab_top(drafter, hidden_f[answer]) if exact_top1 else None
    total = hidden.new_zeros((), dtype=torch.float32)
    weight_sum = 0.0
    # Per position figures: the drafted positions', then the unrolled steps' apart.
    figures = {"top1": [], "count": [], "loss": [], "ttt_top1": [], "ttt_count": [], "ttt_loss": []}
    for i, (d, pred) in enumerate(zip(depths, preds)):
        prefix = "" if i < n_drafted else "ttt_"
        acc, counts, losses = (figures[prefix + name] for name in ("top1", "count", "loss"))
        w = loss_cfg.position_decay ** (d - 1)
        if denominators is not None and denominators[d - 1] > 0:
            weight_sum += w  # the whole batch has loss here, whether or not this share has
        if d >= L:
            acc.append(0.0)
            counts.append(0)
            losses.append(0.0)
            continue
        p = pred[:, : L - d].float()
        tgt = hidden_f[:, d:]
        m = (loss_mask[:, d:] * valid[:, d:] * valid[:, : L - d]).float()
        n = m.sum()
        if n == 0:
            acc.append(0.0)
            counts.append(0)
            losses.append(0.0)
            continue
        # Only answer positions carry loss: gather them first, so the vocabulary-wide
        # matmuls below run on those rows alone.
        sel = m.bool()
        p, tgt = p[sel], tgt[sel]
        rows = row_of[:, d:][sel]  # every selected target position is an answer position
        t_prob, t_top = t_prob_all[rows], t_top_all[rows]
        d_logp = drafter.train_logits(p).log_softmax(-1)
        per_token = loss_cfg.ce_weight * -(t_prob * d_logp).sum(-1)
        if loss_cfg.reg_weight:
            per_token = per_token + loss_cfg.reg_weight * F.smooth_l1_loss(p, tgt, reduction="none").mean(-1)
        if loss_cfg.top1_weight:
            per_token = per_token - loss_cfg.top1_weight * d_logp.gather(-1, t_top[:, None])[:, 0]
        if loss_cfg.topk_weight:
            k = min(loss_cfg.topk, t_prob.shape[-1])
            top_p, top_i = t_prob.topk(k, dim=-1)
            per_token = per_token - loss_cfg.topk_weight * (top_p * d_logp.gather(-1, top_i)).sum(-1)
        if loss_cfg.accept_weight:
            per_token = per_token + loss_cfg.accept_weight * (1.0 - acceptance_rate(t_prob, d_logp.exp()))
        if loss_cfg.lk_weight:
            lk = lk_greedy_loss(t_top, d_logp) if loss_cfg.lk_greedy else lk_loss(t_logp_all[rows], d_logp)
            per_token = per_token + loss_cfg.lk_weight * lk
        per = per_token.sum() / (n if denominators is None else denominators[d - 1])
        total = total + w * per
        if denominators is None:
            weight_sum += w
        with torch.no_grad():
            if exact_top1:
                hit = (drafter.draft_vocab_ids[d_logp.argmax(-1)] == true_top_all[rows]).float()
            else:
                hit = (d_logp.argmax(-1) == t_top).float()
            acc.append(float(hit.sum() / n))
            counts.append(int(n))
            losses.append(float(per))
    if not loss_cfg.ttt_steps:
        figures = {k: v for k, v in figures.items() if not k.startswith("ttt_")}
    return total / max(weight_sum, 1e-9), figures
