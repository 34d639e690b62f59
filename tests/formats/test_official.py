"""Official Gumiho checkpoints: a tiny synthetic one, written with the released key
names and shape rules, must load, compute what the architecture says it computes,
refuse what does not fit, and decode losslessly.

The reference forward below is written from the architecture description alone
(plain tensors, no engine code): fc over [embedding; hidden], two Llama decoder
layers with RoPE (layer 0 without input norm), the target's LM head on the output,
and MLP heads of SiLU blocks reading the fc inputs of two consecutive steps.
"""
import math
import os

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from gumiho import GenerationSettings, GumihoError, TreeSettings, stream
from gumiho.drafter import causal_mask
from gumiho.formats.official import is_official_source, load_official, read_checkpoint
from gumiho.proposers import Budget, DraftSession
from helpers import tiny_target

V, H, HEADS, KV_HEADS, LAYERS = 96, 32, 4, 2, 2
HD = H // HEADS
INTER = 2 * H  # tiny_target's intermediate size
N_HEADS, N_BLOCKS = 5, 6


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", vocab=V, hidden=H, heads=HEADS, kv_heads=KV_HEADS, layers=LAYERS, seed=11)


def official_state(seed=0, hidden=H, vocab=V, kv_heads=KV_HEADS, inter=INTER, scale=0.25):
    """A state dict with exactly the released key names; shapes from the target's sizes."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape, s=scale):
        return torch.randn(*shape, generator=g) * s / math.sqrt(shape[-1]) * math.sqrt(H)

    hd = hidden // HEADS
    sd = {"embed_tokens.weight": torch.randn(vocab, hidden, generator=g),
          "fc.weight": w(hidden, 2 * hidden), "fc.bias": w(hidden, s=0.1)}
    for i in range(2):
        p = f"layers.{i}."
        sd[p + "self_attn.q_proj.weight"] = w(HEADS * hd, hidden)
        sd[p + "self_attn.k_proj.weight"] = w(kv_heads * hd, hidden)
        sd[p + "self_attn.v_proj.weight"] = w(kv_heads * hd, hidden)
        sd[p + "self_attn.o_proj.weight"] = w(hidden, HEADS * hd)
        sd[p + "mlp.gate_proj.weight"] = w(inter, hidden)
        sd[p + "mlp.up_proj.weight"] = w(inter, hidden)
        sd[p + "mlp.down_proj.weight"] = w(hidden, inter)
        sd[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
        if i > 0:
            sd[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    for j in range(N_HEADS):
        for b in range(N_BLOCKS):
            d_in = 2 * hidden if b == 0 else hidden
            sd[f"mlp.{j}.{b}.linear.weight"] = w(hidden, d_in)
            sd[f"mlp.{j}.{b}.linear.bias"] = w(hidden, s=0.1)
    return sd


def write_bin(tmp_path, sd, name="ckpt"):
    folder = tmp_path / name
    folder.mkdir()
    torch.save(sd, folder / "pytorch_model.bin")
    return str(folder)


# ----------------------------------------------------------------------------- reference


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """x [heads, T, hd], pos [T]: rotate pairs (i, i + hd/2) by pos * theta^(-2i/hd)."""
    half = x.shape[-1] // 2
    freq = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    ang = pos.double()[:, None] * freq[None]
    cos, sin = ang.cos().float(), ang.sin().float()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


def ref_layer(sd, i, x, pos, eps, theta):
    p = f"layers.{i}."
    t = x.shape[0]
    y = rms(x, sd[p + "input_layernorm.weight"], eps) if i > 0 else x
    q = (y @ sd[p + "self_attn.q_proj.weight"].T).view(t, HEADS, HD).transpose(0, 1)
    k = (y @ sd[p + "self_attn.k_proj.weight"].T).view(t, KV_HEADS, HD).transpose(0, 1)
    v = (y @ sd[p + "self_attn.v_proj.weight"].T).view(t, KV_HEADS, HD).transpose(0, 1)
    q, k = rope(q, pos, theta), rope(k, pos, theta)
    group = HEADS // KV_HEADS
    out = []
    for hix in range(HEADS):
        kk, vv = k[hix // group], v[hix // group]
        s = q[hix] @ kk.T / math.sqrt(HD)
        s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        out.append(torch.softmax(s, -1) @ vv)
    a = torch.cat(out, -1) @ sd[p + "self_attn.o_proj.weight"].T
    x = x + a
    y = rms(x, sd[p + "post_attention_layernorm.weight"], eps)
    m = (F.silu(y @ sd[p + "mlp.gate_proj.weight"].T) * (y @ sd[p + "mlp.up_proj.weight"].T))
    return x + m @ sd[p + "mlp.down_proj.weight"].T


def ref_fc(sd, emb, tokens, hidden):
    return torch.cat([emb[tokens], hidden], -1) @ sd["fc.weight"].T + sd["fc.bias"]


def ref_serial(sd, u, eps, theta):
    """The two layers over fc outputs u [T, H] at positions 0..T-1 (causal)."""
    pos = torch.arange(u.shape[0])
    x = u
    for i in range(2):
        x = ref_layer(sd, i, x, pos, eps, theta)
    return x


def ref_head(sd, j, x):
    x = F.silu(x @ sd[f"mlp.{j}.0.linear.weight"].T + sd[f"mlp.{j}.0.linear.bias"])
    for b in range(1, N_BLOCKS):
        x = x + F.silu(x @ sd[f"mlp.{j}.{b}.linear.weight"].T + sd[f"mlp.{j}.{b}.linear.bias"])
    return x


def target_parts(target):
    m = target.model
    cfg = m.config
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    return m.get_input_embeddings().weight.detach(), m.get_output_embeddings().weight.detach(), cfg.rms_norm_eps, theta


# ----------------------------------------------------------------------------- tests


def test_loads_and_config_follows_target(tmp_path, target):
    d = load_official(write_bin(tmp_path, official_state()), target)
    c = d.cfg
    assert (c.kind, c.serial_positions, c.mlp_heads, c.num_layers, c.mlp_blocks) == ("gumiho", 2, 5, 2, 5)
    assert not c.first_layer_input_norm and c.head_inputs == 2 and c.max_depth == 7
    assert (c.hidden_size, c.vocab_size, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size) == (
        H, V, HEADS, KV_HEADS, INTER)
    assert isinstance(d.layers[0].input_layernorm, torch.nn.Identity)
    assert d.fc.weight.dtype == torch.float32 and d.fc.weight.device.type == "cpu"
    assert not any(p.requires_grad for p in d.parameters())
    assert load_official(write_bin(tmp_path, official_state(), "eps"), target, rms_norm_eps=1e-6).cfg.rms_norm_eps == 1e-6


def test_forward_matches_reference(tmp_path, target):
    sd = official_state(seed=1)
    d = load_official(write_bin(tmp_path, sd), target)
    emb, lm_head, eps, theta = target_parts(target)
    g = torch.Generator().manual_seed(5)
    T = 9
    hidden = torch.randn(T, H, generator=g)
    nxt = torch.randint(0, V, (T,), generator=g)
    with torch.no_grad():
        # serial part over a context
        u = d.project(hidden[None], nxt[None])
        out, _ = d.transformer(u, torch.arange(T)[None], causal_mask(T, 0, u.device))
        ref_u = ref_fc(sd, emb, nxt, hidden)
        ref_out = ref_serial(sd, ref_u, eps, theta)
        torch.testing.assert_close(u[0], ref_u, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out[0], ref_out, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(d.full_logits(out[0]), ref_out @ lm_head.T, rtol=1e-4, atol=1e-4)
        # each head, for a few pairs of consecutive fc inputs (older first)
        for t in (0, 3, T - 2):
            pair = torch.cat([ref_u[t], ref_u[t + 1]])
            got = d.run_heads(pair[None])
            assert len(got) == N_HEADS
            for j in range(N_HEADS):
                torch.testing.assert_close(got[j][0], ref_head(sd, j, pair), rtol=1e-4, atol=1e-4)


def test_tree_follows_reference_chain(tmp_path, target):
    """Greedy chain through the whole drafter (2 serial steps, then 5 heads) equals the
    reference chain: checks positions, feedback of the drafter's own output, and that
    the heads read [fc input of step 1; fc input of step 2]."""
    sd = official_state(seed=2, scale=0.6)
    d = load_official(write_bin(tmp_path, sd), target)
    emb, lm_head, eps, theta = target_parts(target)
    g = torch.Generator().manual_seed(9)
    T = 7
    hidden = torch.randn(T, H, generator=g)
    nxt = torch.randint(0, V, (T,), generator=g)
    session = DraftSession(d)
    session.extend(hidden, nxt)
    tree = session.propose(int(nxt[-1]), Budget(TreeSettings(total_tokens=7, depth=7, serial_top_k=1, mlp_top_k=1,
                                                             mlp_keep=1, full_tree=False, full_tree_tokens=0)))
    with torch.no_grad():
        u = ref_fc(sd, emb, nxt, hidden)
        out = ref_serial(sd, u, eps, theta)
        tok1 = int((out[-1] @ lm_head.T).argmax())
        u1 = ref_fc(sd, emb, torch.tensor([tok1]), out[-1:])
        out1 = ref_serial(sd, torch.cat([u, u1]), eps, theta)[-1]
        tok2 = int((out1 @ lm_head.T).argmax())
        u2 = ref_fc(sd, emb, torch.tensor([tok2]), out1[None])
        pair = torch.cat([u1[0], u2[0]])
        chain = [tok1, tok2] + [int((ref_head(sd, j, pair) @ lm_head.T).argmax()) for j in range(N_HEADS)]
    assert tree.depths == list(range(8)) and tree.tokens[1:] == chain


def test_safetensors_and_mlp_mlp_keys(tmp_path, target):
    sd = official_state(seed=3)
    folder = tmp_path / "st"
    folder.mkdir()
    save_file({k: v.half().contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    d = load_official(str(folder), target)
    torch.testing.assert_close(d.heads[4][5].linear.weight, sd["mlp.4.5.linear.weight"].half().float())
    # the authors' in-memory naming of the heads (mlp.mlp.*) reads the same
    renamed = {("mlp." + k if k.startswith("mlp.") else k): v for k, v in sd.items()}
    d2 = load_official(write_bin(tmp_path, renamed, "mm"), target)
    torch.testing.assert_close(d2.heads[2][0].linear.bias, sd["mlp.2.0.linear.bias"])


def test_hub_id_goes_through_hub_download(tmp_path, target, monkeypatch):
    import huggingface_hub

    folder = write_bin(tmp_path, official_state())
    asked = []

    def fake_download(repo_id, filename, revision=None):
        asked.append((repo_id, filename))
        return os.path.join(folder, filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    assert is_official_source("amd/Gumiho-vicuna-7b")
    d = load_official("amd/Gumiho-vicuna-7b", target)
    assert asked == [("amd/Gumiho-vicuna-7b", "pytorch_model.bin")] and d.cfg.max_depth == 7


@pytest.mark.parametrize("key,shape", [("layers.1.mlp.down_proj.weight", (INTER, H)),
                                       ("mlp.3.0.linear.weight", (H, H)),
                                       ("layers.0.self_attn.k_proj.weight", (H, H))])
def test_wrong_shape_names_key_and_shapes(tmp_path, target, key, shape):
    sd = official_state()
    want = tuple(sd[key].shape)
    sd[key] = torch.zeros(shape)
    with pytest.raises(GumihoError) as e:
        load_official(write_bin(tmp_path, sd), target)
    msg = str(e.value)
    assert repr(key) in msg and str(shape) in msg and str(want) in msg and "tiny-llama" in msg


def test_checkpoint_for_another_target(tmp_path, target):
    wide = official_state(hidden=48, inter=96)
    with pytest.raises(GumihoError, match=r"'embed_tokens.weight' has shape \(96, 48\).*needs \(96, 32\).*hidden size is 48"):
        load_official(write_bin(tmp_path, wide), target)
    del wide["embed_tokens.weight"]
    with pytest.raises(GumihoError, match=r"'fc.weight' has shape \(48, 96\).*needs \(32, 64\).*hidden size is 48"):
        load_official(write_bin(tmp_path, wide, "noemb"), target)
    with pytest.raises(GumihoError, match=r"'embed_tokens.weight' has shape \(100, 32\).*needs \(96, 32\)"):
        load_official(write_bin(tmp_path, official_state(vocab=100), "v"), target)


def test_missing_and_unexpected_keys(tmp_path, target):
    sd = official_state()
    del sd["layers.1.input_layernorm.weight"]
    with pytest.raises(GumihoError, match=r"missing.*'layers.1.input_layernorm.weight'"):
        load_official(write_bin(tmp_path, sd, "a"), target)
    sd = official_state()
    del sd["mlp.4.5.linear.bias"]
    with pytest.raises(GumihoError, match=r"missing.*'mlp.4.5.linear.bias'"):
        load_official(write_bin(tmp_path, sd, "b"), target)
    sd = official_state()
    sd["layers.0.input_layernorm.weight"] = torch.ones(H)  # layer 0 has no input norm
    with pytest.raises(GumihoError, match=r"does not have.*'layers.0.input_layernorm.weight'"):
        load_official(write_bin(tmp_path, sd, "c"), target)
    # embed_tokens is not needed (the target's embedding is used)
    sd = official_state()
    del sd["embed_tokens.weight"]
    load_official(write_bin(tmp_path, sd, "d"), target)


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling this would create the marker file
        return (open, (self.marker, "w"))


def test_pickle_with_arbitrary_object_is_refused(tmp_path, target):
    marker = str(tmp_path / "executed")
    sd = official_state()
    sd["extra"] = Payload(marker)
    folder = write_bin(tmp_path, sd)
    with pytest.raises(GumihoError, match="Refusing to load.*arbitrary code"):
        load_official(folder, target)
    assert not os.path.exists(marker)
    torch.save([torch.zeros(2)], tmp_path / "list.bin")
    with pytest.raises(GumihoError, match="not a state dict"):
        read_checkpoint(str(tmp_path / "list.bin"))
    (tmp_path / "broken.bin").write_bytes(b"\x80\x02not really a checkpoint")
    with pytest.raises(GumihoError):
        read_checkpoint(str(tmp_path / "broken.bin"))


def test_bad_sources(tmp_path, target):
    with pytest.raises(GumihoError, match="does not exist"):
        load_official(str(tmp_path / "nowhere" / "x"), target)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GumihoError, match="holds none of"):
        load_official(str(tmp_path / "empty"), target)


@pytest.mark.parametrize("tree,lengths,new", [
    (TreeSettings(total_tokens=24, depth=7, serial_top_k=4, mlp_top_k=3, mlp_keep=4, full_tree=True, full_tree_tokens=4),
     (5, 12), 24),
    # the official settings (see gumiho.registry): big trees, so one short prompt
    (TreeSettings(total_tokens=63, depth=7, serial_top_k=14, mlp_top_k=35, mlp_keep=35, full_tree=True, full_tree_tokens=8),
     (9,), 10),
])
def test_decoding_with_loaded_drafter_is_lossless(tmp_path, target, tree, lengths, new):
    d = load_official(write_bin(tmp_path, official_state(seed=4, scale=0.6)), target)
    g = torch.Generator().manual_seed(21)
    drafted = 0
    for n in lengths:
        prompt = torch.randint(2, V, (n,), generator=g).tolist()
        ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=new)) for t in s.tokens]
        steps = list(stream(target, prompt, d, GenerationSettings(max_new_tokens=new, tree=tree)))
        assert [t for s in steps for t in s.tokens] == ref
        drafted += sum(s.drafted for s in steps)
    assert drafted > 0
