"""A source folder's files as one reads them: a git repository at its HEAD commit
(bare, or a clone with its work tree), or a plain folder on disk; with the commit
and whether the work tree was changed, for the record of what was read."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import GumihoError


@dataclass
class SourceTree:
    """The files of one source folder: a git repository's HEAD commit, or what is on disk."""
    path: Path
    read_from: str                 # "git" (bare repository), "work tree" or "folder"
    commit: str | None = None      # HEAD of the repository, where there is one
    modified: bool = False         # a work tree with changes against its commit
    _names: list[str] | None = field(default=None, repr=False)

    def files(self) -> list[str]:
        if self._names is None:
            if self.read_from == "git":
                out = _git(self.path, "ls-tree", "-r", "-z", "--name-only", self.commit)
                self._names = sorted(n for n in out.split("\0") if n)
            else:
                names = []
                for top, dirs, files in os.walk(self.path):
                    if ".git" in dirs:  # a clone's own git folder is no source file
                        dirs.remove(".git")
                    rel = Path(top).relative_to(self.path)
                    names += [(rel / f).as_posix() for f in files]
                self._names = sorted(names)
        return self._names

    def read(self, name: str) -> str:
        if self.read_from == "git":
            return _git(self.path, "cat-file", "blob", f"{self.commit}:{name}")
        return (self.path / name).read_text(encoding="utf-8", errors="replace")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, encoding="utf-8", errors="replace").stdout


def open_tree(path: str | Path, hint: str) -> SourceTree:
    """A source folder: its own git repository (bare or with a work tree) or a plain folder."""
    path = Path(path)
    if not path.is_dir():
        raise GumihoError(f"{path} is not a folder; pass {hint}")
    here = path.resolve()
    try:
        # A bare mirror (or a clone's .git folder) is read at its HEAD commit.
        bare = _git(path, "rev-parse", "--is-inside-git-dir").strip() == "true"
        where = "--absolute-git-dir" if bare else "--show-toplevel"
        own = Path(_git(path, "rev-parse", where).strip()).resolve() == here
    except (OSError, subprocess.CalledProcessError):
        # No git, or not a repository: the files on disk are the source.
        return SourceTree(path, "folder")
    if not own:  # a folder inside some other repository
        return SourceTree(path, "folder")
    try:
        commit = _git(path, "rev-parse", "--verify", "HEAD^{commit}").strip()
    except subprocess.CalledProcessError:
        if bare:
            raise GumihoError(f"{path} is a git repository without a commit; pass {hint}") from None
        return SourceTree(path, "folder")
    if bare:
        return SourceTree(path, "git", commit)
    modified = bool(_git(path, "status", "--porcelain", "--untracked-files=no").strip())
    return SourceTree(path, "work tree", commit, modified)
