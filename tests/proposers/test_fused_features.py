"""Drafters that read fused target features (EAGLE-3: several layers' states), and
the one-layer all-serial EAGLE-2 baseline: decoding hands the drafter the right
layers from the target's own forwards, and the output stays the target's."""
import json
from collections import Counter

import pytest
import torch
from engine.test_decode import prompts, run

from gumiho import Drafter, DrafterConfig, GenerationSettings, GumihoError, TreeSettings, load_target, stream
from gumiho.drafter import default_feature_layers, kind_layout
from gumiho.loading import load_drafter
from gumiho.proposers import Budget, DraftSession
from helpers import tiny_target

TREES = (TreeSettings(total_tokens=8, depth=4, serial_top_k=2),
         TreeSettings(total_tokens=20, depth=7, serial_top_k=4, mlp_keep=4, full_tree_tokens=6))


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", hidden=32, layers=4, heads=4, kv_heads=2, seed=2)


def fused_drafter(target, layers, kind="gumiho", seed=1):
    torch.manual_seed(seed)
    cfg = DrafterConfig.for_target(target.config, kind, feature_layers=layers)
    return Drafter(cfg).eval().attach_target(target.model)


def reference_features(target, seq, layers):
    """The states of ``layers`` over ``seq`` by one plain forward of transformers, all
    hidden states asked for (index l: after decoder layer l; N: after the final norm)."""
    with torch.no_grad():
        hs = target.model(torch.tensor([seq]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in layers], dim=-1)


@pytest.mark.parametrize("layers", [(1, 2, 4), "default", (4, 0, 2)], ids=["1-2-N", "default", "unsorted-with-0"])
@pytest.mark.parametrize("kind", ["gumiho", "serial", "parallel", "eagle", "eagle3"])
def test_fused_drafter_is_lossless_greedy(target, layers, kind):
    drafter = fused_drafter(target, layers, kind)
    assert drafter.cfg.feature_width == len(drafter.cfg.feature_layers) * 32
    for tree in TREES:
        for prompt in prompts(2, 96, seed=5):
            ref, _ = run(target, prompt, max_new_tokens=20)
            out, steps = run(target, prompt, drafter, max_new_tokens=20, tree=tree)
            assert out == ref
            assert any(s.drafted for s in steps)


def test_default_triple_is_lossless_greedy():
    """On 8 layers the default is a real low/middle/high triple, none of them the final state."""
    deep = tiny_target("llama", hidden=32, layers=8, heads=4, kv_heads=2, seed=7)
    drafter = fused_drafter(deep, "default")
    assert drafter.cfg.feature_layers == (2, 4, 5)
    for prompt in prompts(2, 96, seed=9):
        assert run(deep, prompt, drafter, max_new_tokens=20, tree=TREES[1])[0] == run(deep, prompt,
                                                                                        max_new_tokens=20)[0]


def test_default_layers():
    assert default_feature_layers(30) == (2, 15, 27)  # SmolLM2-135M
    assert default_feature_layers(32) == (2, 16, 29)
    assert default_feature_layers(4) == (1, 2)  # few layers: distinct ones within 1..N
    assert DrafterConfig.for_target(tiny_target("llama", layers=4).config,
                                    feature_layers="default").feature_layers == (1, 2)


def test_states_handed_to_the_drafter_are_those_layers(target, monkeypatch):
    """What DraftSession.extend receives over a whole generation (prefill, then the root
    and accepted nodes of every tree verify) equals, position by position, the layers'
    states of one fresh forward over the sequence, in the order of feature_layers."""
    layers = (4, 0, 2)
    drafter = fused_drafter(target, layers)
    seen = []
    extend = DraftSession.extend

    def spy(self, states, next_ids):
        seen.append((states.clone(), next_ids.clone()))
        return extend(self, states, next_ids)

    monkeypatch.setattr(DraftSession, "extend", spy)
    prompt = prompts(1, 96, seed=8)[0]
    out, steps = run(target, prompt, drafter, max_new_tokens=24, tree=TREES[1])
    assert len(seen) == len(steps) and sum(s.accepted_length for s in steps) > 0  # the prefill, every verify
    states = torch.cat([s for s, _ in seen])
    nxt = torch.cat([t for _, t in seen]).tolist()
    # The pairs (state at i, token i+1) over the sequence the target processed: the
    # prompt and the answer (the last step's tokens before the length cut).
    seq = prompt[:1] + nxt
    assert seq[:len(prompt) + len(out)] == prompt + out and states.shape == (len(seq) - 1, 3 * 32)
    # A tree verify attends through a mask over a cache: equal up to float rounding.
    torch.testing.assert_close(states, reference_features(target, seq[:-1], layers), atol=1e-5, rtol=1e-4)


def test_target_forward_returns_the_layers_and_the_same_logits(target):
    """Target.forward with feature_layers: those layers' states in place of the final
    ones, and the logits (and the cache) of a forward without them."""
    from gumiho.runtimes.kvcache import new_cache

    def hooks():
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in target.model.modules())

    seq = [5, 9, 14, 3, 22, 7]
    before = hooks()
    with torch.inference_mode():
        plain_cache, fused_cache = new_cache(), new_cache()
        hidden, logits = target.forward(seq, 0, plain_cache)[:2]
        fused = target.forward(seq, 0, fused_cache, feature_layers=(1, 4))
        feats, fused_logits = fused.layer_states, fused.logits
        step = [target.forward([8], len(seq), c)[1] for c in (plain_cache, fused_cache)]
    # The hooks were set for that forward only: none stays on the target's modules
    # (output_hidden_states, as reference_features asks, leaves transformers' own).
    assert hooks() == before
    assert torch.equal(logits, fused_logits) and torch.equal(feats[:, 32:], hidden)
    assert torch.equal(step[0], step[1])
    torch.testing.assert_close(feats, reference_features(target, seq, (1, 4)), atol=1e-5, rtol=1e-4)
    with pytest.raises(GumihoError, match="only 4 layers"):
        with torch.inference_mode():
            target.forward(seq, 0, new_cache(), feature_layers=(5,))


def test_a_body_without_a_layer_list_hands_over_the_same_states(target):
    """A model body with no ``layers`` list to hook gets the states from transformers'
    ``output_hidden_states`` instead: the same tensors."""
    from gumiho.runtimes.pytorch import forward_with_features

    class Body(torch.nn.Module):  # the same body, its decoder layers out of reach
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            return self.inner(**kw)

    base = target.model.base_model
    inputs = dict(input_ids=torch.tensor([[5, 9, 14, 3]]), use_cache=False)
    with torch.inference_mode():
        _, hooked = forward_with_features(base, inputs, (4, 0, 2))
        _, recorded = forward_with_features(Body(base), inputs, (4, 0, 2))
        with pytest.raises(GumihoError, match="only 4 layers"):
            forward_with_features(Body(base), inputs, (5,))
    assert torch.equal(hooked, recorded)


def test_unfused_drafter_reads_the_final_states_unchanged(target):
    """feature_layers=None (official checkpoints, the shipped drafters): no fuse layer,
    and project_context is project of the final-norm states, bit for bit."""
    torch.manual_seed(0)
    d = Drafter(DrafterConfig.for_target(target.config)).eval().attach_target(target.model)
    assert d.fuse is None and d.cfg.feature_layers is None and d.cfg.feature_width == 32
    h, ids = torch.randn(1, 5, 32), torch.tensor([[3, 4, 5, 6, 7]])
    assert torch.equal(d.project_context(h, ids), d.project(h, ids))
    with pytest.raises(GumihoError, match="expects target states 32 wide"):
        d.project_context(torch.randn(1, 5, 64), ids)


def test_save_load_round_trip(target, tmp_path):
    d = fused_drafter(target, (1, 2, 4))
    d.set_draft_vocab(torch.arange(40))
    d.save(str(tmp_path / "d"))
    raw = json.loads((tmp_path / "d" / "config.json").read_text())
    assert raw["feature_layers"] == [1, 2, 4]  # JSON has no tuples: written as a list, read back as one
    back = load_drafter(str(tmp_path / "d"), target, dtype="fp32")
    assert back.cfg.feature_layers == (1, 2, 4) and back.cfg == d.cfg
    assert back.fuse.weight.shape == (32, 96)
    ours, theirs = d.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    prompt = prompts(1, 96, seed=4)[0]
    assert run(target, prompt, back, max_new_tokens=12, tree=TREES[0])[0] == run(target, prompt,
                                                                                  max_new_tokens=12)[0]


@pytest.mark.parametrize("bad", [[-1, 2], [2, 2], "2,3", "default", [1.0, 2], [True], []])
def test_invalid_feature_layers_are_refused(target, tmp_path, bad):
    with pytest.raises(GumihoError, match="feature_layers"):  # "default" is for_target's word, not a config value
        DrafterConfig(hidden_size=32, vocab_size=96, feature_layers=bad)
    # The same in a config.json on disk.
    d = fused_drafter(target, (1, 2))
    d.save(str(tmp_path))
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["feature_layers"] = bad
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(GumihoError, match="feature_layers"):
        load_drafter(str(tmp_path), target)


def test_drafter_for_a_deeper_target_is_refused(tmp_path):
    deep = tiny_target("llama", layers=4)
    shallow = tiny_target("llama", layers=2)
    d = fused_drafter(deep, (1, 2, 4))
    with pytest.raises(GumihoError, match=r"layers \[1, 2, 4\], but the target has only 2 layers"):
        d.attach_target(shallow.model)
    d.save(str(tmp_path))
    with pytest.raises(GumihoError, match="only 2 layers"):
        load_drafter(str(tmp_path), shallow)
    fused_drafter(deep, (0, 2)).attach_target(shallow.model)  # within its 2 layers: fine


def test_eagle_kind_is_one_layer_all_serial(target):
    assert kind_layout("eagle") == dict(serial_positions=7, mlp_heads=0, num_layers=1)
    torch.manual_seed(3)
    d = Drafter(DrafterConfig.for_target(target.config, "eagle")).eval().attach_target(target.model)
    assert len(d.layers) == 1 and len(d.heads) == 0 and d.cfg.max_depth == 7
    assert {d.cfg.head_kind(k) for k in range(1, 8)} == {"serial"}
    session = DraftSession(d)
    with torch.no_grad():
        hidden = target.model(torch.tensor([[5, 6, 7, 8]]), output_hidden_states=True).hidden_states[-1][0]
    session.extend(hidden, torch.tensor([6, 7, 8, 9]))
    # One path, drafted by the one layer run seven times over its own outputs.
    tree = session.propose(9, Budget(TreeSettings(total_tokens=7, depth=7, serial_top_k=1, full_tree=False)))
    assert tree.depths == list(range(8))
    for prompt in prompts(2, 96, seed=6):
        assert run(target, prompt, d, max_new_tokens=20, tree=TREES[1])[0] == run(target, prompt,
                                                                                    max_new_tokens=20)[0]


def test_fused_drafter_sampling_matches_target_distribution():
    """Sampling with a fused drafter (the embedding output and the final-norm state of a
    one-layer target): the output distribution is the target's (the chi-square test of
    test_verify, with fewer samples: what is tested here is the plumbing)."""
    import test_verify as ts

    target = tiny_target("llama", vocab=ts.VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, init=0.5, seed=1,
                         eos=ts.EOS)
    drafter = fused_drafter(target, (0, 1), seed=2)
    cfg = ts.CONFIGS[0]
    exact = ts.exact_distribution(target, **cfg)
    n = 1000
    counts, accepted = Counter(), Counter()
    tree = TreeSettings(total_tokens=6, depth=2, serial_top_k=3, mlp_top_k=2, mlp_keep=2, full_tree=False)
    for i in range(n):
        steps = list(stream(target, ts.PROMPT, drafter, GenerationSettings(max_new_tokens=ts.NEW_TOKENS, seed=i,
                                                                           tree=tree, **cfg)))
        counts[tuple(t for s in steps for t in s.tokens)] += 1
        accepted.update(s.accepted_length for s in steps[1:])
    assert accepted[1] + accepted[2] > 0.1 * sum(accepted.values()), accepted  # drafts were accepted
    p = ts.chi_square_p(counts, exact, n)
    assert p > ts.PASS_P, f"sampling with a fused drafter deviates from the target distribution (p={p:.2e})"


@pytest.fixture(scope="module")
def default_target():
    return load_target(None, device="cpu", runtime="torch")


def test_fused_drafter_on_the_default_model_is_lossless(default_target):
    """SmolLM2-135M with a random drafter fusing its layers 2, 15 and 27 (EAGLE-3's
    choice for 30 layers): one short greedy generation, the same tokens as vanilla."""
    target = default_target
    drafter = fused_drafter(target, "default", seed=0)
    assert drafter.cfg.feature_layers == (2, 15, 27) and drafter.cfg.feature_width == 3 * 576
    drafter.set_draft_vocab(torch.arange(4096))  # a restricted vocabulary, as trained drafters have: faster
    ids = target.encode("Write a haiku about the sea.")
    settings = GenerationSettings(max_new_tokens=12, tree=TreeSettings.for_device("cpu"))
    ref = [t for s in stream(target, ids, None, settings) for t in s.tokens]
    steps = list(stream(target, ids, drafter, settings))
    assert [t for s in steps for t in s.tokens] == ref and any(s.drafted for s in steps[1:])


def test_eagle_is_listed_only_once_its_drafter_ships(monkeypatch):
    """The registry and the app list the EAGLE-2 drafter of the default target only
    when its folder exists (it is not shipped yet); the bench knows the method anyway
    (a random-weight one, with a warning, until then)."""
    import app.models.hub as hub
    import gumiho.registry as registry
    from app.core.forms import DRAFTER_LABELS, RaceForm, parse_request
    from gumiho.bench import parse_methods

    shipped = {k: f"/drafters/smollm2-135m-{k}" for k in ("gumiho", "serial", "parallel")}
    monkeypatch.setattr(hub, "shipped_drafter_path", shipped.get)
    monkeypatch.setattr(registry, "shipped_drafter_path", shipped.get)
    choices = hub.ModelHub(default_loader=lambda: None, warmup=False).drafter_choices()
    assert [k for _, k in choices] == ["gumiho", "serial", "parallel"]
    assert registry.shipped_kinds() == ("gumiho", "serial", "parallel")
    assert "eagle" not in registry.lookup("smollm2-135m-gumiho")["drafters"]
    shipped["eagle"] = "/drafters/smollm2-135m-eagle"
    choices = hub.ModelHub(default_loader=lambda: None, warmup=False).drafter_choices()
    assert choices[-1] == (DRAFTER_LABELS["eagle"], "eagle")
    assert registry.shipped_kinds()[-1] == "eagle"
    assert registry.lookup("smollm2-135m-gumiho")["drafters"]["eagle"] == shipped["eagle"]
    assert parse_methods("vanilla,eagle") == ["vanilla", "eagle"]
    req = parse_request(RaceForm("Hi", 16.0, 0.0, 1.0, None, 5, 3, 12, DRAFTER_LABELS["eagle"], "", ""))
    assert req.drafter == "eagle"


def test_reports_include_eagle_where_the_records_have_it(tmp_path):
    """compare_drafters compares with eagle by default only when every record ran it;
    the report adds its row and a sentence, and records without it read as before."""
    from gumiho.bench import compare_drafters as compare
    from gumiho.bench import records, report_tables

    def record(methods):
        per_prompt = [{"methods": {m: {"new_tokens": 60, "target_forwards": f} for m, f in methods.items()}}] * 4
        return {"methods": {m: {"tau": 60 / f, "acceptance_by_position": [0.5] * 7, "tokens_per_s": 10.0,
                                "speedup_vs_vanilla": 1.0} for m, f in methods.items()},
                "per_prompt": per_prompt}

    old = {"gumiho": 30, "serial": 40, "parallel": 50}
    (tmp_path / "mt_bench.json").write_text(json.dumps(record(dict(old, eagle=35))))
    (tmp_path / "gsm8k.json").write_text(json.dumps(record(old)))
    both, new_only = [tmp_path / "mt_bench.json", tmp_path / "gsm8k.json"], [tmp_path / "mt_bench.json"]
    assert compare.default_against(both) == ("serial", "parallel")
    assert compare.default_against(new_only) == ("serial", "parallel", "eagle")
    assert "eagle tau" in compare.compare(new_only, resamples=200) and "eagle" not in compare.compare(both,
                                                                                                    resamples=200)
    runs = records.load(both)
    assert "| MT-Bench | eagle | 1.71 |" in report_tables.table(runs) and "| GSM8K | eagle" not in report_tables.table(runs)
    assert report_tables.wins(runs).endswith("EAGLE-2 baseline's (eagle) on 1 of the 1 sets that ran it.")
    assert report_tables.wins(records.load(both[1:])) == "Gumiho's tau is above both ablations on 1 of 1 sets."
