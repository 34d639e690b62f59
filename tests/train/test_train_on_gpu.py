"""python -m gumiho.train.gpu without a GPU: the trainer commands it builds, and its refusals
of a bad --init-from before anything starts."""
import argparse
import shutil

import pytest

from gumiho.train import gpu
from helpers import ROOT


def _args(**over):
    base = dict(batch_tokens=16384, lr=3e-4, warmup_steps=20, max_epochs=1.0, eval_fraction=0.02,
                precision="auto", seed=0, init_from=None, train_options="")
    return argparse.Namespace(**{**base, **over})


def test_each_kind_continues_its_own_saved_drafter(tmp_path):
    cmd = gpu.train_cmd(_args(init_from="assets/drafters/smollm2-135m-{kind}"), "serial", ["d0", "d1"], tmp_path,
                        ["--max-steps", "240"])
    assert cmd[cmd.index("--init-from") + 1] == "assets/drafters/smollm2-135m-serial"
    assert cmd[cmd.index("--data") + 1] == "d0,d1"
    assert cmd[cmd.index("--kind") + 1] == "serial"
    assert cmd[-2:] == ["--max-steps", "240"]
    assert "--init-from" not in gpu.train_cmd(_args(), "gumiho", ["d0"], tmp_path, [])


def test_the_recipe_options_reach_every_trainer(tmp_path):
    cmd = gpu.train_cmd(_args(train_options="--feature-layers default --reg-weight 0 --ce-weight 1"), "gumiho",
                        ["d0"], tmp_path, ["--max-steps", "9"])
    assert cmd[-8:] == ["--feature-layers", "default", "--reg-weight", "0", "--ce-weight", "1", "--max-steps", "9"]
    # and gumiho.train accepts them
    from gumiho.train.__main__ import build_parser
    parsed = build_parser().parse_args(cmd[2:])
    assert parsed.feature_layers == "default" and parsed.reg_weight == 0 and parsed.ce_weight == 1


@pytest.mark.parametrize("template, message", [
    ("assets/drafters/smollm2-135m-gumiho", "needs {kind}"),
    ("nowhere/{kind}", "no saved drafter for gumiho, serial, parallel"),
])
def test_a_bad_init_from_is_refused_before_anything_runs(tmp_path, capsys, template, message):
    with pytest.raises(SystemExit) as e:
        gpu.main(["--prompts", "p.jsonl", "--work", str(tmp_path / "w"), "--minutes", "1", "--init-from", template])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_a_drafter_of_another_kind_is_refused(tmp_path, capsys):
    shutil.copytree(ROOT / "assets" / "drafters" / "smollm2-135m-serial", tmp_path / "d-gumiho")
    with pytest.raises(SystemExit):
        gpu.main(["--prompts", "p.jsonl", "--work", str(tmp_path / "w"), "--minutes", "1", "--kinds", "gumiho",
                  "--init-from", str(tmp_path / "d-{kind}")])
    assert "holds a serial drafter, not a gumiho one" in capsys.readouterr().err
