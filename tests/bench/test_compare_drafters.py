"""The paired comparison of drafters: its interval brackets the difference, and says 'not sure'
when the prompts disagree."""
import json

import pytest

from gumiho.bench import compare_drafters as compare


def _record(forwards: dict[str, list[int]], tokens: int = 64) -> dict:
    n = len(next(iter(forwards.values())))
    per_prompt = [{"methods": {m: {"new_tokens": tokens, "target_forwards": f[i]} for m, f in forwards.items()}}
                  for i in range(n)]
    methods = {m: {"tau": tokens * n / sum(f)} for m, f in forwards.items()}
    return {"methods": methods, "per_prompt": per_prompt}


def test_a_clear_winner_has_its_whole_interval_above_zero(tmp_path):
    # Gumiho needs 30 forwards on every prompt, the ablations 40 and 50 (up to a little noise).
    rec = _record({"gumiho": [30 + i % 3 for i in range(40)], "serial": [40 + i % 2 for i in range(40)],
                   "parallel": [50] * 40})
    (tmp_path / "mt_bench.json").write_text(json.dumps(rec))
    d, lo, hi = compare.tau_difference(compare.paired_counts(rec, "gumiho", "serial"), resamples=2000)
    assert lo <= d <= hi
    assert lo > 0
    out = compare.compare([tmp_path / "mt_bench.json"], resamples=2000)
    assert "| MT-Bench | 40 |" in out
    assert "above every other method's on 1 of 1 sets; the whole 95% interval of the difference is above 0 on 1 of 1" in out


def test_prompts_that_disagree_give_an_interval_across_zero(tmp_path):
    # Each drafter wins half the prompts by the same margin: overall no difference to speak of.
    g = [30, 40] * 20
    s = [40, 30] * 20
    rows = compare.paired_counts(_record({"gumiho": g, "serial": s}), "gumiho", "serial")
    d, lo, hi = compare.tau_difference(rows, resamples=2000)
    assert d == pytest.approx(0.0)
    assert lo < 0 < hi


def test_a_record_without_the_methods_is_refused_clearly(tmp_path, capsys):
    path = tmp_path / "gsm8k.json"
    path.write_text(json.dumps(_record({"gumiho": [30] * 5, "parallel": [40] * 5})))
    with pytest.raises(SystemExit, match="no serial in this record"):
        compare.compare([path])
    with pytest.raises(SystemExit):
        compare.main([str(tmp_path / "missing.json")])
    assert "no such file" in capsys.readouterr().err


def test_each_method_counts_its_own_tokens():
    # A sampled run: the two methods wrote different numbers of tokens on the same prompts.
    rec = {"methods": {}, "per_prompt": [
        {"methods": {"gumiho": {"new_tokens": 60, "target_forwards": 30},
                     "serial": {"new_tokens": 40, "target_forwards": 40}}}] * 4}
    d, lo, hi = compare.tau_difference(compare.paired_counts(rec, "gumiho", "serial"), resamples=200)
    assert d == pytest.approx(2.0 - 1.0)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)


def test_speedup_interval_brackets_the_ratio_of_summed_wall_times(tmp_path):
    # Vanilla takes 3 s per prompt; Gumiho 2 s, give or take 0.2 s: a speedup of 1.5x.
    per_prompt = [{"methods": {"vanilla": {"wall_s": 3.0}, "gumiho": {"wall_s": 2.0 + (0.2 if i % 2 else -0.2)},
                               "serial": {"wall_s": 2.5}, "parallel": {"wall_s": 3.0}}} for i in range(40)]
    rec = {"methods": {m: {} for m in ("vanilla", "gumiho", "serial", "parallel")}, "per_prompt": per_prompt}
    r, lo, hi = compare.speedup_interval(compare.speedup_pairs(rec, "gumiho"), resamples=2000)
    assert r == pytest.approx(1.5)
    assert lo < 1.5 < hi and hi - lo < 0.1
    assert compare.speedup_interval(compare.speedup_pairs(rec, "parallel"), resamples=200) == (1.0, 1.0, 1.0)
    (tmp_path / "mt_bench.json").write_text(json.dumps(rec))
    out = compare.speedups([tmp_path / "mt_bench.json"], resamples=500)
    assert "| MT-Bench | 40 | 1.50x (" in out and "1.20x (1.20x to 1.20x)" in out
    assert "throughput" not in out and "(both wrote the same tokens on every prompt)" in out
    # An untimed record (tau only, no vanilla) is refused with what to run.
    (tmp_path / "gsm8k.json").write_text(json.dumps(_record({"gumiho": [30] * 5, "serial": [40] * 5,
                                                              "parallel": [50] * 5})))
    with pytest.raises(SystemExit, match="a speedup needs a timed run"):
        compare.speedups([tmp_path / "gsm8k.json"])


def test_speedup_of_a_record_with_vanilla_and_one_drafter(tmp_path, capsys):
    """A timed run of vanilla and Gumiho alone (as a retrained drafter's check runs it)
    gives Gumiho's speedup; the ablations it did not run are not asked for."""
    per_prompt = [{"methods": {"vanilla": {"wall_s": 3.0}, "gumiho": {"wall_s": 2.0}}} for _ in range(10)]
    path = tmp_path / "mt_bench.json"
    path.write_text(json.dumps({"methods": {"vanilla": {}, "gumiho": {}}, "per_prompt": per_prompt}))
    compare.main(["--speedup", str(path)])
    out = capsys.readouterr().out
    assert "| MT-Bench | 10 | 1.50x (1.50x to 1.50x) |" in out and "serial" not in out


def test_sampled_runs_of_other_lengths_get_a_throughput_speedup(tmp_path, capsys):
    """At temperature > 0 the methods write different numbers of tokens on a prompt;
    the speedup is then tokens/s over tokens/s (not wall over wall), and the output says so."""
    # Vanilla: 64 tokens in 4 s per prompt (16 tok/s). Gumiho: 40 tokens in 2 s (20 tok/s): 1.25x, not 2x.
    per_prompt = [{"methods": {"vanilla": {"new_tokens": 64, "wall_s": 4.0},
                               "gumiho": {"new_tokens": 40, "wall_s": 2.0},
                               "serial": {"new_tokens": 64, "wall_s": 3.2}}} for _ in range(20)]
    rec = {"methods": {m: {} for m in ("vanilla", "gumiho", "serial")}, "per_prompt": per_prompt}
    assert compare.speedup_interval(compare.speedup_pairs(rec, "gumiho"), resamples=200) == pytest.approx(
        (1.25, 1.25, 1.25))
    path = tmp_path / "mt_bench.json"
    path.write_text(json.dumps(rec))
    compare.main(["--speedup", str(path), "--against", "serial", "--resamples", "200"])
    out = capsys.readouterr().out
    assert "| MT-Bench | 20 | 1.25x (1.25x to 1.25x), throughput | 1.25x (1.25x to 1.25x) |" in out
    assert "marked throughput: method tokens/s / vanilla tokens/s" in out
