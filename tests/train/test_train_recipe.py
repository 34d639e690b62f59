"""The training recipe's options: fused target features (cached or computed on the
fly, the same states either way), the loss terms (regression, soft and hard
cross-entropy) and text-only data, on a tiny random target."""
import dataclasses
import json

import pytest
import torch
from test_train import cfg_for, make_shards

from gumiho import GumihoError
from gumiho.drafter import Drafter, DrafterConfig
from gumiho.train import data as tdata
from gumiho.train import features as tfeatures
from gumiho.train import shards
from gumiho.train.__main__ import feature_layer_overrides
from gumiho.train.__main__ import main as train_main
from gumiho.train.loop import train
from gumiho.train.objective import LossConfig, acceptance_rate, draft_forward, draft_loss
from gumiho.train.states import target_states
from gumiho.train.widen import widen_to_fused
from helpers import tiny_target

LAYERS = (1, 2, 4)  # low, middle, and the final-norm state of a 4-layer target


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("recipe")
    target = tiny_target("llama", hidden=32, layers=4, heads=4, kv_heads=2, seed=3, init=0.3)
    data = make_shards(tmp, target, n_seq=24, length=24, vary_length=True)
    cached = tmp / "cached"
    tfeatures.run(target.model, str(data), str(cached), LAYERS, max_tokens=200, log=lambda m: None)
    return target, data, cached


def test_target_states_are_the_right_layers(setup):
    target, _, _ = setup
    ids = torch.tensor([[5, 9, 14, 3, 22, 7], [8, 2, 40, 0, 0, 0]])
    valid = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]]).float()
    hidden, feats = target_states(target.model, ids, valid, LAYERS)
    # Reference: one unpadded sequence at a time, the layers read off by forward hooks
    # on the decoder layers (output of layer l) and the final norm, not hidden_states.
    for b, n in enumerate((6, 3)):
        seen = {}
        hooks = [target.model.model.layers[i - 1].register_forward_hook(
            lambda m, inp, out, i=i: seen.__setitem__(i, out[0] if isinstance(out, tuple) else out)) for i in (1, 2)]
        with torch.no_grad():
            final = target.model.model(input_ids=ids[b:b + 1, :n]).last_hidden_state[0]
        for h in hooks:
            h.remove()
        want = torch.cat([seen[1][0], seen[2][0], final], -1)
        torch.testing.assert_close(feats[b, :n], want, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(hidden[b, :n], final, atol=1e-5, rtol=1e-4)
        assert not feats[b, n:].any() and not hidden[b, n:].any()  # padding stays zero


def test_cached_features_equal_on_the_fly_ones(setup):
    target, data, cached = setup
    assert all(shards.shard_feature_layers(f) == LAYERS for f in cached.glob("shard_*.safetensors"))
    seqs = tdata.load_sequences(str(cached), 64)
    assert all(s.features is not None and s.feature_layers == LAYERS for s in seqs)
    text_only = tdata.load_sequences(str(cached), 64, states=False)
    assert all(s.hidden is None and s.features is None for s in text_only)
    index = list(range(len(seqs)))
    batch = tdata.collate(seqs, index, "cpu")
    fly = tdata.collate(text_only, index, "cpu")
    assert "hidden" not in fly and "features" not in fly
    hidden, feats = target_states(target.model, fly["ids"], fly["valid"], LAYERS)
    # float16 cache against float32 on the fly: equal up to half-precision rounding.
    torch.testing.assert_close(batch["features"], feats, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(batch["hidden"], hidden, atol=2e-3, rtol=2e-3)
    # The distilled shards' own hidden states agree with the recomputed ones.
    orig = tdata.collate(tdata.load_sequences(str(data), 64), index, "cpu")
    torch.testing.assert_close(orig["hidden"], batch["hidden"], atol=2e-3, rtol=2e-3)


def test_loss_terms_add_up(setup):
    """The loss is linear in its weights: regression + soft CE + hard top-1 CE, each
    term what it says; the paper's mix minus its CE part is the regression alone."""
    target, _, cached = setup
    seqs = tdata.load_sequences(str(cached), 64)
    batch = tdata.collate(seqs, list(range(8)), "cpu")
    cfg = DrafterConfig.for_target(target.model.config, "gumiho", feature_layers=LAYERS, num_attention_heads=4,
                                   num_key_value_heads=2)
    torch.manual_seed(0)
    drafter = Drafter(cfg).attach_target(target.model).eval()
    base = LossConfig(noise=0.0, ce_weight=0.0, reg_weight=0.0, top1_weight=0.0)

    @torch.no_grad()
    def loss(**w):
        return float(draft_loss(drafter, batch, dataclasses.replace(base, **w))[0])

    reg, ce, top1 = loss(reg_weight=1.0), loss(ce_weight=1.0), loss(top1_weight=1.0)
    assert reg > 0 and ce > 0 and top1 > 0
    assert loss(reg_weight=1.0, ce_weight=0.1) == pytest.approx(reg + 0.1 * ce, rel=1e-5)
    assert loss(reg_weight=0.5, ce_weight=2.0, top1_weight=3.0) == pytest.approx(0.5 * reg + 2 * ce + 3 * top1,
                                                                               rel=1e-5)
    # HASS's top-K term: over every draft token it is the soft cross-entropy, over fewer
    # tokens strictly less (each dropped token's -p log q is positive).
    n_draft = drafter.cfg.draft_vocab_size or drafter.cfg.vocab_size
    assert loss(topk_weight=1.0, topk=n_draft) == pytest.approx(ce, rel=1e-5)
    top10 = loss(topk_weight=1.0, topk=10)
    assert 0 < top10 < ce
    # The acceptance term is one minus sum(min(p, q)), a probability: in (0, 1) for an
    # untrained drafter, and linear with the rest.
    accept = loss(accept_weight=1.0)
    assert 0 < accept < 1
    assert loss(ce_weight=1.0, topk_weight=0.5, accept_weight=2.0) == pytest.approx(ce + 0.5 * top10 + 2 * accept,
                                                                                  rel=1e-5)
    # A fused drafter refuses a batch without features, with a message that says so.
    with pytest.raises(ValueError, match="features"):
        draft_loss(drafter, {k: v for k, v in batch.items() if k != "features"}, base)


@pytest.mark.parametrize("source", ["cached", "on-the-fly"])
def test_fused_ce_only_training_learns_and_round_trips(setup, tmp_path, source):
    target, _, cached = setup
    cfg = cfg_for(cached, tmp_path / source, max_steps=25, features=source,
                  loss=LossConfig(noise=0.05, ce_weight=1.0, reg_weight=0.0),
                  drafter_overrides={"num_attention_heads": 4, "num_key_value_heads": 2, "feature_layers": LAYERS})
    summary = train(cfg, target.model, "tiny", {1}, log=lambda m: None)
    assert summary["states"] == source and summary["feature_layers"] == LAYERS
    assert summary["train_tokens_per_s"] > 0
    hist = [json.loads(l) for l in open(tmp_path / source / "training_history.jsonl")]
    first = sum(h["loss"] for h in hist[:5]) / 5
    last = sum(h["loss"] for h in hist[-5:]) / 5
    assert last < 0.95 * first, (first, last)
    d = Drafter.load(str(tmp_path / source)).attach_target(target.model)
    assert d.cfg.feature_layers == LAYERS and d.fuse is not None
    assert d.fuse.weight.shape == (32, 3 * 32)


def test_cached_and_on_the_fly_runs_see_the_same_first_loss(setup, tmp_path):
    target, _, cached = setup
    losses = {}
    for source in ("cached", "on-the-fly"):
        cfg = cfg_for(cached, tmp_path / source, max_steps=1, features=source, loss=LossConfig(noise=0.0),
                      drafter_overrides={"num_attention_heads": 4, "num_key_value_heads": 2, "feature_layers": LAYERS})
        train(cfg, target.model, "tiny", {1}, log=lambda m: None)
        losses[source] = json.loads(open(tmp_path / source / "training_history.jsonl").readline())["loss"]
    assert losses["cached"] == pytest.approx(losses["on-the-fly"], rel=1e-3)


def test_text_only_shards_train_on_the_fly(setup, tmp_path):
    target, data, _ = setup
    text = tmp_path / "text"
    text.mkdir()
    for f in sorted(data.glob("shard_*.safetensors")):
        t = shards.load_shard(f)
        shards.write_shard(text / f.name, {k: t[k] for k in ("input_ids", "offsets", "loss_mask")})
    summary = train(cfg_for(text, tmp_path / "out", max_steps=3), target.model, "tiny", {1}, log=lambda m: None)
    assert summary["states"] == "on-the-fly" and summary["steps"] == 3
    with pytest.raises(GumihoError, match="do not hold the target's hidden states"):
        train(cfg_for(text, tmp_path / "out2", max_steps=3, features="cached"), target.model, "tiny", {1},
              log=lambda m: None)


def test_cached_features_of_other_layers_are_refused(setup, tmp_path):
    target, data, cached = setup
    over = {"num_attention_heads": 4, "num_key_value_heads": 2, "feature_layers": (1, 3)}
    with pytest.raises(GumihoError, match=r"features of layers \[1, 3\].*gumiho.train.features"):
        train(cfg_for(cached, tmp_path / "o", max_steps=1, features="cached", drafter_overrides=over),
              target.model, "tiny", {1}, log=lambda m: None)
    with pytest.raises(GumihoError, match="features of layers"):  # plain shards hold no features at all
        train(cfg_for(data, tmp_path / "o2", max_steps=1, features="cached", drafter_overrides=over),
              target.model, "tiny", {1}, log=lambda m: None)


def test_cli_default_is_fused_features_and_init_from_keeps_the_saved_ones():
    """The recipe ablation's winner is the trainer's default for a new drafter; a
    continued drafter is left to keep what it reads (see the next test); an explicit
    --feature-layers always wins."""
    assert feature_layer_overrides(None, None) == {"feature_layers": "default"}
    assert feature_layer_overrides(None, "some/drafter") == {}
    assert feature_layer_overrides("none", None) == {"feature_layers": None}
    assert feature_layer_overrides("none", "some/drafter") == {"feature_layers": None}
    assert feature_layer_overrides("2,15,27", None) == {"feature_layers": (2, 15, 27)}


@pytest.mark.parametrize("layers", [None, LAYERS])
def test_init_from_continues_with_the_saved_drafters_layers(setup, tmp_path, layers):
    """A last-state drafter (as shipped) and a fused one each continue reading what they
    were trained on when no feature layers are named; naming others is refused."""
    target, data, cached = setup
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2}
    first = tmp_path / "first"
    train(cfg_for(cached, first, max_steps=1, drafter_overrides=dict(heads, feature_layers=layers)),
          target.model, "tiny", {1}, log=lambda m: None)
    summary = train(cfg_for(cached, tmp_path / "next", max_steps=1, init_from=str(first), drafter_overrides=heads),
                    target.model, "tiny", {1}, log=lambda m: None)
    assert summary["feature_layers"] == layers and summary["states"] == "cached"
    assert Drafter.load(str(tmp_path / "next")).cfg.feature_layers == layers
    # Other fused layers are refused; for a last-state drafter, so are fused layers
    # without the final-norm state (the widening below needs it).
    refusal = "does not fit this run.*feature_layers" if layers else "must include 4"
    with pytest.raises(GumihoError, match=refusal):
        train(cfg_for(cached, tmp_path / "bad", max_steps=1, init_from=str(first),
                      drafter_overrides=dict(heads, feature_layers=(1, 3))), target.model, "tiny", {1},
              log=lambda m: None)


def test_widened_drafter_starts_as_the_last_state_one(setup):
    """Widening puts the identity on the final-norm state's block of ``fuse`` and zeros
    on the others: the fused drafter predicts exactly what the last-state one did, at
    every anchor and draft position, before any training."""
    target, _, _ = setup
    cfg = DrafterConfig.for_target(target.model.config, "gumiho", num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    narrow = Drafter(cfg).attach_target(target.model).eval()
    wide = widen_to_fused(narrow, LAYERS, 4).attach_target(target.model).eval()
    assert wide.cfg.feature_layers == LAYERS and narrow.cfg.feature_layers is None
    ids = torch.tensor([[5, 9, 14, 3, 22, 7, 11, 30], [8, 2, 40, 1, 17, 6, 0, 0]])
    valid = torch.tensor([[1] * 8, [1] * 6 + [0, 0]]).float()
    hidden, feats = target_states(target.model, ids, valid, LAYERS)
    assert feats[..., :32].abs().sum() > 0  # the other layers are there, and ignored at first
    with torch.no_grad():
        want, got = draft_forward(narrow, ids, hidden), draft_forward(wide, ids, feats)
    assert len(want) == len(got) == cfg.serial_positions + cfg.mlp_heads
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    # It is a copy: training it leaves the original alone.
    with torch.no_grad():
        wide.fc.weight.add_(1.0)
    assert not torch.equal(wide.fc.weight, narrow.fc.weight)
    with pytest.raises(GumihoError, match="must include 4.*--feature-layers 1,2,4"):
        widen_to_fused(narrow, (1, 2), 4)
    with pytest.raises(GumihoError, match="already reads fused layers"):
        widen_to_fused(wide, LAYERS, 4)


def test_init_from_a_last_state_drafter_with_fused_layers_widens_it(setup, tmp_path):
    """The trainer widens a last-state drafter when told to read fused layers that
    include the final-norm state: before its first step it agrees with the target on
    the held-out split exactly as the last-state drafter continued unwidened does, and
    then the new blocks learn."""
    target, data, cached = setup
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2}
    first = tmp_path / "first"
    train(cfg_for(cached, first, max_steps=2, drafter_overrides=dict(heads, feature_layers=None)),
          target.model, "tiny", {1}, log=lambda m: None)
    logs = []
    summary = train(cfg_for(cached, tmp_path / "wide", max_steps=1, init_from=str(first),
                            drafter_overrides=dict(heads, feature_layers=LAYERS)),
                    target.model, "tiny", {1}, log=logs.append)
    assert summary["feature_layers"] == LAYERS and any("widened" in m for m in logs)
    plain = train(cfg_for(cached, tmp_path / "plain", max_steps=1, init_from=str(first), drafter_overrides=heads),
                  target.model, "tiny", {1}, log=lambda m: None)
    start, plain_start = summary["held_out_at_start"], plain["held_out_at_start"]
    assert start["top1_by_position"] == plain_start["top1_by_position"]
    assert start["loss"] == pytest.approx(plain_start["loss"], rel=1e-5)
    saved = Drafter.load(str(tmp_path / "wide"))
    assert saved.cfg.feature_layers == LAYERS
    # Trained one step from the identity: the other layers' blocks have moved off zero.
    assert saved.fuse.weight[:, :64].abs().sum() > 0


def test_cli_refuses_bad_feature_layers(setup, tmp_path, capsys):
    _, data, _ = setup
    assert train_main(["--data", str(data), "--out", str(tmp_path / "x"), "--feature-layers", "two"]) == 2
    assert "--feature-layers takes" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [(["--topk", "0"], "--topk must be at least 1"),
                                          (["--accept-weight", "-1"], "cannot be negative: --accept-weight -1")])
def test_cli_refuses_bad_loss_options(setup, tmp_path, capsys, args, message):
    _, data, _ = setup
    assert train_main(["--data", str(data), "--out", str(tmp_path / "x")] + args) == 2
    assert message in capsys.readouterr().err


def test_acceptance_term_is_the_acceptance_rate_of_speculative_sampling():
    """sum(min(p, q)) is the chance that speculative sampling accepts one token drawn
    from q against a target p: checked against the rule itself (accept x ~ q with
    probability min(1, p(x)/q(x))) by simulation, on random distributions."""
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        p = torch.rand(12, generator=g).pow(3)
        q = torch.rand(12, generator=g).pow(3)
        p, q = p / p.sum(), q / q.sum()
        n = 200_000
        x = torch.multinomial(q, n, replacement=True, generator=g)
        accepted = torch.rand(n, generator=g) < (p[x] / q[x]).clamp(max=1)
        rate = float(accepted.float().mean())
        # 4 standard errors of a binomial share: fails by chance about once in 16,000 runs.
        assert abs(rate - float(acceptance_rate(p, q))) < 4 * (0.25 / n) ** 0.5
