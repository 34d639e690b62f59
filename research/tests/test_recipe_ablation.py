"""research/recipe_ablation.py: the arms' kinds and the comparison of kinds' bench commands."""
import json

import pytest
import recipe_ablation as ablation

from gumiho.bench import build_parser, parse_methods


def test_every_arm_names_a_kind_the_trainer_knows():
    # eagle3 drafters have their own trainer path (gumiho.train --kind eagle3 with its own
    # recipe), so no arm here trains one
    assert {ablation.arm_kind(a) for a in ablation.ARMS} == set(ablation.DRAFTER_FLAGS) - {"eagle3"}
    assert ablation.arm_kind("fused") == "gumiho" and ablation.arm_kind("fused-eagle") == "eagle"


@pytest.mark.parametrize("text, words", [
    ("gumiho=fused-eagle", "trains kind eagle, not gumiho"),
    ("medusa=fused", "kind=arm pairs"),
    ("eagle=", "kind=arm pairs"),
    ("eagle=no-such-arm", "unknown arm"),
])
def test_kind_arm_pairs_are_checked(text, words):
    with pytest.raises(SystemExit, match=words):
        ablation.kind_arms(text)


def test_kinds_runs_one_interleaved_bench_per_set(monkeypatch, tmp_path):
    """Each set's command is one the bench accepts, with vanilla and every kind in one
    run and each kind's drafter passed by its own option."""
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


def test_check_runs_each_set_for_both_drafters_and_keeps_finished_records(monkeypatch, tmp_path, capsys):
    """check: per set (the six and the probe sets), one bench run with vanilla for the
    shipped drafter and one for the new arm, then MT-Bench with the paper's tree; a record
    already written is not run again."""
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    kept = tmp_path / "check-serial" / "new" / "qa.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"methods": {"vanilla": {}, "serial": {}}, "per_prompt": [
        {"methods": {"vanilla": {"wall_s": 2.0}, "serial": {"wall_s": 1.0}}}]}))
    ablation.main(["check", "--out", str(tmp_path), "--kind", "serial", "--limit", "4"])
    parsed = [build_parser().parse_args(cmd[3:]) for cmd in commands]
    assert len(parsed) == 2 * (6 + 3) - 1 + 2
    assert all(parse_methods(a.methods) == ["vanilla", "serial"] and a.limit == 4 for a in parsed)
    assert {a.serial_drafter for a in parsed} == {"assets/drafters/smollm2-135m-serial", str(tmp_path / "fused-serial")}
    outs = {a.out for a in parsed}
    assert str(kept) not in outs and str(tmp_path / "check-serial" / "shipped" / "qa.json") in outs
    assert str(tmp_path / "check-serial" / "new" / "translation.json") in outs
    paper = [a for a in parsed if "paper-tree" in a.out]
    assert len(paper) == 2 and all(a.total_tokens == 63 and a.prompts.endswith("mt_bench.jsonl") for a in paper)
    out = capsys.readouterr().out
    assert "speedup over vanilla, new serial drafter" in out and "| Natural Questions | 1 | 2.00x" in out


def test_arms_that_name_no_layers_train_on_the_last_state(monkeypatch, tmp_path):
    """The trainer's default is fused features; an arm that names no layers must still
    train on the last state, as the ablation's tables say."""
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    ablation.main(["train", "--data", "d", "--out", str(tmp_path), "--arms", "paper,fused,eagle"])
    layers = [cmd[cmd.index("--feature-layers") + 1] for cmd in commands]
    assert layers == ["none", "default", "none"] and all(cmd.count("--feature-layers") == 1 for cmd in commands)


def test_continuation_arms_start_from_the_shipped_drafter_one_widened(monkeypatch, tmp_path):
    """widen and continued both continue the shipped Gumiho drafter; only widen reads
    fused layers, and those include the last of the target's 30 (gumiho.train.widen)."""
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    ablation.main(["train", "--data", "d", "--out", str(tmp_path), "--arms", "widen,continued", "--lr", "2e-4"])
    for cmd in commands:
        assert cmd[cmd.index("--init-from") + 1] == "assets/drafters/smollm2-135m-gumiho"
        assert float(cmd[cmd.index("--lr") + 1]) == 2e-4 and cmd.count("--feature-layers") == 1
    assert [cmd[cmd.index("--feature-layers") + 1] for cmd in commands] == ["2,15,30", "none"]


def test_a_second_stage_continues_the_trained_widen_arm_in_the_same_folder(monkeypatch, tmp_path):
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    ablation.main(["train", "--data", "d", "--out", str(tmp_path), "--arms", "widen-2"])
    (cmd,) = commands
    assert cmd[cmd.index("--init-from") + 1] == f"{tmp_path}/widen"
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "widen-2")
    assert cmd[cmd.index("--feature-layers") + 1] == "2,15,30" and cmd.count("--feature-layers") == 1


def test_check_arms_puts_each_arm_against_the_shipped_drafter_and_the_first_against_the_rest(
        monkeypatch, tmp_path, capsys):
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    ablation.main(["check", "--out", str(tmp_path), "--check-arms", "widen,continued", "--limit", "2"])
    parsed = [build_parser().parse_args(cmd[3:]) for cmd in commands]
    assert len(parsed) == 3 * (6 + 3) + 3  # three drafters per set, and on MT-Bench with the paper's tree
    assert {a.drafter for a in parsed} == {"assets/drafters/smollm2-135m-gumiho", str(tmp_path / "widen"),
                                           str(tmp_path / "continued")}
    outs = {a.out for a in parsed}
    assert str(tmp_path / "check-gumiho" / "continued-paper-tree" / "mt_bench.json") in outs
    assert not any("/new" in o for o in outs)
    assert "widen (new) against continued (old):" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="do not train kind serial"):
        ablation.main(["check", "--out", str(tmp_path), "--kind", "serial", "--check-arms", "widen"])


def test_the_lever_arms_train_from_the_shipped_drafter_and_shipped_is_never_trained(monkeypatch, tmp_path):
    commands = []
    monkeypatch.setattr(ablation.subprocess, "run", lambda cmd, **kw: commands.append(cmd))
    ablation.main(["train", "--data", "d", "--out", str(tmp_path),
                   "--arms", "shipped,continued,continued-ttt,continued-lk,continued-both"])
    assert [c[c.index("--out") + 1] for c in commands] == [
        str(tmp_path / a) for a in ("continued", "continued-ttt", "continued-lk", "continued-both")]
    for cmd in commands:
        assert cmd[cmd.index("--init-from") + 1] == ablation.SHIPPED
    ttt = ["--ttt-steps" in c for c in commands]
    lk = ["--lk-weight" in c for c in commands]
    assert ttt == [False, True, False, True] and lk == [False, False, True, True]


def test_the_taus_table_pairs_prompts_across_the_sets(tmp_path):
    def record(name, per_arm):
        rows = [{"question_id": i, "arms": {arm: {"new_tokens": pairs[i][0], "target_forwards": pairs[i][1],
                                                  "identical_to_vanilla": arm != "broken"}
                                            for arm, pairs in per_arm.items()}} for i in range(2)]
        return {"set": name, "per_prompt": rows}
    (tmp_path / "taus").mkdir()
    for name in ("mt_bench", "qa"):
        rec = record(name, {"shipped": [(64, 32), (64, 32)], "continued": [(64, 16), (64, 16)],
                            "broken": [(64, 32), (64, 32)]})
        (tmp_path / "taus" / f"{name}.json").write_text(json.dumps(rec))
    table = "\n".join(ablation.taus_report(tmp_path, ["shipped", "continued", "broken"], "shipped"))
    assert "| continued | 4.000 | 4.000 | +2.000 (+2.000 to +2.000), 4 prompts | 4/4 |" in table
    assert "| shipped | 2.000 | 2.000 |  | 4/4 |" in table and table.endswith("| 0/4 |\n")
