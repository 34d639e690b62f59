"""scripts/recipe_ablation.py: the arms' kinds and the comparison of kinds' bench commands."""
import pytest

from gumiho.bench import build_parser, parse_methods
from helpers import load_script


def test_every_arm_names_a_kind_the_trainer_knows():
    ablation = load_script("recipe_ablation")
    assert {ablation.arm_kind(a) for a in ablation.ARMS} == set(ablation.DRAFTER_FLAGS)
    assert ablation.arm_kind("fused") == "gumiho" and ablation.arm_kind("fused-eagle") == "eagle"


@pytest.mark.parametrize("text, words", [
    ("gumiho=fused-eagle", "trains kind eagle, not gumiho"),
    ("medusa=fused", "kind=arm pairs"),
    ("eagle=", "kind=arm pairs"),
    ("eagle=no-such-arm", "unknown arm"),
])
def test_kind_arm_pairs_are_checked(text, words):
    ablation = load_script("recipe_ablation")
    with pytest.raises(SystemExit, match=words):
        ablation.kind_arms(text)


def test_kinds_runs_one_interleaved_bench_per_set(monkeypatch, tmp_path):
    """Each set's command is one the bench accepts, with vanilla and every kind in one
    run and each kind's drafter passed by its own option."""
    ablation = load_script("recipe_ablation")
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    ablation.main(["kinds", "--out", str(tmp_path), "--sets", "mt_bench,qa", "--limit", "3"])
    assert len(commands) == 2
    for cmd, name in zip(commands, ("mt_bench", "qa")):
        args = build_parser().parse_args(cmd[3:])  # past python -m gumiho.bench
        assert parse_methods(args.methods) == ["vanilla", "gumiho", "serial", "parallel", "eagle"]
        assert args.drafter == str(tmp_path / "fused")
        assert args.serial_drafter == str(tmp_path / "fused-serial")
        assert args.parallel_drafter == str(tmp_path / "fused-parallel")
        assert args.eagle_drafter == str(tmp_path / "fused-eagle")
        assert args.prompts == f"benchmarks/prompts/{name}.jsonl" and args.limit == 3
        assert args.out == str(tmp_path / "kinds" / f"{name}.json")
