"""Training-time test past the drafted positions (``ttt_steps``) and the LK loss
(``lk_weight``, ``lk_greedy``), on a tiny random target and tiny tensors: the batched
unroll against a plain per-anchor loop that drafts as decoding does, and the LK terms
against their formulas."""
import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F
from test_train import cfg_for, make_shards

from gumiho.drafter import Drafter, DrafterConfig
from gumiho.train.__main__ import main as train_main
from gumiho.train.loop import train
from gumiho.train.objective import LossConfig, draft_loss, lk_greedy_loss, lk_loss, loss_depth, loss_token_counts
from helpers import tiny_target

V, H, L = 96, 32, 12


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", hidden=H, heads=4, kv_heads=2, seed=5, init=0.3)


def tiny_drafter(target, kind):
    # The last state alone (no fused layers): the batch's hidden states are all it reads.
    cfg = DrafterConfig.for_target(target.model.config, kind, num_attention_heads=4, num_key_value_heads=2,
                                   feature_layers=None)
    torch.manual_seed(1)
    d = Drafter(cfg)
    d.set_draft_vocab(torch.arange(64))
    d.attach_target(target.model)
    if cfg.own_head:
        d.init_own_head(target.model)
    return d.eval()


def tiny_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, V, (2, L), generator=g)
    hidden = torch.randn(2, L, H, generator=g)
    loss_mask = torch.ones(2, L)
    loss_mask[0, :4] = 0  # a prompt
    loss_mask[1, 7] = 0
    valid = torch.ones(2, L)
    valid[1, 10:] = 0  # padding
    return {"ids": ids, "hidden": hidden, "loss_mask": loss_mask, "valid": valid}


@torch.no_grad()
def unrolled_by_hand(d, ids, hidden, t, steps):
    """What drafting computes for anchor t of one sequence, one step at a time and with
    no cache: the context's inputs u1_{0..t} = fc(embed(x_{t'+1}), h_{t'}), then each
    serial step m reads the whole sequence so far under a plain causal mask (the
    context and its own chain, nothing else), outputs s_m at its last row, and appends
    u_{m+1} = fc(embed(x_{t+m+1}), s_m) at position t+m. Returns the states s_1..s_steps
    and the inputs u_1..u_{steps+1} at this anchor."""
    n = ids.shape[0]
    tok = lambda i: ids[i:i + 1] if i < n else torch.zeros(1, dtype=torch.long)  # noqa: E731 -- padded as training pads
    seq = [d.project_context(hidden[i:i + 1], tok(i + 1)) for i in range(t + 1)]
    states, inputs = [], [seq[-1][0]]
    for m in range(1, steps + 1):
        x = torch.cat(seq)[None]
        k = x.shape[1]
        causal = torch.tril(torch.ones(k, k, dtype=torch.bool))[None, None]
        out, _ = d.transformer(x, torch.arange(k)[None], causal)
        s = out[0, -1]
        states.append(s)
        u = d.project(s[None], tok(t + m + 1))
        inputs.append(u[0])
        seq.append(u)
    return states, inputs


@torch.no_grad()
def loss_by_hand(d, batch, cfg: LossConfig):
    """The loss of draft_loss from the per-anchor unroll: every draft position's mean
    per-token loss, weighted by decay^(d-1), the drafted positions 1..S+M and the
    unrolled steps S+1..S+k each a term of their own."""
    S, M, k = d.cfg.serial_positions, d.cfg.mlp_heads, cfg.ttt_steps
    w = d._draft_head_weight.float()
    per_term: dict = {}  # (kind, depth) -> list of per-token losses
    for b in range(batch["ids"].shape[0]):
        ids, hidden = batch["ids"][b], batch["hidden"][b]
        for t in range(L - 1):
            states, inputs = unrolled_by_hand(d, ids, hidden, t, S + k)
            heads = d.run_heads(torch.cat([inputs[S - 1], inputs[S]])[None]) if M else []
            preds = [("serial", m, states[m - 1]) for m in range(1, S + 1)]
            preds += [("head", S + 1 + j, h[0]) for j, h in enumerate(heads)]
            preds += [("ttt", S + i, states[S + i - 1]) for i in range(1, k + 1)]
            for kind, depth, pred in preds:
                j = t + depth
                if j >= L or not (batch["loss_mask"][b, j] and batch["valid"][b, j] and batch["valid"][b, t]):
                    continue
                p = (hidden[j] @ w.T).softmax(-1)
                logq = d.train_logits(pred[None])[0].log_softmax(-1)
                value = cfg.ce_weight * -(p * logq).sum()
                if cfg.reg_weight:
                    value = value + cfg.reg_weight * F.smooth_l1_loss(pred, hidden[j])
                if cfg.lk_weight:
                    value = value - cfg.lk_weight * torch.log(torch.minimum(p, logq.exp()).sum())
                per_term.setdefault((kind, depth), []).append(float(value))
    total = sum(cfg.position_decay ** (depth - 1) * sum(v) / len(v) for (_, depth), v in per_term.items())
    return total / sum(cfg.position_decay ** (depth - 1) for (_, depth) in per_term), per_term


@pytest.mark.parametrize("kind,ttt,loss", [
    ("gumiho", 0, LossConfig(noise=0.0)),
    ("gumiho", 2, LossConfig(noise=0.0)),
    ("gumiho", 3, LossConfig(noise=0.0, reg_weight=0.0, ce_weight=1.0, lk_weight=0.5)),
    ("eagle3", 2, LossConfig(noise=0.0, reg_weight=0.0, ce_weight=1.0)),
])
def test_unrolled_loss_equals_a_per_anchor_loop(target, kind, ttt, loss):
    """The batched unroll (step masks, keys concatenated step by step) gives the loss a
    plain loop over anchors gives, each anchor drafted as decoding drafts it: serial
    steps on the drafter's own states, the heads on cat(u_S, u_{S+1}), and the extra
    steps past S scored at the positions they reach."""
    d = tiny_drafter(target, kind)
    batch = tiny_batch()
    cfg = dataclasses.replace(loss, ttt_steps=ttt)
    with torch.no_grad():
        got, info = draft_loss(d, batch, cfg)
    want, per_term = loss_by_hand(d, batch, cfg)
    assert float(got) == pytest.approx(want, rel=1e-4)
    assert len(info["top1"]) == d.cfg.max_depth
    if ttt:
        assert len(info["ttt_top1"]) == ttt and [n for n in info["ttt_count"]] == [
            len(per_term[("ttt", d.cfg.serial_positions + i)]) for i in range(1, ttt + 1)]
        # The unrolled steps change the loss, not the drafted positions' figures.
        with torch.no_grad():
            base, base_info = draft_loss(d, batch, dataclasses.replace(cfg, ttt_steps=0))
        assert float(base) != pytest.approx(float(got), rel=1e-3)
        assert base_info == {k: v for k, v in info.items() if not k.startswith("ttt_")}
    else:
        assert "ttt_top1" not in info


def test_no_unrolled_steps_is_the_default_recipe(target):
    """ttt_steps = 0 is LossConfig's default, and then nothing but the drafted positions
    carries loss: the same value and figures as a config that never names it, and the
    serial states the loop reads equal the batched forward's to float rounding."""
    d = tiny_drafter(target, "gumiho")
    batch = tiny_batch(1)
    assert LossConfig().ttt_steps == 0 and LossConfig().lk_weight == 0 and not LossConfig().lk_greedy
    with torch.no_grad():
        a, ia = draft_loss(d, batch, LossConfig(noise=0.0))
        b, ib = draft_loss(d, batch, LossConfig(noise=0.0, ttt_steps=0))
    assert torch.equal(a, b) and ia == ib
    assert loss_depth(d.cfg, LossConfig()) == d.cfg.max_depth
    assert loss_depth(d.cfg, LossConfig(ttt_steps=9)) == d.cfg.serial_positions + 9


def test_unrolled_steps_under_whole_batch_denominators(target):
    """Data parallel divides by the whole batch's counts (loss_token_counts over
    loss_depth positions, which the unrolled steps can reach past the drafted ones):
    one process holding the whole batch gets the plain loss."""
    d = tiny_drafter(target, "eagle3")  # 7 serial positions: 2 more steps reach depth 9
    batch = tiny_batch(2)
    cfg = LossConfig(noise=0.0, reg_weight=0.0, ce_weight=1.0, ttt_steps=2)
    n = loss_depth(d.cfg, cfg)
    assert n == 9
    with torch.no_grad():
        plain, _ = draft_loss(d, batch, cfg)
        whole, _ = draft_loss(d, batch, cfg, denominators=loss_token_counts(batch, n).tolist())
    assert float(whole) == pytest.approx(float(plain), rel=1e-6)


def test_unrolling_a_drafter_without_serial_steps_is_refused(target):
    d = tiny_drafter(target, "parallel")
    with pytest.raises(ValueError, match="no serial Transformer"):
        draft_loss(d, tiny_batch(), LossConfig(noise=0.0, ttt_steps=1))


def test_lk_loss_by_hand_and_its_minimum():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.3, 0.5])
    # min(p, q) = (0.2, 0.3, 0.2): a sampled draft is accepted with probability 0.7.
    assert float(lk_loss(p.log(), q.log())) == pytest.approx(-math.log(0.7), rel=1e-6)
    assert float(lk_loss(p.log(), p.log())) == pytest.approx(0.0, abs=1e-6)
    # -log alpha >= 0 with equality only at alpha = 1, i.e. q == p: any other q costs more.
    g = torch.Generator().manual_seed(0)
    p = torch.randn(50, generator=g).softmax(-1)
    for _ in range(20):
        other = torch.randn(50, generator=g).softmax(-1)
        assert float(lk_loss(p.log(), other.log())) > 1e-4
        near = (p.log() + 0.05 * torch.randn(50, generator=g)).log_softmax(-1)
        assert 0 < float(lk_loss(p.log(), near)) < float(lk_loss(p.log(), other.log()))
    # Gradient descent on q's logits from a random start goes to q == p.
    logits = torch.randn(50, generator=g, requires_grad=True)
    opt = torch.optim.SGD([logits], lr=2.0)
    start = float(lk_loss(p.log(), logits.detach().log_softmax(-1)))
    for _ in range(300):
        opt.zero_grad()
        lk_loss(p.log(), logits.log_softmax(-1)).backward()
        opt.step()
    # (-log alpha's gradient is total variation's, scaled: L1-like, so plain SGD closes in slowly.)
    assert float(lk_loss(p.log(), logits.detach().log_softmax(-1))) < 0.05 * start
    assert float((logits.detach().softmax(-1) - p).abs().sum()) < 0.1
    # Where the sum underflows (p and q on disjoint supports in float32) the log-space
    # form stays finite, as the direct -log(sum(min)) does not.
    lp = torch.tensor([0.0, -200.0]).log_softmax(-1)
    lq = torch.tensor([-200.0, 0.0]).log_softmax(-1)
    assert math.isfinite(float(lk_loss(lp, lq))) and float(lk_loss(lp, lq)) > 100
    assert float(torch.minimum(lp.exp(), lq.exp()).sum()) == 0.0  # whose log is -inf


def test_lk_greedy_is_lk_against_the_top_tokens_point_mass():
    logq = torch.tensor([[0.1, 0.6, 0.3], [0.25, 0.25, 0.5]]).log()
    top = torch.tensor([1, 0])
    assert lk_greedy_loss(top, logq).tolist() == pytest.approx([-math.log(0.6), -math.log(0.25)], rel=1e-6)
    point_mass = F.one_hot(top, 3).float().log()  # log 0 = -inf off the top token
    torch.testing.assert_close(lk_loss(point_mass, logq), lk_greedy_loss(top, logq))
    # Minimised (at 0) only by a q that puts all its mass on the top token.
    assert float(lk_greedy_loss(top[:1], torch.tensor([[1e-9, 1.0, 1e-9]]).log())) == pytest.approx(0.0, abs=1e-6)


def test_lk_terms_in_the_loss(target):
    """In draft_loss: LK alone is the hand-computed -log sum(min(p, q)) per position
    (loss_by_hand), linear with the other terms, at least the plain acceptance term
    (-log a >= 1 - a), and its greedy form has the top-1 term's value."""
    d = tiny_drafter(target, "gumiho")
    batch = tiny_batch(3)
    base = LossConfig(noise=0.0, ce_weight=0.0, reg_weight=0.0)

    @torch.no_grad()
    def loss(**w):
        return float(draft_loss(d, batch, dataclasses.replace(base, **w))[0])

    lk = loss(lk_weight=1.0)
    assert lk == pytest.approx(loss_by_hand(d, batch, dataclasses.replace(base, lk_weight=1.0))[0], rel=1e-4)
    assert lk > loss(accept_weight=1.0) > 0
    assert loss(ce_weight=1.0, lk_weight=2.0) == pytest.approx(loss(ce_weight=1.0) + 2 * lk, rel=1e-5)
    greedy = loss(lk_weight=1.0, lk_greedy=True)
    assert greedy == pytest.approx(loss(top1_weight=1.0), rel=1e-6)
    assert greedy != pytest.approx(lk, rel=1e-3)


@pytest.fixture(scope="module")
def data(target, tmp_path_factory):
    return make_shards(tmp_path_factory.mktemp("ttt"), target, n_seq=12, length=16)


def test_training_with_both_flags_runs_end_to_end(target, data, tmp_path):
    """A few steps with the serial steps unrolled past the drafted ones and the LK loss:
    the loss is finite and falls, and the summary records the options."""
    loss = LossConfig(noise=0.05, reg_weight=0.0, ce_weight=1.0, lk_weight=1.0, ttt_steps=2)
    summary = train(cfg_for(data, tmp_path / "out", max_steps=12, batch_tokens=200, loss=loss),
                    target.model, "tiny", {1}, log=lambda m: None)
    assert summary["loss_config"]["ttt_steps"] == 2 and summary["loss_config"]["lk_weight"] == 1.0
    hist = [json.loads(line) for line in open(tmp_path / "out" / "training_history.jsonl")]
    assert all(math.isfinite(h["loss"]) for h in hist)
    assert sum(h["loss"] for h in hist[-3:]) < sum(h["loss"] for h in hist[:3])
    assert len(summary["held_out"]["top1_by_position"]) == 7  # the drafted positions only


def test_cli_refuses_bad_unrolling(data, tmp_path, capsys):
    assert train_main(["--data", str(data), "--out", str(tmp_path / "o"), "--ttt-steps", "-1"]) == 2
    assert "--ttt-steps must be 0 or more" in capsys.readouterr().err
    assert train_main(["--data", str(data), "--out", str(tmp_path / "o"), "--kind", "parallel",
                       "--ttt-steps", "2"]) == 2
    assert "the parallel kind has none" in capsys.readouterr().err
    assert train_main(["--data", str(data), "--out", str(tmp_path / "o"), "--lk-weight", "-1"]) == 2
    assert "--lk-weight -1" in capsys.readouterr().err


def test_model_card_names_the_new_terms():
    from gumiho.train.model_card import _loss

    base = {"ce_weight": 1.0, "reg_weight": 0.0, "position_decay": 0.8, "noise": 0.2}
    assert "LK" not in _loss({"loss_config": base}) and "unrolled" not in _loss({"loss_config": base})
    text = _loss({"loss_config": dict(base, lk_weight=0.5, ttt_steps=3)})
    assert "0.5 x -log(acceptance rate of a sampled draft) (LK)" in text and "unrolled 3 steps" in text
    assert "greedy form" in _loss({"loss_config": dict(base, lk_weight=1.0, lk_greedy=True)})
