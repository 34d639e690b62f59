"""Drafters in other projects' layouts (gumiho.formats): synthetic checkpoints built
here to the published names, shapes and config keys (EAGLE-3 as the EAGLE repository
and SpecForge store it, and as speculators does; Medusa-1 as FasterDecoding and vLLM
store it), checked against the published math written out independently below, run
losslessly, written out and read back, and every refusal."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from app.views.heads import head_label
from gumiho import GenerationSettings, TreeSettings, load_drafter, stream
from gumiho.drafter import Drafter, DrafterConfig
from gumiho.errors import GumihoError
from gumiho.formats.eagle3 import write_eagle3
from gumiho.proposers import Budget, DraftSession, as_proposer
from helpers import tiny_target

VOCAB, HIDDEN, LAYERS = 96, 32, 4
AUX = [1, 2, 3]  # fused target layers of the synthetic EAGLE-3 drafters
TREE = TreeSettings(total_tokens=10, depth=5, serial_top_k=3)


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=4, kv_heads=2, seed=7)


def _rand(*shape, scale=0.2, g=None):
    return torch.randn(*shape, generator=g) * scale


def assert_lossless(target, drafter):
    """Greedy speculative decoding gives vanilla's tokens, and the drafter really drafted."""
    for prompt in ([5, 17, 33, 2, 9], [40, 3, 3, 81, 12, 60, 2, 2, 7]):
        ref = [x for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=30)) for x in s.tokens]
        steps = list(stream(target, prompt, drafter, GenerationSettings(max_new_tokens=30, tree=TREE)))
        assert [x for s in steps for x in s.tokens] == ref
        assert all(s.drafted > 0 for s in steps[1:-1])


# ----------------------------------------------------------------------------- EAGLE-3 checkpoints


def eagle3_tensors(draft_ids, prefix, seed=0, hidden=HIDDEN, vocab=VOCAB, heads=4, kv=2):
    """Random weights under EAGLE-3's published names and shapes for a target of
    width ``hidden``: fc over three fused layers, one layer whose q/k/v read 2H."""
    g = torch.Generator().manual_seed(seed)
    hd, inter = hidden // heads, 2 * hidden
    t = {"fc.weight": _rand(hidden, 3 * hidden, g=g),
         "norm.weight": 1 + _rand(hidden, scale=0.1, g=g),
         "lm_head.weight": _rand(len(draft_ids), hidden, scale=0.5, g=g)}
    for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        t[f"{prefix}{name}.weight"] = 1 + _rand(hidden, scale=0.1, g=g)
    t[f"{prefix}self_attn.q_proj.weight"] = _rand(heads * hd, 2 * hidden, g=g)
    t[f"{prefix}self_attn.k_proj.weight"] = _rand(kv * hd, 2 * hidden, g=g)
    t[f"{prefix}self_attn.v_proj.weight"] = _rand(kv * hd, 2 * hidden, g=g)
    t[f"{prefix}self_attn.o_proj.weight"] = _rand(hidden, heads * hd, g=g)
    t[f"{prefix}mlp.gate_proj.weight"] = _rand(inter, hidden, g=g)
    t[f"{prefix}mlp.up_proj.weight"] = _rand(inter, hidden, g=g)
    t[f"{prefix}mlp.down_proj.weight"] = _rand(hidden, inter, g=g)
    ids = torch.tensor(draft_ids, dtype=torch.long)
    t["d2t"] = ids - torch.arange(len(draft_ids))
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    t["t2d"] = t2d
    return t


def llama_keys(hidden=HIDDEN, vocab=VOCAB, heads=4, kv=2):
    return {"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": hidden // heads, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "vocab_size": vocab, "max_position_embeddings": 512, "hidden_act": "silu"}


def eagle3_config(layout, n_draft, **llama):
    if layout == "eagle":  # the EAGLE repository's and SpecForge's config
        return {"architectures": ["LlamaForCausalLMEagle3"], **llama_keys(**llama), "draft_vocab_size": n_draft,
                "target_hidden_size": llama.get("hidden", HIDDEN),
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX}}
    return {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "draft_vocab_size": n_draft,
            "target_hidden_size": llama.get("hidden", HIDDEN), "eagle_aux_hidden_state_layer_ids": AUX,
            "transformer_layer_config": {"architectures": ["LlamaForCausalLM"], **llama_keys(**llama)},
            "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"proposal_type": "greedy",
                                                                                "speculative_tokens": 3}],
                                   "verifier": {"name_or_path": "tiny-llama"}}}


DRAFT_IDS = sorted(set(range(2, VOCAB, 3)) | {1})  # a reduced draft vocabulary, eos included


def write_checkpoint(folder, config, tensors, weights_name="model.safetensors"):
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if weights_name.endswith(".safetensors"):
        save_file(tensors, str(folder / weights_name))
    else:
        torch.save(tensors, str(folder / weights_name))
    return str(folder)


def eagle3_folder(tmp_path, layout, seed=0, weights_name="model.safetensors", edit=None):
    prefix = "midlayer." if layout == "eagle" else "layers.0."
    tensors = eagle3_tensors(DRAFT_IDS, prefix, seed)
    config = eagle3_config(layout, len(DRAFT_IDS))
    if edit:
        edit(config, tensors)
    return write_checkpoint(tmp_path / f"{layout}-{seed}", config, tensors, weights_name), tensors, config


# ----------------------------------------------------------------------------- the published math


def rms(x, w, eps=1e-5):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x, pos, theta=10000.0):
    """Llama's rotary embedding (halves rotated), positions ``pos`` [T]."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    ang = pos.float()[:, None] * inv
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


def eagle3_reference(t, prefix, embeds, fused, norm_before_residual, heads=4, kv=2):
    """EAGLE-3's draft layer over a context, as its paper and vLLM's loader define it,
    written out op by op: returns the draft-vocabulary logits at every position.
    embeds [T, H] token embeddings (of x_{i+1}), fused [T, 3H] the target's layers."""
    T, H = embeds.shape
    hd = H // heads
    s = fused @ t["fc.weight"].T
    s_normed = rms(s, t[prefix + "hidden_norm.weight"])
    x = torch.cat([rms(embeds, t[prefix + "input_layernorm.weight"]), s_normed], -1)
    q = (x @ t[prefix + "self_attn.q_proj.weight"].T).view(T, heads, hd).transpose(0, 1)
    k = (x @ t[prefix + "self_attn.k_proj.weight"].T).view(T, kv, hd).transpose(0, 1)
    v = (x @ t[prefix + "self_attn.v_proj.weight"].T).view(T, kv, hd).transpose(0, 1)
    pos = torch.arange(T)
    q, k = rotate(q, pos), rotate(k, pos)
    k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    att = att.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf")).softmax(-1)
    a = (att @ v).transpose(0, 1).reshape(T, H) @ t[prefix + "self_attn.o_proj.weight"].T
    r = (s_normed if norm_before_residual else s) + a
    m = rms(r, t[prefix + "post_attention_layernorm.weight"])
    out = r + (F.silu(m @ t[prefix + "mlp.gate_proj.weight"].T) * (m @ t[prefix + "mlp.up_proj.weight"].T)) \
        @ t[prefix + "mlp.down_proj.weight"].T
    return rms(out, t["norm.weight"]) @ t["lm_head.weight"].T


def context_inputs(target, prompt):
    """The target's fused layers AUX at every prompt position and the embeddings of
    the following tokens, as a drafter reads them."""
    with torch.no_grad():
        out = target.model(torch.tensor([prompt]), output_hidden_states=True)
        fused = torch.cat([out.hidden_states[i][0] for i in AUX], -1)
        nxt = torch.tensor(prompt[1:] + [int(out.logits[0, -1].argmax())])
        return fused, nxt, target.model.get_input_embeddings()(nxt)


@pytest.mark.parametrize("layout", ["eagle", "speculators"])
def test_eagle3_checkpoint_reads_as_the_published_math(tmp_path, target, layout):
    folder, t, _ = eagle3_folder(tmp_path, layout)
    drafter = load_drafter(folder, target, dtype="fp32")  # the CPU default may be bf16: compare in float32
    assert drafter.cfg.kind == "eagle3" and drafter.cfg.feature_layers == tuple(AUX)
    assert drafter.draft_vocab_ids.tolist() == DRAFT_IDS  # target id = draft id + d2t[draft id]
    assert drafter.cfg.norm_before_residual == (layout == "speculators")  # each layout's default
    prompt = [5, 17, 33, 2, 9, 41]
    fused, nxt, emb = context_inputs(target, prompt)
    prefix = "midlayer." if layout == "eagle" else "layers.0."
    ref = eagle3_reference(t, prefix, emb, fused, drafter.cfg.norm_before_residual)
    session = DraftSession(drafter)
    with torch.no_grad():
        session.extend(fused, nxt)
        got = drafter.draft_logits(session.last_out)
    assert torch.allclose(got, ref[-1], atol=1e-4)
    # The first drafted token is the reference's best draft id, mapped to the target's id.
    tree = session.propose(int(nxt[-1]), Budget(TREE))
    assert tree.tokens[1] == DRAFT_IDS[int(ref[-1].argmax())]


@pytest.mark.parametrize("layout, weights", [("eagle", "model.safetensors"), ("eagle", "pytorch_model.bin"),
                                             ("speculators", "model.safetensors")])
def test_imported_eagle3_is_lossless(tmp_path, target, layout, weights):
    folder, _, _ = eagle3_folder(tmp_path, layout, seed=3, weights_name=weights)
    drafter = load_drafter(folder, target)
    heads = [head_label(h.family, h.kind) for h in as_proposer(drafter).heads]
    assert heads == ["EAGLE-3 draft layer"]
    assert_lossless(target, drafter)


def test_export_then_import_drafts_the_same_trees(tmp_path, target):
    torch.manual_seed(4)
    drafter = Drafter(DrafterConfig.for_target(target.config, "eagle3", feature_layers=tuple(AUX)))
    drafter.attach_target(target.model)
    drafter.set_draft_vocab(torch.tensor(DRAFT_IDS[::-1]))  # any order in, id order kept
    drafter.init_own_head(target.model)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    drafter.eval()
    prompt = [5, 17, 33, 2, 9, 41, 7]
    fused, nxt, _ = context_inputs(target, prompt)
    for layout in ("eagle", "speculators"):
        files = write_eagle3(drafter, str(tmp_path / layout), target.config, layout=layout)
        config = json.loads(open(files[0]).read())
        back = load_drafter(str(tmp_path / layout), target, dtype="fp32")
        assert back.draft_vocab_ids.tolist() == DRAFT_IDS and config["draft_vocab_size"] == len(DRAFT_IDS)
        trees = []
        for d in (drafter, back):
            session = DraftSession(d)
            with torch.no_grad():
                session.extend(fused, nxt)
            tree = session.propose(int(nxt[-1]), Budget(TREE))
            trees.append((tree.tokens, tree.parents, [round(p, 5) for p in tree.probs]))
        assert trees[0] == trees[1]
        outs = [[x for s in stream(target, prompt, d, GenerationSettings(max_new_tokens=24, tree=TREE))
                 for x in s.tokens] for d in (drafter, back)]
        assert outs[0] == outs[1]


# ----------------------------------------------------------------------------- Medusa


def medusa_tensors(layout, heads=3, blocks=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = {}
    for k in range(heads):
        for j in range(blocks):
            w, b = _rand(HIDDEN, HIDDEN, g=g), _rand(HIDDEN, scale=0.05, g=g)
            if layout == "fasterdecoding":
                t[f"{k}.{j}.linear.weight"], t[f"{k}.{j}.linear.bias"] = w, b
            else:
                t[f"blocks.{k}.layers.{j}.weight"], t[f"blocks.{k}.layers.{j}.bias"] = w, b
        head = _rand(VOCAB, HIDDEN, scale=0.5, g=g)
        t[f"{k}.{blocks}.weight" if layout == "fasterdecoding" else f"lm_heads.{k}.weight"] = head
    return t


def medusa_config(layout, heads=3, blocks=1):
    if layout == "fasterdecoding":
        return {"medusa_num_heads": heads, "medusa_num_layers": blocks, "base_model_name_or_path": "tiny-llama"}
    return {"architectures": ["MedusaModel"], "num_heads": heads, "num_hidden_layers": blocks, "hidden_size": HIDDEN,
            "vocab_size": VOCAB, "truncated_vocab_size": None}


@pytest.mark.parametrize("layout, weights", [("fasterdecoding", "medusa_lm_head.pt"),
                                             ("vllm", "model.safetensors")])
def test_medusa_heads_read_as_published_and_are_lossless(tmp_path, target, layout, weights):
    t = medusa_tensors(layout)
    folder = write_checkpoint(tmp_path / layout, medusa_config(layout), t, weights)
    drafter = load_drafter(folder, target, dtype="fp32")
    assert drafter.cfg.kind == "medusa" and drafter.cfg.max_depth == 3
    h = torch.randn(2, HIDDEN)
    want = []
    for k in range(3):  # head k: h + SiLU(W h + b), then its own LM head
        w, b = ((t[f"{k}.0.linear.weight"], t[f"{k}.0.linear.bias"]) if layout == "fasterdecoding"
                else (t[f"blocks.{k}.layers.0.weight"], t[f"blocks.{k}.layers.0.bias"]))
        x = h + F.silu(h @ w.T + b)
        want.append(x @ (t[f"{k}.1.weight"] if layout == "fasterdecoding" else t[f"lm_heads.{k}.weight"]).T)
    with torch.no_grad():
        got = drafter.head_logits(torch.stack(drafter.run_heads(h), 1))
    assert torch.allclose(got, torch.stack(want, 1), atol=1e-4)
    labels = [head_label(hd.family, hd.kind) for hd in as_proposer(drafter).heads]
    assert labels == ["Medusa heads"]
    assert_lossless(target, drafter)


# ----------------------------------------------------------------------------- refusals


def _shift_d2t(config, tensors):
    tensors["d2t"] = tensors["d2t"] + 1  # every draft id one target id too far: the last leaves the vocabulary


def _duplicate_d2t(config, tensors):
    tensors["d2t"][1] = tensors["d2t"][0] - 1  # draft ids 0 and 1 on the same target id


def _t2d_disagrees(config, tensors):
    tensors["t2d"][0] = not bool(tensors["t2d"][0])


def _drop(name):
    return lambda config, tensors: tensors.pop(name)


def _set(key, value):
    return lambda config, tensors: config.__setitem__(key, value)


@pytest.mark.parametrize("edit, words", [
    (_shift_d2t, "outside the target's vocabulary"),
    (_duplicate_d2t, "same target token"),
    (_t2d_disagrees, "disagree"),
    (_drop("midlayer.hidden_norm.weight"), "lacks 1 of"),
    (_drop("fc.weight"), "lacks 1 of"),
    (_set("hidden_size", 48), "hidden size 32"),
    (_set("vocab_size", 128), "vocabulary of 128 tokens"),
    (_set("target_hidden_size", 64), "hidden size 64"),
    (_set("attention_bias", True), "biases"),
    (_set("draft_vocab_size", 10), "does not match its config"),
    (_set("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "Unsupported rope_scaling"),
])
def test_bad_eagle3_checkpoints_are_refused_by_name(tmp_path, target, edit, words):
    folder, _, _ = eagle3_folder(tmp_path, "eagle", edit=edit)
    with pytest.raises(GumihoError, match=words):
        load_drafter(folder, target)


def test_a_checkpoint_in_no_known_layout_is_refused(tmp_path, target):
    folder = write_checkpoint(tmp_path / "other", {"architectures": ["SomethingElse"], "hidden_size": HIDDEN},
                              {"w": torch.zeros(2)})
    with pytest.raises(GumihoError, match="no layout this engine reads"):
        load_drafter(folder, target)


def test_a_pickle_that_would_run_code_is_refused(tmp_path, target):
    class Payload:
        def __reduce__(self):
            return (print, ("pwned",))

    folder, tensors, _ = eagle3_folder(tmp_path, "eagle", weights_name="pytorch_model.bin")
    torch.save({**tensors, "extra": Payload()}, f"{folder}/pytorch_model.bin")
    with pytest.raises(GumihoError, match="Refusing to load"):
        load_drafter(folder, target)


def test_medusa_for_another_target_or_a_truncated_vocabulary_is_refused(tmp_path, target):
    wide = write_checkpoint(tmp_path / "wide", {**medusa_config("vllm"), "hidden_size": 64},
                            medusa_tensors("vllm"))
    with pytest.raises(GumihoError, match="hidden size 64"):
        load_drafter(wide, target)
    cut = write_checkpoint(tmp_path / "cut", {**medusa_config("vllm"), "truncated_vocab_size": 32},
                           medusa_tensors("vllm"))
    with pytest.raises(GumihoError, match="truncated vocabulary"):
        load_drafter(cut, target)
    short = medusa_tensors("fasterdecoding")
    short.pop("2.1.weight")
    missing = write_checkpoint(tmp_path / "missing", medusa_config("fasterdecoding"), short, "medusa_lm_head.pt")
    with pytest.raises(GumihoError, match="lacks 1 of"):
        load_drafter(missing, target)


def test_llama3_rope_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from gumiho.drafter import rope_inv_freq

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    cfg = LlamaConfig(hidden_size=4096, num_attention_heads=32, rope_theta=500000.0, rope_scaling=scaling,
                      max_position_embeddings=131072)
    inv, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    assert torch.allclose(rope_inv_freq(128, 500000.0, scaling), inv)
    assert torch.allclose(rope_inv_freq(128, 500000.0, {"rope_type": "linear", "factor": 2.0}),
                          rope_inv_freq(128, 500000.0) / 2)


def test_a_hub_id_in_another_layout_loads_through_the_registry(tmp_path, monkeypatch):
    """An EAGLE-3 repo named by hub id (the hub faked by a folder): its config.json says
    the layout, its weights come next; the registry's EAGLE-3 pair goes the same way."""
    import huggingface_hub

    from gumiho.registry import resolve

    folder, _, _ = eagle3_folder(tmp_path, "eagle", seed=5)
    fetched = []

    def fake_download(repo_id, filename, revision=None):
        fetched.append((repo_id, filename))
        path = f"{folder}/{filename}"
        if not __import__("os").path.exists(path):
            raise huggingface_hub.errors.EntryNotFoundError(f"{filename} not in {repo_id}")
        return path

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    target = tiny_target("llama", vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=4, kv_heads=2, seed=7)
    pair = resolve("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert pair.target == "meta-llama/Llama-3.1-8B-Instruct" and pair.tree.serial_top_k == 10
    drafter = pair.load_drafter(target)
    assert drafter.cfg.kind == "eagle3"
    assert fetched[:2] == [("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "config.json"),
                           ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "model.safetensors")]
