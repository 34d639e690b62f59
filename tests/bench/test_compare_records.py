"""gumiho.bench.compare_records: one method in two records of the same prompts, paired."""
import json

from gumiho.bench import compare_records as records


def _record(forwards: list[int], tokens: int = 60) -> dict:
    per = [{"question_id": i, "methods": {"gumiho": {"new_tokens": tokens, "target_forwards": f}}}
           for i, f in enumerate(forwards)]
    total_f = sum(forwards)
    return {"methods": {"gumiho": {"tau": tokens * len(forwards) / total_f}}, "per_prompt": per}


def test_sets_and_their_pool(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    # Set a: the new drafter needs fewer forwards on every prompt; set b: the same.
    for folder, a, b in ((old, [40, 42, 38, 41], [30, 30, 31, 29]), (new, [30, 31, 29, 30], [30, 30, 31, 29])):
        (folder / "a.json").write_text(json.dumps(_record(a)))
        (folder / "b.json").write_text(json.dumps(_record(b)))
    table = records.compare(old, new, ["gumiho"], resamples=500)
    rows = {line.split("|")[1].strip(): line.split("|") for line in table.splitlines() if line.startswith("| ")}
    assert float(rows["a"][6].split()[0]) > 0 and float(rows["b"][6].split()[0]) == 0
    # The pool: 480 tokens in 8 prompts; old 161 + 120 forwards, new 120 + 120.
    pool = rows["all sets"]
    assert pool[3].strip() == "8"
    assert float(pool[4]) == round(480 / 281, 3) and float(pool[5]) == round(480 / 240, 3)
    assert "new above old in 1 of 2" in table


def test_same_behaviour_tells_a_changed_record_and_ignores_the_clock(tmp_path):
    """gumiho.bench.same_behaviour: wall times may differ between the two records; a
    token count, a forward count or an acceptance figure may not."""
    import copy
    import json

    from gumiho.bench.same_behaviour import compare_dirs, differences

    rec = {"methods": {"vanilla": {"new_tokens": 40, "target_forwards": 40, "tau": 1.0, "wall_s": 2.0},
                       "gumiho": {"new_tokens": 40, "target_forwards": 20, "tau": 2.0, "wall_s": 1.1,
                                  "acceptance_by_position": [0.6, 0.3]}},
           "per_prompt": [{"question_id": 1, "methods": {"vanilla": {"new_tokens": 40, "target_forwards": 40,
                                                                     "wall_s": 2.0},
                                                         "gumiho": {"new_tokens": 40, "target_forwards": 20,
                                                                    "wall_s": 1.1, "identical": True}}}],
           "lossless": {"checked": 1, "identical": 1}}
    slower = copy.deepcopy(rec)
    slower["methods"]["gumiho"]["wall_s"] = 3.0
    slower["per_prompt"][0]["methods"]["gumiho"]["wall_s"] = 3.0
    assert differences(rec, slower) == []
    changed = copy.deepcopy(rec)
    changed["per_prompt"][0]["methods"]["gumiho"]["target_forwards"] = 21
    changed["methods"]["gumiho"]["acceptance_by_position"] = [0.6, 0.25]
    assert differences(rec, changed) == ["gumiho acceptance_by_position: [0.6, 0.3] before, [0.6, 0.25] after",
                                         "prompt 1 gumiho target_forwards: 20 before, 21 after"]
    for name, r in (("before", rec), ("after", changed)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mt_bench.json").write_text(json.dumps(r))
    lines, bad = compare_dirs(tmp_path / "before", tmp_path / "after")
    assert bad == 1 and lines[0].startswith("mt_bench.json: DIFFERENT")
