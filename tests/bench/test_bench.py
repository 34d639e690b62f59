"""The benchmark: its core on tiny random targets, its prompt-file errors, and the
command line end to end on a tiny model saved to a local folder."""
import json

import pytest
import torch

from gumiho import Drafter, DrafterConfig, GenerationSettings, GumihoError, TreeSettings
from gumiho.bench import BenchSettings, Prompt, format_table, load_prompts, main, parse_methods, run_benchmark
from gumiho.proposers import CopySettings
from gumiho.train.config import TrainConfig
from gumiho.train.objective import LossConfig
from helpers import OracleDrafter, tiny_target

TOP_KEYS = {"model", "drafter", "device", "temperature", "max_new_tokens", "prompts", "methods", "lossless"}
METHOD_KEYS = {"new_tokens", "wall_s", "tokens_per_s", "target_forwards", "tau", "acceptance_by_position",
               "conditional_acceptance_by_position", "speedup_vs_vanilla"}
SMALL_TREE = TreeSettings(total_tokens=8, depth=4, serial_top_k=2, mlp_top_k=2, mlp_keep=3, full_tree_tokens=2)


def random_drafter(target, kind, seed=0):
    torch.manual_seed(seed)
    return Drafter(DrafterConfig.for_target(target.config, kind)).eval().attach_target(target.model)


def id_prompts(n, vocab=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Prompt(question_id=i, category="test",
                   ids=torch.randint(2, vocab, (int(torch.randint(3, 15, (1,), generator=g)),), generator=g).tolist())
            for i in range(n)]


def settings(**kw):
    base = dict(max_new_tokens=12, warmup=1, warmup_tokens=4, tree=SMALL_TREE, progress=False)
    base.update(kw)
    return BenchSettings(**base)


def check_schema(rec, names):
    assert TOP_KEYS <= set(rec)
    assert set(rec["lossless"]) == {"checked", "identical"}
    assert list(rec["methods"]) == names
    for name, m in rec["methods"].items():
        assert METHOD_KEYS <= set(m), name
        assert isinstance(m["acceptance_by_position"], list)
        assert len(m["acceptance_by_position"]) == len(m["conditional_acceptance_by_position"])
    json.dumps(rec)  # serialisable as is


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_core_schema_and_greedy_lossless(family):
    target = tiny_target(family)
    drafters = {"vanilla": None, **{k: random_drafter(target, k) for k in ("gumiho", "serial", "parallel", "eagle")}}
    prompts = id_prompts(3)
    rec = run_benchmark(target, drafters, prompts, settings())
    check_schema(rec, ["vanilla", "gumiho", "serial", "parallel", "eagle"])
    assert rec["prompts"] == 3 and rec["temperature"] == 0 and rec["max_new_tokens"] == 12
    assert rec["lossless"] == {"checked": 12, "identical": 12}  # 3 prompts x 4 speculative methods
    van = rec["methods"]["vanilla"]
    assert van["tau"] == 1.0 and van["speedup_vs_vanilla"] == 1.0 and van["acceptance_by_position"] == []
    assert van["target_forwards"] == van["new_tokens"]
    for name in ("gumiho", "serial", "parallel", "eagle"):
        m = rec["methods"][name]
        assert m["new_tokens"] == van["new_tokens"]  # same tokens, so the same count
        assert len(m["acceptance_by_position"]) == 7
        assert m["speedup_vs_vanilla"] > 0
        assert m["tree"]["total_tokens"] == SMALL_TREE.total_tokens
        # The drafter's precision as it ran (random_drafter's default on this CPU, never 4-bit here).
        assert m["drafter_dtype"] == str(drafters[name].weight_dtype).removeprefix("torch.")
    assert van["drafter_dtype"] is None
    assert rec["torch_threads"] == torch.get_num_threads()
    assert isinstance(rec["cpu"], str) and rec["cpu"]  # speedups on a CPU depend on which one
    assert len(rec["per_prompt"]) == 3 and all(r["methods"]["gumiho"]["identical"] for r in rec["per_prompt"])
    table = format_table(rec)
    assert "vanilla" in table and "parallel" in table and "eagle" in table and "12/12" in table and "[OK]" in table


def test_mostly_right_drafter_is_measured():
    """With a drafter that is mostly right, tau and acceptance move off zero and the
    run stays identical to vanilla."""
    target = tiny_target("llama", seed=2)
    prompt = [5, 17, 33, 2, 9, 40]
    ref = run_benchmark(target, {"vanilla": None}, [prompt], settings(max_new_tokens=30, warmup=0))
    assert ref["lossless"] == {"checked": 0, "identical": 0}  # nothing speculative to check
    tokens = _vanilla_tokens(target, prompt, 30)
    oracle = OracleDrafter(prompt + tokens + [0] * 16, vocab=96, corrupt=0.1, seed=0)
    rec = run_benchmark(target, {"vanilla": None, "gumiho": oracle}, [prompt], settings(max_new_tokens=30, warmup=0))
    g = rec["methods"]["gumiho"]
    assert rec["lossless"] == {"checked": 1, "identical": 1}
    assert g["tau"] > 1.5 and g["target_forwards"] < rec["methods"]["vanilla"]["target_forwards"]
    acc, cond = g["acceptance_by_position"], g["conditional_acceptance_by_position"]
    assert acc[0] > 0.5 and all(a >= b for a, b in zip(acc, acc[1:]))  # unconditional never rises
    assert cond[0] == pytest.approx(acc[0], abs=1e-3)


def _vanilla_tokens(target, prompt, n):
    from gumiho import GenerationSettings, stream

    return [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=n)) for t in s.tokens]


def test_vanilla_runs_first_and_sampling_is_not_checked():
    target = tiny_target("llama")
    drafters = {"gumiho": random_drafter(target, "gumiho"), "vanilla": None}
    rec = run_benchmark(target, drafters, id_prompts(2), settings(temperature=0.8, top_p=0.9, seed=3))
    assert list(rec["methods"]) == ["vanilla", "gumiho"]
    assert rec["lossless"] == {"checked": 0, "identical": 0}
    assert "not checked" in format_table(rec)


def test_speedup_at_temperature_is_a_throughput_ratio():
    """Sampling writes texts of other lengths: dividing wall times would credit whichever
    method stopped sooner, so the speedup is the ratio of tokens per second, and the
    record says so. An 8-token vocabulary makes EOS likely, so lengths differ."""
    target = tiny_target("llama", vocab=8, seed=1)
    drafters = {"vanilla": None, "gumiho": random_drafter(target, "gumiho")}
    prompts = id_prompts(6, vocab=8)
    rec = run_benchmark(target, drafters, prompts, settings(max_new_tokens=24, temperature=0.8, seed=5))
    van, g = rec["methods"]["vanilla"], rec["methods"]["gumiho"]
    assert any(r["methods"]["vanilla"]["new_tokens"] != r["methods"]["gumiho"]["new_tokens"]
               for r in rec["per_prompt"])
    assert van["new_tokens"] != g["new_tokens"]  # so the two ratios differ
    assert g["speedup_kind"] == "throughput" and van["speedup_kind"] == "wall time"
    assert van["speedup_vs_vanilla"] == 1.0
    tput = (g["new_tokens"] / g["wall_s"]) / (van["new_tokens"] / van["wall_s"])
    assert g["speedup_vs_vanilla"] == pytest.approx(tput, rel=1e-3)
    assert g["speedup_vs_vanilla"] != pytest.approx(van["wall_s"] / g["wall_s"], rel=1e-3)  # the old, wrong figure
    table = format_table(rec)
    assert "x (tok/s)" in table and "wall times are not compared" in table
    # Greedy: the same tokens on every prompt, so wall times compare.
    greedy = run_benchmark(target, drafters, prompts[:2], settings(max_new_tokens=8))
    assert {m["speedup_kind"] for m in greedy["methods"].values()} == {"wall time"}
    assert "(tok/s)" not in format_table(greedy) and "vanilla wall time / method wall time" in format_table(greedy)


def test_speedup_kinds_on_hand_made_runs():
    from gumiho.engine.metrics import speedup, speedup_kind

    # The case in miniature: vanilla wrote 64 tokens in 4 s, Gumiho 40 in 2 s.
    pairs = [(64, 4.0, 40, 2.0)]
    assert speedup_kind(pairs) == "throughput" and speedup(pairs) == pytest.approx((40 / 2) / (64 / 4))
    assert speedup(pairs, "wall time") == 2.0  # what the bench printed before
    same = [(64, 4.0, 64, 2.0), (10, 1.0, 10, 1.0)]
    assert speedup_kind(same) == "wall time" and speedup(same) == pytest.approx(5.0 / 3.0)
    # Per-prompt counts that differ but add up alike still say throughput (and give the same figure).
    mixed = [(10, 1.0, 12, 1.0), (12, 1.0, 10, 1.0)]
    assert speedup_kind(mixed) == "throughput" and speedup(mixed) == pytest.approx(1.0)
    assert speedup([(0, 1.0, 5, 1.0)]) is None and speedup([(5, 1.0, 5, 0.0)]) is None


def test_core_rejects_bad_settings():
    target = tiny_target("llama")
    with pytest.raises(GumihoError, match="max_new_tokens"):
        run_benchmark(target, {"vanilla": None}, id_prompts(1), settings(max_new_tokens=0))
    with pytest.raises(GumihoError, match="temperature"):
        run_benchmark(target, {"vanilla": None}, id_prompts(1), settings(temperature=float("nan")))
    with pytest.raises(GumihoError, match="No methods"):
        run_benchmark(target, {}, id_prompts(1), settings())
    with pytest.raises(GumihoError, match="Prompt 7"):
        run_benchmark(target, {"vanilla": None}, [Prompt(question_id=7, ids=list(range(2, 90)) * 6)], settings())


# ----------------------------------------------------------------------------- prompt files


def write(tmp_path, text, name="p.jsonl"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_load_prompts_reads_first_turn_and_limit(tmp_path):
    lines = [json.dumps({"question_id": i, "category": "c", "turns": [f"question {i}", "follow-up"]})
             for i in range(5)]
    path = write(tmp_path, "\n".join(lines[:2]) + "\n\n   \n" + "\n".join(lines[2:]) + "\n")
    ps = load_prompts(path)
    assert [p.text for p in ps] == [f"question {i}" for i in range(5)]
    assert [p.question_id for p in ps] == list(range(5)) and ps[0].category == "c"
    assert len(load_prompts(path, limit=2)) == 2
    assert len(load_prompts(path, limit=50)) == 5


def test_load_prompts_limit_spreads_over_categories(tmp_path):
    """A file sorted by category (as MT-Bench is) still gives every category with a
    small --limit: the first of each in turn, kept in file order."""
    rows = [(c, i) for c in ("writing", "roleplay", "math") for i in range(4)]
    path = write(tmp_path, "".join(json.dumps({"question_id": f"{c}{i}", "category": c, "turns": [f"{c} {i}"]}) + "\n"
                                   for c, i in rows))
    ids = [p.question_id for p in load_prompts(path, limit=5)]
    assert ids == ["writing0", "writing1", "roleplay0", "roleplay1", "math0"]
    assert [p.question_id for p in load_prompts(path, limit=3, spread=False)] == ["writing0", "writing1", "writing2"]
    assert [p.question_id for p in load_prompts(path, limit=2)] == ["writing0", "roleplay0"]
    assert len(load_prompts(path, limit=12)) == 12 and len(load_prompts(path, limit=99)) == 12


def test_load_prompts_uses_the_shared_reader_and_checks_limit(tmp_path):
    """Bad records are refused by gumiho.files.prompt_files (tests/bench/test_prompts_file.py has one
    test per kind); the bench adds only the selection, and takes every shape it reads."""
    with pytest.raises(GumihoError, match=r"line 2: not valid JSON"):
        load_prompts(write(tmp_path, '{"turns": ["ok"]}\n{"turns": ["ok"\n'))
    with pytest.raises(GumihoError, match="does not exist"):
        load_prompts(str(tmp_path / "nope.jsonl"))
    assert [p.text for p in load_prompts(write(tmp_path, '{"question_id": 1, "prompt": "hi"}\n'))] == ["hi"]
    assert [p.text for p in load_prompts(write(tmp_path, "One.\n\nTwo.\n", "p.txt"))] == ["One.", "Two."]
    with pytest.raises(GumihoError, match="--limit"):
        load_prompts(write(tmp_path, '{"turns": ["x"]}\n'), limit=0)


def test_parse_methods():
    assert parse_methods("vanilla, Gumiho,gumiho,serial") == ["vanilla", "gumiho", "serial"]
    with pytest.raises(GumihoError, match="Unknown method"):
        parse_methods("vanilla,medusa")
    with pytest.raises(GumihoError, match="empty"):
        parse_methods(" , ")


# ----------------------------------------------------------------------------- command line


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory):
    """A tiny random Llama with a word-level tokenizer and a chat template, saved the
    way a hub model is, so the CLI loads it by path like any other model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-model")
    words = ["<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(93)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tok.save_pretrained(str(folder))
    tiny_target("llama", seed=4).model.save_pretrained(str(folder))
    return str(folder)


def test_cli_end_to_end(tmp_path, tiny_model_folder, capsys):
    prompts = write(tmp_path, "\n".join(json.dumps({"question_id": i, "category": "t", "turns": [f"w{i} w{i + 3} w7"]})
                                        for i in range(4)) + "\n")
    out = tmp_path / "res" / "b.json"
    rc = main(["--prompts", prompts, "--limit", "3", "--max-new-tokens", "8", "--methods", "vanilla,gumiho,parallel",
               "--model", tiny_model_folder, "--device", "cpu", "--total-tokens", "6", "--depth", "3",
               "--top-k", "2", "--no-full-tree", "--out", str(out), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rec = json.loads(out.read_text())
    check_schema(rec, ["vanilla", "gumiho", "parallel"])
    assert rec["prompts"] == 3 and rec["lossless"] == {"checked": 6, "identical": 6}
    assert rec["methods"]["gumiho"]["tree"]["total_tokens"] == 6 and rec["methods"]["gumiho"]["tree"]["full_tree"] is False
    assert rec["methods"]["gumiho"]["tree"]["serial_top_k"] == 2  # --top-k reached the tree that ran
    # No drafter fits a random model: the fallback is loud, on screen and in the JSON.
    assert rec["methods"]["gumiho"]["random_drafter"] is True and rec["drafter"].startswith("random-weights")
    # The two random-weight fallbacks; a third, when the machine running the suite is busy, names it.
    loud = [w for w in rec["warnings"] if "machine was busy" not in w]
    assert len(loud) == 2 and "RANDOM-WEIGHT" in cap.err, rec["warnings"]
    assert "speedup" in cap.out and "6/6" in cap.out


def test_cli_reports_bad_input_without_loading_a_model(tmp_path, capsys):
    bad = write(tmp_path, '{"turns": ["fine"]}\nnot json\n')
    assert main(["--prompts", bad]) == 2
    assert "line 2: not valid JSON" in capsys.readouterr().err
    assert main(["--prompts", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--prompts", bad, "--methods", "vanilla,medusa"]) == 2
    assert "Unknown method" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--prompts", bad, "--max-new-tokens", "0"])
    assert ">= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--prompts", bad, "--temperature", "nan"])


def test_cli_drafter_for_another_model_is_refused(tmp_path, tiny_model_folder, capsys):
    other = tiny_target("llama", hidden=48, heads=6, kv_heads=6)
    folder = tmp_path / "drafter"
    random_drafter(other, "gumiho").save(str(folder))
    prompts = write(tmp_path, '{"turns": ["w1 w2"]}\n')
    rc = main(["--prompts", prompts, "--model", tiny_model_folder, "--drafter", str(folder), "--device", "cpu",
               "--no-progress"])
    assert rc == 2
    assert "does not match" in capsys.readouterr().err


def test_registry_names_and_tree_flags():
    pytest.importorskip("gumiho.registry")
    from gumiho.bench import build_parser, registry_lookup, tree_from_args
    from gumiho.loading import DEFAULT_TARGET

    assert registry_lookup("smollm2-135m-gumiho")["model"] == DEFAULT_TARGET
    assert registry_lookup("HuggingFaceTB/SmolLM2-360M") is None and registry_lookup(None) is None
    official = registry_lookup("amd/Gumiho-llama3-8b")
    assert official["drafters"]["gumiho"] and official["tree"].total_tokens == 63
    # Flags override a pair's tree settings and leave the pair's own object alone.
    args = build_parser().parse_args(["--prompts", "x.jsonl", "--total-tokens", "10", "--no-full-tree"])
    tree = tree_from_args(args, "cpu", official["tree"])
    assert tree.total_tokens == 10 and tree.serial_top_k == 14 and not tree.full_tree
    assert official["tree"].total_tokens == 63 and official["tree"].full_tree
    # --full-tree-tokens asks for the extension even where the device's default has it off (the CPU's).
    on = tree_from_args(build_parser().parse_args(["--prompts", "x.jsonl", "--full-tree-tokens", "8"]), "cpu")
    assert on.full_tree and on.full_tree_tokens == 8
    off = tree_from_args(build_parser().parse_args(["--prompts", "x.jsonl", "--full-tree-tokens", "8",
                                                    "--no-full-tree"]), "cpu")
    assert not off.full_tree


def test_cpu_summary_names_the_model_and_its_vector_units():
    from gumiho.kernels.machine import cpu_summary, parse_cpuinfo
    text = ("processor\t: 0\nmodel name\t: Example CPU 9000\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n\n"
            "processor\t: 1\nmodel name\t: Example CPU 9000\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    info = parse_cpuinfo(text)
    assert info == ("Example CPU 9000", frozenset({"fpu", "sse2", "avx2", "avx512f", "avx512_bf16"}))
    assert cpu_summary(info) == "Example CPU 9000, AVX2, AVX-512, AVX512-BF16"
    assert cpu_summary(("", frozenset())) == "unknown CPU"


def test_cli_copy_and_hf_methods(tmp_path, tiny_model_folder, capsys):
    """The copy proposer beside Gumiho and alone, and transformers' generate plain and
    with its prompt lookup, through the same command: every one of them lossless, the
    copy methods' accepted tokens by proposer recorded, the HF peers' forwards counted."""
    # Prompts that repeat themselves, so that prompt lookup finds something to copy.
    lines = [json.dumps({"question_id": i, "category": "t",
                         "turns": [" ".join(f"w{(i + k) % 9 + 3}" for k in range(12)) * 2]}) for i in range(3)]
    prompts = write(tmp_path, "\n".join(lines) + "\n")
    out = tmp_path / "copy.json"
    rc = main(["--prompts", prompts, "--max-new-tokens", "16", "--methods",
               "vanilla,gumiho,gumiho+copy,copy,hf,hf-lookup", "--model", tiny_model_folder, "--device", "cpu",
               "--total-tokens", "4", "--depth", "3", "--top-k", "2", "--copy-tokens", "5", "--copy-min-match", "1",
               "--out", str(out), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rec = json.loads(out.read_text())
    names = ["vanilla", "gumiho", "gumiho+copy", "copy", "hf", "hf-lookup"]
    check_schema(rec, names)
    assert rec["lossless"] == {"checked": 15, "identical": 15}, rec["lossless_mismatches"]
    m = rec["methods"]
    assert m["copy"]["copy"] == {"max_tokens": 5, "min_match": 1, "max_match": 8, "keep_above": 0.0}
    assert m["copy"]["tree"] is None and m["gumiho+copy"]["tree"]["total_tokens"] == 4
    assert set(m["copy"]["accepted_by_proposer"]) <= {"copy"} and m["copy"]["copy_nodes"] > 0
    assert m["gumiho"]["copy"] is None and m["gumiho"]["copy_nodes"] == 0
    # Copy alone: every accepted token was copied, so its part is all of the acceptance.
    assert m["copy"]["copied_acceptance_by_position"] == m["copy"]["acceptance_by_position"]
    assert m["gumiho"]["copied_acceptance_by_position"] is None
    # Only the gumiho drafter was random (one warning for it, none for the copy methods).
    assert m["gumiho+copy"]["drafter"] == m["gumiho"]["drafter"]
    assert m["hf"]["target_forwards"] == m["vanilla"]["target_forwards"]  # one forward a token, as vanilla
    assert m["hf-lookup"]["hf_lookup_tokens"] == 10 and m["hf"]["acceptance_by_position"] == []
    assert "copied nodes accepted" in cap.out


def test_copy_flags_are_checked_before_loading(tmp_path, capsys):
    prompts = write(tmp_path, '{"turns": ["x"]}\n')
    rc = main(["--prompts", prompts, "--methods", "vanilla,copy", "--copy-min-match", "9", "--copy-max-match", "4",
               "--model", str(tmp_path / "no-such-model")])
    assert rc == 2 and "min_match" in capsys.readouterr().err


def _tree_flags():
    """(flag, its arguments, the TreeSettings field it sets, the value it sets) for every
    flag of the bench's draft-tree argument group, so that a flag added there is tested
    too. A value flag stores under its field's name, set here to the default plus 3; a
    switch stores its const under its field's name, or is listed in ``switches``."""
    from gumiho.bench import build_parser

    switches = {"no_full_tree": ("full_tree", False)}
    # argparse has no public way to list a group's flags; its own attributes hold them.
    group = next(g for g in build_parser()._action_groups if (g.title or "").startswith("draft tree"))
    out = []
    for action in group._group_actions:
        flag = action.option_strings[0]
        field, value = switches.get(action.dest, (action.dest, action.const))
        assert field in TreeSettings.__dataclass_fields__, f"{flag} stores {action.dest!r}: no TreeSettings field"
        if action.nargs == 0:
            out.append((flag, [flag], field, value))
        else:
            value = getattr(TreeSettings(), field) + 3
            out.append((flag, [flag, str(value)], field, value))
    return out


def test_every_tree_flag_reaches_the_tree():
    """Each tree flag of the bench, set away from the tree it starts from, is what the
    drafted tree holds (--top-k once set a stray top_k and left the branching alone)."""
    from gumiho.bench import build_parser, tree_from_args

    flags = _tree_flags()
    assert {"--top-k", "--total-tokens", "--no-full-tree", "--cost-aware", "--fixed-size"} <= {f for f, *_ in flags}
    for flag, argv, field, value in flags:
        # The starting tree holds something else, so a flag that sets nothing is seen.
        start = TreeSettings(**{field: (not value) if isinstance(value, bool) else value - 3})
        tree = tree_from_args(build_parser().parse_args(["--prompts", "x.jsonl", *argv]), "cpu", start)
        assert getattr(tree, field) == value != getattr(start, field), flag
    args = build_parser().parse_args(["--prompts", "x.jsonl", "--top-k", "10"])
    assert tree_from_args(args, "cpu").serial_top_k == 10


@pytest.mark.parametrize("settings", [TreeSettings(), GenerationSettings(), BenchSettings(), CopySettings(),
                                      LossConfig(), TrainConfig(data="d", out="o"),
                                      DrafterConfig(hidden_size=8, vocab_size=16, num_attention_heads=2,
                                                    num_key_value_heads=2)],
                         ids=lambda s: type(s).__name__)
def test_settings_refuse_an_unknown_attribute(settings):
    """A settings object takes only its own fields, so a renamed field fails where it
    is set (tree.top_k = 10) instead of being stored where nothing reads it."""
    with pytest.raises(AttributeError):
        settings.no_such_setting = 10
    if isinstance(settings, TreeSettings):
        with pytest.raises(AttributeError):
            settings.top_k = 10  # the field's name before it became serial_top_k
    assert not hasattr(settings, "__dict__")
