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
