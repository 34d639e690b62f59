"""The BENCHMARKS.md header names what the numbers depend on: the dtypes and the tree; a sampled
record's speedup is a throughput ratio, and the report says so."""
from gumiho.bench import records, report_sections, report_tables


def test_header_names_the_dtypes_and_the_tree():
    tree = dict(total_tokens=7, depth=5, top_k=4, mlp_top_k=2, mlp_keep=3, full_tree=True, full_tree_tokens=1)
    rec = {"dtype": "float32", "methods": {
        "vanilla": {"tree": None, "drafter_dtype": None},
        "gumiho": {"tree": tree, "drafter_dtype": "bfloat16"},
        "serial": {"tree": tree, "drafter_dtype": "bfloat16"}}}
    words = report_tables.setup_words(rec)
    assert words == ("; target in float32; drafters in bfloat16; draft tree of 7 nodes plus up to 1 full-tree node, "
                     "depth 5, top-k 4 at the serial positions, 2 tokens per MLP head and path, "
                     "3 paths kept per MLP depth")
    # A record from before the drafter dtype was kept, without a full tree.
    old = {"dtype": "float32", "methods": {"gumiho": {"tree": dict(tree, full_tree=False)}}}
    assert report_tables.setup_words(old) == ("; target in float32; draft tree of 7 nodes, depth 5, top-k 4 at the serial "
                                       "positions, 2 tokens per MLP head and path, 3 paths kept per MLP depth")
    # A cost-aware tree: its cap, and how many nodes each method's steps verified on average.
    aware = dict(tree, total_tokens=11, depth=3, full_tree=False, cost_aware=True)
    rec = {"dtype": "float32", "methods": {
        "vanilla": {"tree": None},
        "gumiho": {"tree": aware, "drafter_dtype": "bfloat16", "mean_drafted": 5.17},
        "serial": {"tree": aware, "drafter_dtype": "bfloat16", "mean_drafted": 4.9}}}
    assert report_tables.setup_words(rec) == (
        "; target in float32; drafters in bfloat16; draft tree sized each step by the verify cost measured on "
        "this machine (gumiho.engine.verifycost): at most 11 drafted nodes (drafted nodes per verify step: gumiho 5.2, "
        "serial 4.9), depth 3, top-k 4 at the serial positions, 2 tokens per MLP head and path, "
        "3 paths kept per MLP depth")


def _method(tau, tps, speedup, **extra):
    return {"tau": tau, "acceptance_by_position": [0.5] * 7, "tokens_per_s": tps, "speedup_vs_vanilla": speedup,
            **extra}


def test_speedups_follow_the_kind_of_ratio():
    # A record from before speedup_kind, sampled: per prompt vanilla wrote 64 tokens in 4 s, gumiho 40 in 2 s.
    # Its stored 2.00x divided wall times; the report recomputes tokens/s over tokens/s: 1.25x.
    old_sampled = {"methods": {"vanilla": _method(1.0, 16.0, 1.0), "gumiho": _method(1.6, 20.0, 2.0)},
                   "per_prompt": [{"methods": {"vanilla": {"new_tokens": 64, "wall_s": 4.0},
                                               "gumiho": {"new_tokens": 40, "wall_s": 2.0}}}] * 3}
    assert records.record_speedup(old_sampled, "gumiho") == (1.25, "throughput")
    assert records.record_speedup(old_sampled, "vanilla") == (1.0, "wall time")
    # A greedy record (same tokens): its own figure stands; a new record's kind is taken as written.
    greedy = {"methods": {"vanilla": _method(1.0, 16.0, 1.0), "gumiho": _method(1.6, 24.0, 1.5123)},
              "per_prompt": [{"methods": {"vanilla": {"new_tokens": 64, "wall_s": 4.0},
                                          "gumiho": {"new_tokens": 64, "wall_s": 2.64}}}]}
    assert records.record_speedup(greedy, "gumiho") == (1.5123, "wall time")
    new = {"methods": {"vanilla": _method(1.0, 16.0, 1.0, speedup_kind="wall time"),
                       "gumiho": _method(1.6, 20.0, 1.3, speedup_kind="throughput")}, "per_prompt": []}
    assert records.record_speedup(new, "gumiho") == (1.3, "throughput")
    runs = [("MT-Bench", "mt_bench", old_sampled), ("GSM8K", "gsm8k", greedy)]
    table = report_tables.table(runs)
    assert "| 20.0 | 1.25x (throughput) |" in table and "| 24.0 | 1.51x |" in table
    assert "marked (throughput)" in report_tables.speedup_words(runs)
    assert report_tables.speedup_words(runs[1:]) == ("**speedup** = vanilla wall time / method wall time on the same "
                                              "prompts.")


def test_the_eagle3_section_pairs_the_two_kinds_per_prompt(tmp_path):
    """The Gumiho-vs-EAGLE-3 section: its tau table from the records' own prompts
    (gumiho ahead on one set, behind on the other), the training rows, the lossless counts."""
    import json

    def record(forwards):  # 4 prompts, 60 tokens each; forwards per method
        per = [{"question_id": i, "methods": {m: {"new_tokens": 60, "target_forwards": f[i], "wall_s": f[i] / 10}
                                              for m, f in forwards.items()}} for i in range(4)]
        return {"methods": {m: {"tau": 240 / sum(f), "acceptance_by_position": [0.5] * 7, "tokens_per_s": 10.0,
                                "speedup_vs_vanilla": 1.0, "new_tokens": 240, "target_forwards": sum(f)}
                            for m, f in forwards.items()},
                "per_prompt": per, "prompts": 4, "max_new_tokens": 60, "device": "cpu", "temperature": 0.0,
                "lossless": {"checked": 8, "identical": 8}}

    van = [60] * 4
    (tmp_path / "mt_bench.json").write_text(json.dumps(record({"vanilla": van, "gumiho": [30, 31, 29, 30],
                                                               "eagle3": [40, 41, 39, 40]})))
    (tmp_path / "gsm8k.json").write_text(json.dumps(record({"vanilla": van, "gumiho": [40, 40, 41, 39],
                                                            "eagle3": [30, 30, 31, 29]})))
    (tmp_path / "training_summary_eagle3.json").write_text(json.dumps(
        {"kind": "eagle3", "parameters": 6.1e6, "steps": 240, "tokens_seen": 491520, "wall_s": 1800,
         "held_out": {"loss": 2.5, "top1_by_position": [0.5, 0.4]}}))
    text = "\n".join(report_sections.eagle3_section(tmp_path, resamples=200))
    assert "| MT-Bench | 4 | 2.00 | 1.50 | +0.500" in text and "| GSM8K | 4 | 1.50 | 2.00 | -0.500" in text
    assert "gumiho's tau is above every other method's on 1 of 2 sets" in text
    assert "| eagle3 | 6.10M | 240 | 491,520 | 30 min | 2.500 | 0.50, 0.40 |" in text
    assert "MT-Bench 8/8, GSM8K 8/8" in text
    assert report_sections.eagle3_section(tmp_path / "nothing") == []


def test_the_engine_section_says_who_wins_where(tmp_path):
    """Ratios to each engine's own vanilla, the batch-1 winner and the batch from which
    vLLM's throughput overtakes Gumiho with copying, all computed from the rows."""
    import json

    from gumiho.bench.engines import add_ratios

    def row(engine, method, batch, tps, **extra):
        return {"engine": engine, "method": method, "batch": batch, "tokens_per_s": tps, **extra}

    rows = add_ratios([row("gumiho engine", "vanilla", 1, 16.0, tau=1.0), row("gumiho engine", "gumiho+copy", 1, 20.0,
                                                                            tau=1.9),
                       row("transformers", "generate", 1, 16.5), row("vLLM", "vanilla", 1, 18.0),
                       row("vLLM", "n-gram", 1, 17.0, accepted_per_draft=0.4), row("vLLM", "vanilla", 8, 90.0),
                       row("vLLM", "vanilla", 32, 200.0)])
    assert [r["ratio_to_own_vanilla"] for r in rows] == [1.0, 1.25, 1.0, 1.0, 0.944, 5.0, 11.111]
    path = tmp_path / "engines.json"
    path.write_text(json.dumps({"rows": rows, "prompts": 10, "prompts_file": "mt_bench.jsonl", "max_new_tokens": 64,
                                "cpu": "2 cores", "settings": {"engine": "2 threads", "vllm": "both cores"}}))
    text = "\n".join(report_sections.engines_section(path))
    assert "| gumiho engine | gumiho+copy | 1 | 20.0 | 1.25x | tau 1.90 |" in text
    assert "| vLLM | n-gram | 1 | 17.0 | 0.94x | 0.40 accepted per draft |" in text
    assert "fastest configuration is gumiho engine gumiho+copy (20.0 tokens/s)" in text
    assert "ahead of every other configuration at batch 1" in text
    assert "vLLM overtakes it in throughput from batch 8 (90.0 tokens/s over the batch, 4.5x" in text
    rows[3]["tokens_per_s"] = 21.0
    path.write_text(json.dumps({**json.loads(path.read_text()), "rows": rows}))
    assert "is not ahead of vLLM vanilla (21.0) at batch 1" in "\n".join(report_sections.engines_section(path))
    # The 4-bit file run as stored (issue 40's rows) is told apart from the float32 engines.
    rows[3]["tokens_per_s"] = 18.0
    rows = add_ratios(rows + [row("gumiho engine, llama.cpp runtime", "vanilla", 1, 40.0, tau=1.0),
                              row("transformers", "generate", 1, 16.5)][:1])
    path.write_text(json.dumps({**json.loads(path.read_text()), "rows": rows}))
    text = "\n".join(report_sections.engines_section(path))
    assert ("Among the engines that run the model in float32, Gumiho with copying is ahead at batch 1; the 4-bit "
            "file run as stored is faster: gumiho engine, llama.cpp runtime vanilla (40.0)") in text
    from gumiho.bench.engines import targets
    assert targets(rows, None)["runtime_vanilla_over_transformers"] == round(40.0 / 16.5, 3)


def test_the_flat_verify_targets_are_judged_from_the_rows_and_the_curve_of_the_file_that_ran(tmp_path_factory):
    """Each yardstick compares the right rows: the runtime's rows against llama.cpp's on
    the shipped file (not on the runtime's own file), and the 4-token verify of the file
    the runtime ran; a target is met only on the right side of its bound."""
    from gumiho.bench.engines import targets
    from gumiho.runtimes.llamacpp_files import LAYOUTS

    q40, q41 = LAYOUTS["q4_0"].label, LAYOUTS["q4_1"].label
    rows = [{"engine": "gumiho engine, llama.cpp runtime", "method": "vanilla", "batch": 1, "weights": q40,
             "tokens_per_s": 120.0},
            {"engine": "gumiho engine, llama.cpp runtime", "method": "gumiho+copy", "batch": 1, "weights": q40,
             "tokens_per_s": 90.0},
            {"engine": "llama.cpp (llama-cpp-python)", "method": "vanilla, defaults", "batch": 1, "weights": q41,
             "tokens_per_s": 80.0},
            {"engine": "llama.cpp (llama-cpp-python)", "method": "vanilla, defaults", "batch": 1, "weights": q40,
             "tokens_per_s": 125.0},
            {"engine": "transformers", "method": "generate", "batch": 1, "tokens_per_s": 30.0}]
    curves = {"llama.cpp Q4_1": {"relative": [1.0, 1.9, 2.5, 4.0, 7.5]},
              "llama.cpp Q4_0": {"relative": [1.0, 1.5, 1.25, 3.5, 5.4]}}
    got = targets(rows, curves)
    assert got["runtime_vanilla_over_llamacpp_shipped"] == 1.5
    assert got["verify_4_over_1_its_file"] == {"value": 1.25, "target": "<= 1.3", "met": True}
    assert got["runtime_gumiho_copy_over_runtime_vanilla"]["met"] is False
    assert got["runtime_gumiho_copy_over_llamacpp_shipped"] == {"value": 1.125, "target": "> 1", "met": True}
    curves["llama.cpp Q4_0"]["relative"][2] = 2.29
    assert targets(rows, curves)["verify_4_over_1_its_file"]["met"] is False
    # BENCHMARKS.md says each yardstick with its verdict, per file the runtime ran.
    import json

    record = tmp_path_factory.mktemp("engines") / "mt_bench.json"
    record.write_text(json.dumps({"targets": {q40: targets(rows, curves)}, "verify_cost": {
        name: {"ms": [1.0] * 5, "relative": c["relative"]} for name, c in curves.items()}}))
    text = "\n".join(report_sections.asstored_section(tmp_path_factory.mktemp("none"), record))
    assert f"the llama.cpp runtime on {q40}: its vanilla is 4.00x transformers'" in text
    assert "verify 4 over 1 its file: 2.29 (target <= 1.3: not met)" in text
    assert "| llama.cpp Q4_0 | 1.0 | 1.0 | 1.0 | 1.0 | 1.0 | 1.50x | 2.29x | 3.50x | 5.40x |" in text
