"""The llama.cpp server rows of the engine benchmark: the paired ratio of this engine's
vanilla to the server's fastest row (a bootstrap over prompts), and the report section
that BENCHMARKS.md prints from the record."""
import json

import pytest

from gumiho.bench.engines import INTERLEAVED, llamacpp_server_target
from gumiho.bench.llamacpp_served import ENGINE, paired_ratio
from gumiho.bench.report_sections import llamacpp_server_section


def row(engine, method, per_prompt, **extra):
    n, s = sum(p[0] for p in per_prompt), sum(p[1] for p in per_prompt)
    return {"engine": engine, "method": method, "batch": 1, "new_tokens": n, "seconds": s,
            "tokens_per_s": n / s, "per_prompt": per_prompt, "ratio_to_own_vanilla": 1.0, **extra}


def test_the_paired_ratio_and_its_interval():
    a = row(INTERLEAVED, "vanilla", [[64, 1.0], [64, 1.1], [32, 0.5], [64, 0.9]])
    b = row(ENGINE, "vanilla", [[64, 0.9], [64, 1.0], [32, 0.45], [64, 0.8]])
    got = paired_ratio(a, b)
    assert got["value"] == pytest.approx((160 / 3.5) / (160 / 3.15), abs=1e-3)
    assert got["low"] <= got["value"] <= got["high"] and got["high"] < 1 and got["prompts"] == 4
    with pytest.raises(Exception, match="same prompts"):
        paired_ratio(a, row(ENGINE, "vanilla", [[64, 1.0]]))


def test_the_target_takes_the_servers_fastest_row_and_the_section_says_it(tmp_path):
    rows = [row(INTERLEAVED, "vanilla", [[64, 1.0], [64, 1.0]]),
            row(ENGINE, "vanilla", [[64, 0.9], [64, 0.9]], identical_to_vanilla=True),
            row(ENGINE, "n-gram", [[64, 0.8], [64, 0.8]], identical_to_vanilla=True, accepted_share=0.27),
            row(ENGINE, "eagle3", [[64, 2.0], [64, 2.0]], identical_to_vanilla=True, accepted_share=0.08)]
    target = llamacpp_server_target(rows)["runtime_vanilla_over_llamacpp_server_best"]
    assert target["theirs"] == "n-gram" and target["value"] == pytest.approx(0.8) and not target["met"]
    record = {"prompts": 2, "prompts_file": "x.jsonl", "max_new_tokens": 64, "threads": 2, "cpu": "a CPU",
              "settings": {"llama.cpp server": "llama-server"}, "rows": rows,
              "targets": llamacpp_server_target(rows)}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    text = "\n".join(llamacpp_server_section(path))
    assert "| llama.cpp server (llama-server) | n-gram | 1 | 80.0 |" in text
    assert "0.27 of drafted tokens accepted" in text
    assert "identical to its own vanilla's: vanilla: yes, n-gram: yes, eagle3: yes" in text
    assert "over llama-server's fastest row (n-gram), timed side by side: 0.800x" in text and "not met" in text
