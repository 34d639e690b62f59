"""The model cards are written from the files a drafter folder holds
(python -m gumiho.train.model_card): a card must say each stage's own precision and how its
run shared the cores, and name every prompt source it was trained on."""
import json
import shutil
from pathlib import Path

import pytest

from gumiho.train import model_card
from helpers import ROOT

SHIPPED = ("smollm2-135m-gumiho", "smollm2-135m-serial", "smollm2-135m-parallel")


def _summary(precision: str, steps: int, wall: float) -> dict:
    return {
        "kind": "gumiho", "steps": steps, "total_steps": steps, "stopped_early": False, "wall_s": wall,
        "mixed_precision": precision, "train_tokens_per_epoch": 1000 * steps, "parameters": 19_000_000,
        "target_parameters": 134_000_000, "draft_vocab": 8191, "draft_vocab_coverage": 0.9,
        "held_out": {"top1_by_position": [0.5, 0.4], "top1_vocabulary": "full"},
        "config": {"data": "data/x", "epochs": 1.0, "batch_tokens": 2048, "lr": 2e-4, "warmup_steps": 20},
        "loss_config": {"ce_weight": 0.1, "position_decay": 0.8, "noise": 0.2},
    }


def _folder(tmp_path: Path, stages: list[dict], summaries: dict) -> Path:
    folder = tmp_path / "smollm2-135m-gumiho"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"kind": "gumiho"}))
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    for name, s in summaries.items():
        (folder / name).write_text(json.dumps(s))
    (folder / "training_stages.json").write_text(json.dumps(stages))
    return folder


def _bench(tmp_path: Path) -> Path:
    method = {"tau": 1.8, "acceptance_by_position": [0.5] * 7, "tokens_per_s": 30.0, "speedup_vs_vanilla": 1.1}
    rec = {"prompts": 10, "prompts_file": "mt_bench.jsonl", "max_new_tokens": 64, "temperature": 0.0,
           "device": "cpu", "methods": {"gumiho": method, "vanilla": {"tokens_per_s": 27.0}}}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rec))
    return path


def test_card_gives_each_stage_its_precision_wall_note_and_sources(tmp_path):
    stages = [{"summary": "s1.json", "data_note": "(template prompts)"},
              {"summary": "s2.json", "data_note": "(questions of the InstructLab taxonomy)", "wall_s": 600.0,
               "wall_note": "alone on 2 threads",
               "licence_note": "and to the questions of https://github.com/instructlab/taxonomy (Apache-2.0)"}]
    folder = _folder(tmp_path, stages, {"s1.json": _summary("bf16", 10, 120.0),
                                        "s2.json": _summary("no", 20, 300.0)})
    assert model_card.main([str(folder), "--bench", str(_bench(tmp_path)), "--method", "gumiho"]) == 0
    card = (folder / "README.md").read_text()
    assert "| precision | stage 1: bf16 autocast, float32 weights and optimizer; stage 2: float32 |" in card
    # stage 2's wall time is the one the listing gives (a resumed run), with its note
    assert "12.0 min on 2 CPU cores (stage 1 2.0, stage 2 10.0 alone on 2 threads)" in card
    assert "instructlab/taxonomy" in card
    assert "| 1.80 |" in card


def test_card_of_one_precision_and_no_taxonomy_says_so_once(tmp_path):
    stages = [{"summary": "s1.json", "data_note": "(template prompts)"},
              {"summary": "s2.json", "data_note": "(more template prompts)"}]
    folder = _folder(tmp_path, stages, {"s1.json": _summary("bf16", 10, 120.0),
                                        "s2.json": _summary("bf16", 20, 300.0)})
    assert model_card.main([str(folder), "--bench", str(_bench(tmp_path)), "--method", "gumiho"]) == 0
    card = (folder / "README.md").read_text()
    assert "| precision | bf16 autocast, float32 weights and optimizer |" in card
    assert "taxonomy" not in card


def test_card_budget_takes_a_stage_token_count_where_given(tmp_path):
    """A stage whose run trained on fewer tokens than epochs x tokens per epoch (the
    listing's ``tokens``) is counted by what it trained on, in the stage and the total."""
    stages = [{"summary": "s1.json", "data_note": "(template prompts)"},
              {"summary": "s2.json", "data_note": "(more template prompts)", "tokens": 19_500}]
    folder = _folder(tmp_path, stages, {"s1.json": _summary("bf16", 10, 120.0),
                                        "s2.json": _summary("bf16", 20, 300.0)})
    assert model_card.main([str(folder), "--bench", str(_bench(tmp_path)), "--method", "gumiho"]) == 0
    card = (folder / "README.md").read_text()
    assert "| token budget | 29,500 tokens: stage 1 10,000 (1 epoch of 10,000), stage 2 19,500 (1 epoch of 20,000) |" in card


def test_card_names_a_cost_aware_tree_by_its_cap_and_mean():
    fixed = dict(total_tokens=5, depth=3, top_k=4, cost_aware=False)
    assert model_card.tree_words({"tree": fixed}) == ", draft tree of 5 nodes, top-k 4"
    assert model_card.tree_words({"tree": None}) == ""
    aware = {"tree": dict(fixed, total_tokens=11, cost_aware=True), "mean_drafted": 5.17}
    assert model_card.tree_words(aware) == (", draft tree sized each step by the verify cost measured on this "
                                            "machine, at most 11 drafted nodes (5.2 per verify step), top-k 4")


def test_records_kept_apart_from_the_weights_are_found_or_named(tmp_path, monkeypatch, capsys):
    """A shipped drafter's folder holds only what the app ships; its records are looked
    for in benchmarks/training/<folder name>, or wherever --records says."""
    stages = [{"summary": "s1.json", "data_note": "(template prompts)"}]
    records = _folder(tmp_path, stages, {"s1.json": _summary("bf16", 10, 120.0)})
    weights = tmp_path / "assets" / records.name
    weights.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.move(records / name, weights / name)
    bench = str(_bench(tmp_path))
    assert model_card.main([str(weights), "--bench", bench, "--method", "gumiho", "--records", str(records)]) == 0
    named = (weights / "README.md").read_text()
    monkeypatch.chdir(tmp_path)
    shutil.copytree(records, tmp_path / "benchmarks" / "training" / records.name)
    assert model_card.main([str(weights), "--bench", bench, "--method", "gumiho"]) == 0
    assert (weights / "README.md").read_text() == named
    empty = tmp_path / "elsewhere" / "smollm2-135m-serial"
    empty.mkdir(parents=True)
    assert model_card.main([str(empty), "--bench", bench, "--method", "serial"]) == 2
    assert "name their folder with --records" in capsys.readouterr().err


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_cards_are_what_their_records_give(monkeypatch, name):
    """Each shipped card, written again from benchmarks/training/<name> and the
    benchmark record, is the card that ships: every figure on it comes from the records."""
    monkeypatch.chdir(ROOT)
    folder = Path("assets") / "drafters" / name
    text = model_card.card_text(folder, model_card.records_folder(folder),
                                json.loads(Path("benchmarks/results/mt_bench.json").read_text()),
                                name.rsplit("-", 1)[1])
    assert text == (folder / "README.md").read_text()


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_drafter_folder_holds_only_what_the_app_ships(name):
    assert sorted(p.name for p in (ROOT / "assets" / "drafters" / name).iterdir()) == [
        "README.md", "config.json", "model.safetensors"]
    assert (ROOT / "benchmarks" / "training" / name / "training_stages.json").is_file()
