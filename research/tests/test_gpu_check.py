"""research/gpu_check.py on a CPU (--device cpu): the app's race and walkthrough with
the paper's tree on the real default model, every text checked against vanilla, and
the record it writes (the synchronisation count is CUDA's only: None here)."""
import json

import gpu_check


def test_the_gpu_check_runs_the_apps_path_and_writes_its_record(tmp_path):
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--device", "cpu", "--max-new-tokens", "12", "--prompts", "1", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["all_identical"] is True
    race = record["races"][0]
    assert race["identical"] and race["tokens"] == 12 and race["tree_nodes"] == 63
    assert record["walks"][0]["verify_steps"] > 0 and "mlp" in record["walks"][0]["heads"]
    for method in ("vanilla", "gumiho"):
        assert record["syncs"][method]["target_forwards"] > 0 and record["syncs"][method]["per_forward"] is None
    assert record["syncs"]["gumiho"]["target_forwards"] < record["syncs"]["vanilla"]["target_forwards"]
