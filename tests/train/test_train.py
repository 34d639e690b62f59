"""Drafter training on a tiny random target: the loss goes down, a resumed run
continues bit for bit, and bad data is refused with a clear message."""
import json
from collections import Counter

import pytest
import torch

from gumiho import GumihoError
from gumiho.drafter import Drafter
from gumiho.train import data as tdata
from gumiho.train import shards
from gumiho.train.__main__ import main as train_main
from gumiho.train.config import TrainConfig, mixed_precision
from gumiho.train.loop import train
from gumiho.train.objective import LossConfig, draft_forward
from gumiho.train.resume import checkpoint_path
from helpers import tiny_target


def make_shards(tmp_path, target, n_seq=24, length=30, seed=0, vary_length=False):
    """Shards from the tiny target's own greedy-ish continuations: hidden states are
    real forwards of the target, so the drafter has something learnable. With
    ``vary_length`` each answer has 4 to ``length`` tokens."""
    g = torch.Generator().manual_seed(seed)
    out = tmp_path / "data"
    out.mkdir()
    ids_l, masks, hiddens = [], [], []
    for i in range(n_seq):
        prompt = torch.randint(2, 96, (6,), generator=g).tolist()
        n_new = int(torch.randint(4, length + 1, (1,), generator=g)) if vary_length else length
        with torch.no_grad():
            seq = target.model.generate(torch.tensor([prompt]), max_new_tokens=n_new, do_sample=False,
                                        min_new_tokens=n_new, pad_token_id=0)[0].tolist()
            h = target.model.base_model(torch.tensor([seq])).last_hidden_state[0]
        ids_l.append(seq)
        masks.append([0] * len(prompt) + [1] * (len(seq) - len(prompt)))
        hiddens.append(h)
        if len(ids_l) == 12:
            shards.write_shard(shards.shard_path(out, i // 12), shards.pack_sequences(ids_l, masks, hiddens))
            ids_l, masks, hiddens = [], [], []
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    target = tiny_target("llama", hidden=32, heads=4, kv_heads=2, seed=2, init=0.3)
    return target, make_shards(tmp, target)


def cfg_for(data, out, kind="gumiho", **kw):
    base = dict(data=str(data), out=str(out), kind=kind, epochs=20, batch_tokens=400, max_len=64, lr=3e-3,
                warmup_steps=2, draft_vocab=64, eval_fraction=0.1, checkpoint_every=1000, seed=0, precision="fp32",
                loss=LossConfig(noise=0.05), drafter_overrides={"num_attention_heads": 4, "num_key_value_heads": 2})
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("kind,precision", [("gumiho", "fp32"), ("serial", "fp32"), ("parallel", "fp32"),
                                            ("gumiho", "bf16")])
def test_training_lowers_loss_and_saves_a_loadable_drafter(setup, tmp_path, kind, precision):
    target, data = setup
    summary = train(cfg_for(data, tmp_path / kind, kind, max_steps=30, precision=precision), target.model, "tiny", {1},
                    log=lambda m: None)
    assert summary["mixed_precision"] == ("bf16" if precision == "bf16" else "no")
    hist = [json.loads(l) for l in open(tmp_path / kind / "training_history.jsonl")]
    first = sum(h["loss"] for h in hist[:5]) / 5
    last = sum(h["loss"] for h in hist[-5:]) / 5
    assert last < 0.95 * first, (first, last)  # the soft-CE term keeps the target entropy: a floor
    d = Drafter.load(str(tmp_path / kind)).attach_target(target.model)
    assert d.cfg.kind == kind and d.cfg.draft_vocab_size == 64
    assert summary["held_out"]["top1_by_position"][0] > 0.05


def test_eagle3_trains_on_fused_layers_with_cross_entropy_alone(setup, tmp_path):
    """The eagle3 kind: fused target layers computed on the fly from text shards, its own
    norm and LM head started from the target's, EAGLE-3's loss (cross-entropy, no
    regression); the saved drafter loads and drafts losslessly. A regression weight is
    refused: its output is not the target's hidden state."""
    from gumiho import GenerationSettings, stream
    from gumiho.train.__main__ import loss_weights

    target, data = setup
    cfg = cfg_for(data, tmp_path / "e3", "eagle3", max_steps=30, loss=LossConfig(noise=0.05, ce_weight=1.0,
                                                                                   reg_weight=0.0))
    summary = train(cfg, target.model, "tiny", {1}, log=lambda m: None)
    hist = [json.loads(l) for l in open(tmp_path / "e3" / "training_history.jsonl")]
    assert sum(h["loss"] for h in hist[-5:]) < 0.95 * sum(h["loss"] for h in hist[:5])
    d = Drafter.load(str(tmp_path / "e3")).attach_target(target.model)
    assert d.cfg.kind == "eagle3" and d.cfg.feature_layers == (1, 2) and d.lm_head.weight.shape == (64, 32)
    assert d.draft_vocab_ids.tolist() == sorted(d.draft_vocab_ids.tolist())  # id order, as EAGLE-3's d2t
    assert summary["held_out"]["top1_by_position"][0] > 0.05
    prompt = [5, 17, 33, 2, 9]
    ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=20)) for t in s.tokens]
    assert [t for s in stream(target, prompt, d, GenerationSettings(max_new_tokens=20)) for t in s.tokens] == ref
    assert loss_weights("eagle3", None, None) == (1.0, 0.0) and loss_weights("gumiho", None, None) == (0.1, 1.0)
    with pytest.raises(GumihoError, match="--reg-weight must be 0"):
        loss_weights("eagle3", None, 1.0)
    with pytest.raises(ValueError, match="reg_weight must be 0"):
        train(cfg_for(data, tmp_path / "e3-reg", "eagle3", max_steps=2), target.model, "tiny", {1},
              log=lambda m: None)


def assert_same_checkpoint(out_a, out_b, step: int):
    """Both runs' checkpoints are at ``step`` with bit-identical drafter weights."""
    a = torch.load(checkpoint_path(out_a), weights_only=False)
    b = torch.load(checkpoint_path(out_b), weights_only=False)
    assert a["step"] == b["step"] == step
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_is_bit_for_bit(setup, tmp_path, precision):
    target, data = setup
    full = cfg_for(data, tmp_path / "full", max_steps=8, checkpoint_every=1000, precision=precision)
    train(full, target.model, "tiny", {1}, log=lambda m: None)
    paused = cfg_for(data, tmp_path / "paused", max_steps=8, stop_at_step=3, checkpoint_every=1000,
                     precision=precision)
    train(paused, target.model, "tiny", {1}, log=lambda m: None)
    assert torch.load(checkpoint_path(paused.out), weights_only=False)["step"] == 3
    paused.stop_at_step = None
    summary = train(paused, target.model, "tiny", {1}, log=lambda m: None)
    assert_same_checkpoint(full.out, paused.out, step=8)
    # The history and the summary cover the whole run, not just its last session.
    hist = {name: [json.loads(l) for l in open(tmp_path / name / "training_history.jsonl")]
            for name in ("full", "paused")}
    assert [h["step"] for h in hist["paused"]] == list(range(1, 9))
    assert [h["loss"] for h in hist["paused"]] == [h["loss"] for h in hist["full"]]
    walls = [h["wall_s"] for h in hist["paused"]]
    assert walls == sorted(walls) and summary["wall_s"] >= walls[-1]
    full_summary = json.loads(open(tmp_path / "full" / "training_summary.json").read())
    assert summary["tokens_seen"] == full_summary["tokens_seen"] > 0


def test_pause_in_warmup_then_set_the_length(setup, tmp_path):
    """A run paused during warm-up (--stop-at-step) and continued with another
    --max-steps ends bit-for-bit where a run given that length from the start ends:
    the schedule reads the total only after warm-up. This is how a time-boxed run
    measures its step time before choosing its length."""
    target, data = setup
    direct = cfg_for(data, tmp_path / "direct", max_steps=9, warmup_steps=5, checkpoint_every=1000)
    train(direct, target.model, "tiny", {1}, log=lambda m: None)
    probe = cfg_for(data, tmp_path / "probe", max_steps=1000, warmup_steps=5, stop_at_step=3, checkpoint_every=1000)
    train(probe, target.model, "tiny", {1}, log=lambda m: None)
    probe.stop_at_step, probe.max_steps = None, 9
    train(probe, target.model, "tiny", {1}, log=lambda m: None)
    assert_same_checkpoint(direct.out, probe.out, step=9)


def test_sigterm_pauses_with_a_checkpoint(setup, tmp_path, monkeypatch):
    """SIGTERM during training (a scheduler's or a deadline's): the run stops after
    the current step with a checkpoint and a saved drafter, the signal handlers are
    put back, and rerunning the command ends bit-for-bit where an uninterrupted run
    ends."""
    import os
    import signal

    from gumiho.train import data as tdata

    target, data = setup
    full = cfg_for(data, tmp_path / "full", max_steps=8)
    train(full, target.model, "tiny", {1}, log=lambda m: None)
    real, calls = tdata.collate, []

    def collate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # while step 3 is being prepared
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(tdata, "collate", collate)
    cut = cfg_for(data, tmp_path / "cut", max_steps=8)
    logs = []
    summary = train(cut, target.model, "tiny", {1}, log=logs.append)
    assert summary["stopped_early"] and summary["steps"] == 3
    assert any("on SIGTERM" in m for m in logs)
    assert (tmp_path / "cut" / "model.safetensors").exists()
    assert signal.getsignal(signal.SIGTERM) is before
    monkeypatch.setattr(tdata, "collate", real)
    train(cut, target.model, "tiny", {1}, log=lambda m: None)
    assert_same_checkpoint(full.out, cut.out, step=8)


def test_init_from_continues_a_trained_drafter(setup, tmp_path):
    """--init-from starts from the saved weights (not a fresh drafter: its first
    losses are those of the trained one) and keeps their draft vocabulary; a
    drafter of another kind is refused with a clear message."""
    target, data = setup
    first = train(cfg_for(data, tmp_path / "first", max_steps=30), target.model, "tiny", {1}, log=lambda m: None)
    fresh_loss = json.loads(open(tmp_path / "first" / "training_history.jsonl").readline())["loss"]
    more = train(cfg_for(data, tmp_path / "more", max_steps=3, warmup_steps=1, draft_vocab=32,
                         init_from=str(tmp_path / "first")), target.model, "tiny", {1}, log=lambda m: None)
    assert more["init_from"] == str(tmp_path / "first")
    continued_loss = json.loads(open(tmp_path / "more" / "training_history.jsonl").readline())["loss"]
    assert continued_loss < 0.9 * fresh_loss, (fresh_loss, continued_loss)
    a = Drafter.load(str(tmp_path / "first"))
    b = Drafter.load(str(tmp_path / "more"))
    assert torch.equal(a.draft_vocab_ids, b.draft_vocab_ids) and b.cfg.draft_vocab_size == 64
    assert more["held_out"]["top1_by_position"][0] >= first["held_out"]["top1_by_position"][0] - 0.05
    with pytest.raises(GumihoError, match="does not fit this run.*kind: gumiho there, serial here"):
        train(cfg_for(data, tmp_path / "wrong", kind="serial", max_steps=1, init_from=str(tmp_path / "first")),
              target.model, "tiny", {1}, log=lambda m: None)
    with pytest.raises(GumihoError, match="does not exist"):
        train(cfg_for(data, tmp_path / "none", max_steps=1, init_from=str(tmp_path / "nowhere")),
              target.model, "tiny", {1}, log=lambda m: None)


def test_precision_choice():
    assert mixed_precision("fp32") == "no" and mixed_precision("bf16") == "bf16"
    assert mixed_precision("auto") in ("no", "bf16")
    with pytest.raises(GumihoError, match="precision must be"):
        mixed_precision("fp8")


def test_serial_steps_see_only_context_and_own_chain(setup):
    """Changing tokens after anchor t+m must not change the step-m prediction at t
    (no peeking at the future), while the chain's own teacher-forced tokens do."""
    target, _ = setup
    torch.manual_seed(0)
    from gumiho.drafter import DrafterConfig
    d = Drafter(DrafterConfig.for_target(target.config, "serial", num_attention_heads=4, num_key_value_heads=2))
    d.attach_target(target.model).eval()
    ids = torch.randint(2, 96, (1, 20))
    hidden = torch.randn(1, 20, 32)
    base = draft_forward(d, ids, hidden)
    t, m = 5, 3  # step m at anchor t reads tokens x_{t+1..t+m}
    ids2 = ids.clone()
    ids2[0, t + m + 1:] = (ids2[0, t + m + 1:] + 1) % 96
    hidden2 = hidden.clone()
    hidden2[0, t + 1:] += 1.0
    other = draft_forward(d, ids2, hidden2)
    assert torch.allclose(base[m - 1][0, t], other[m - 1][0, t], atol=1e-5)
    ids3 = ids.clone()
    ids3[0, t + m] = (ids3[0, t + m] + 1) % 96
    assert not torch.allclose(base[m - 1][0, t], draft_forward(d, ids3, hidden)[m - 1][0, t])


def test_cli_rejects_bad_data(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert train_main(["--data", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "No shards" in capsys.readouterr().err
    assert train_main(["--data", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "shard_00000.safetensors").write_bytes(b"not a safetensors file")
    assert train_main(["--data", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_loss_matches_a_per_position_reference(setup):
    """draft_loss computes the target's soft labels once per batch and looks them up
    per draft position; check it against the plain per-position formula."""
    import torch.nn.functional as F

    from gumiho.drafter import DrafterConfig
    from gumiho.train import data as tdata
    from gumiho.train.objective import draft_loss

    target, data = setup
    seqs = tdata.load_sequences(str(data), 64)
    cfg = DrafterConfig.for_target(target.model.config, "gumiho", target="tiny", num_attention_heads=4,
                                   num_key_value_heads=2)
    torch.manual_seed(0)
    d = Drafter(cfg)
    d.set_draft_vocab(torch.arange(64))
    d.attach_target(target.model).eval()
    batch = tdata.collate(seqs, list(range(5)), "cpu")
    batch["loss_mask"][0, :10] = 0  # some prompt positions inside a sequence
    loss_cfg = LossConfig(noise=0.0)
    loss, info = draft_loss(d, batch, loss_cfg)

    with torch.no_grad():
        preds = draft_forward(d, batch["ids"], batch["hidden"])
    L = batch["ids"].shape[1]
    w = d._draft_head_weight.float()
    total, wsum = 0.0, 0.0
    for k, pred in enumerate(preds, start=1):
        m = (batch["loss_mask"][:, k:] * batch["valid"][:, k:] * batch["valid"][:, : L - k]).bool()
        if not m.any():
            continue
        p, tgt = pred[:, : L - k].float()[m], batch["hidden"].float()[:, k:][m]
        ce = -((tgt @ w.T).softmax(-1) * (p @ w.T).log_softmax(-1)).sum(-1)
        per = (F.smooth_l1_loss(p, tgt, reduction="none").mean(-1) + loss_cfg.ce_weight * ce).mean()
        hit = ((p @ w.T).argmax(-1) == (tgt @ w.T).argmax(-1)).float().mean()
        total += loss_cfg.position_decay ** (k - 1) * per
        wsum += loss_cfg.position_decay ** (k - 1)
        assert info["top1"][k - 1] == pytest.approx(float(hit), abs=1e-6)
    assert float(loss.detach()) == pytest.approx(float(total / wsum), rel=1e-5)

    # exact_top1: agreement with the target's top token over the whole vocabulary.
    # Same loss; the top-1 figure counts a miss wherever the target's true top token
    # is not a draft token, however the two agree inside the draft vocabulary.
    full = target.model.get_output_embeddings().weight.float()
    exact_loss, exact = draft_loss(d, batch, loss_cfg, exact_top1=True)
    assert float(exact_loss.detach()) == pytest.approx(float(loss.detach()), rel=1e-6)
    outside = 0
    for k, pred in enumerate(preds, start=1):
        m = (batch["loss_mask"][:, k:] * batch["valid"][:, k:] * batch["valid"][:, : L - k]).bool()
        if not m.any():
            continue
        p, tgt = pred[:, : L - k].float()[m], batch["hidden"].float()[:, k:][m]
        true_top = (tgt @ full.T).argmax(-1)
        outside += int((true_top >= 64).sum())
        hit = (d.draft_vocab_ids[(p @ w.T).argmax(-1)] == true_top).float().mean()
        assert exact["top1"][k - 1] == pytest.approx(float(hit), abs=1e-6)
        assert exact["top1"][k - 1] <= info["top1"][k - 1] + 1e-9
    assert outside > 0  # the case that tells the two figures apart did occur


def test_shares_divided_by_the_whole_batch_counts_add_up_to_the_whole_batch(setup):
    """Data parallel: a batch split into shares of different lengths, each share's loss
    divided by the whole batch's token counts (loss_token_counts summed), gives losses
    and gradients that add up to the whole batch's, including a draft position that
    only one share reaches."""
    from gumiho.drafter import DrafterConfig
    from gumiho.train import data as tdata
    from gumiho.train.objective import draft_loss, loss_token_counts

    target, data = setup
    seqs = tdata.load_sequences(str(data), 64)
    seqs[1] = tdata.Sequence(seqs[1].ids[4:10], seqs[1].loss_mask[4:10], seqs[1].hidden[4:10])  # too short for d >= 6
    cfg = DrafterConfig.for_target(target.model.config, "gumiho", target="tiny", num_attention_heads=4,
                                   num_key_value_heads=2)
    torch.manual_seed(0)
    d = Drafter(cfg)
    d.set_draft_vocab(torch.arange(64))
    d.attach_target(target.model)
    for head in d.heads:  # wake the zero-initialised residual blocks
        for block in head:
            torch.nn.init.normal_(block.linear.weight, std=0.1)
    loss_cfg = LossConfig(noise=0.0)

    def loss_and_grads(index, denominators=None):
        d.zero_grad(set_to_none=True)
        loss, _ = draft_loss(d, tdata.collate(seqs, index, "cpu"), loss_cfg, denominators=denominators)
        loss.backward()
        return float(loss.detach()), {n: p.grad.clone() for n, p in d.named_parameters() if p.grad is not None}

    whole_loss, whole_grads = loss_and_grads([0, 1, 2, 3])
    shares = [[1], [0, 2, 3]]
    counts = sum(loss_token_counts(tdata.collate(seqs, s, "cpu"), cfg.max_depth) for s in shares)
    assert counts.tolist() == loss_token_counts(tdata.collate(seqs, [0, 1, 2, 3], "cpu"), cfg.max_depth).tolist()
    parts = [loss_and_grads(s, counts.tolist()) for s in shares]
    assert sum(loss for loss, _ in parts) == pytest.approx(whole_loss, rel=1e-5)
    for name, g in whole_grads.items():
        summed = sum(grads[name] for _, grads in parts if name in grads)
        assert torch.allclose(summed, g, rtol=1e-4, atol=1e-7), name


def test_windows_without_loss_are_left_out(tmp_path):
    """The first window of a prompt longer than --max-len has no answer token: it carries
    no loss and is dropped; the rest of the sequence is kept."""
    from gumiho.train import data as tdata

    out = tmp_path / "long"
    out.mkdir()
    H = 8
    ids = [list(range(2, 102)), list(range(2, 32))]  # 100 and 30 tokens
    masks = [[0] * 80 + [1] * 20, [0] * 10 + [1] * 20]  # an 80-token prompt, then a 10-token one
    shards.write_shard(shards.shard_path(out, 0),
                       shards.pack_sequences(ids, masks, [torch.randn(len(x), H) for x in ids]))
    seqs = tdata.load_sequences(out, max_len=64)
    assert sorted(len(s.ids) for s in seqs) == [30, 36]  # window [0, 64) of the first is all prompt
    assert all(bool(s.loss_mask[1:].any()) for s in seqs)


def test_a_batch_without_loss_is_a_zero_gradient_step(setup, tmp_path, monkeypatch):
    """A batch (or one process's share of it) in which no position carries loss must not
    stop the run: it becomes a step with zero gradients."""
    import gumiho.train.loop as loop

    target, data = setup
    calls = []
    real = loop.draft_loss

    def some_without_loss(drafter, batch, loss_cfg, exact_top1=False, **kwargs):
        loss, info = real(drafter, batch, loss_cfg, exact_top1, **kwargs)
        calls.append(1)
        if drafter.training and len(calls) == 2:
            return loss.detach() * 0, info  # what draft_loss returns when no position counts
        return loss, info

    monkeypatch.setattr(loop, "draft_loss", some_without_loss)
    summary = train(cfg_for(data, tmp_path / "run", max_steps=4), target.model, "tiny", {1}, log=lambda m: None)
    assert summary["steps"] == 4
    hist = [json.loads(l) for l in open(tmp_path / "run" / "training_history.jsonl")]
    assert [h["step"] for h in hist] == [1, 2, 3, 4] and hist[1]["loss"] == 0.0


def _sequences_of_varied_length(n: int, seed: int = 0) -> list[tdata.Sequence]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        t = int(torch.randint(5, 200, (1,), generator=g))
        out.append(tdata.Sequence(torch.zeros(t, dtype=torch.long), torch.ones(t, dtype=torch.uint8),
                                  torch.zeros(t, 1, dtype=torch.float16)))
    return out


def test_every_epoch_is_sized_by_its_own_batches():
    """Batch counts differ between epochs (each shuffle packs differently); a run of
    whole epochs must still train every sequence exactly once per epoch, neither
    skipping the last batches of a longer epoch nor running past a shorter one."""
    seqs = _sequences_of_varied_length(400)
    per_epoch = [len(tdata.batches(seqs, 1024, 0, e)) for e in range(3)]
    assert len(set(per_epoch)) > 1, "the data must give epochs of different batch counts"
    schedule = tdata.EpochSchedule(seqs, 1024, 0, epochs=3)
    assert schedule.lengths == per_epoch and schedule.total_steps == sum(per_epoch)
    seen = Counter()
    for step in range(schedule.total_steps):
        epoch, within = schedule.locate(step)
        seen.update(schedule.order(epoch)[within])
    assert set(seen) == set(range(len(seqs))) and set(seen.values()) == {3}
    with pytest.raises(IndexError):
        schedule.locate(schedule.total_steps)
    half = tdata.EpochSchedule(seqs, 1024, 0, epochs=1.5)
    assert half.lengths == [per_epoch[0], per_epoch[1] // 2]
    assert tdata.EpochSchedule(seqs, 1024, 0, epochs=1e-6).total_steps == 1


def test_two_epochs_train_every_token_twice(tmp_path):
    target = tiny_target("llama", hidden=32, heads=4, kv_heads=2, seed=2, init=0.3)
    data = make_shards(tmp_path, target, n_seq=144, length=40, vary_length=True)
    summary = train(cfg_for(data, tmp_path / "out", epochs=2, eval_fraction=0.05), target.model, "tiny", {1},
                    log=lambda m: None)
    assert summary["tokens_seen"] == 2 * summary["train_tokens_per_epoch"]
