"""What a web visitor may ask the server to load.

Run locally, the advanced box takes any hub id or folder: the visitor is the
operator. On a public deployment (a Hugging Face Space, where SPACE_ID is set, or
with GUMIHO_PUBLIC=1) anyone can type there, so the box takes only

* the registry's names (gumiho.registry: the shipped pairs, the paper's drafters and
  their targets) and the default model,
* the hub ids or folders the operator lists in GUMIHO_ALLOWED_MODELS (comma-separated),
* folders and files on the server only with GUMIHO_ALLOW_LOCAL_PATHS=1.

A refusal is decided from the text alone, before anything touches the filesystem or
the network, so it tells a visitor nothing about which paths exist on the server.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from gumiho import GumihoError, registry
from gumiho.loading import DEFAULT_TARGET, DEFAULT_TARGET_LABEL, looks_like_path

PUBLIC_ENV = "GUMIHO_PUBLIC"
ALLOWED_ENV = "GUMIHO_ALLOWED_MODELS"
LOCAL_PATHS_ENV = "GUMIHO_ALLOW_LOCAL_PATHS"


def _switch(value: Optional[str]) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def is_default(name: str) -> bool:
    return name.strip().lower() in ("", DEFAULT_TARGET, DEFAULT_TARGET_LABEL.lower(), "default")


@dataclass(frozen=True)
class Access:
    public: bool = False
    allowed: tuple = ()  # the operator's extra hub ids or folders
    local_paths: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Access":
        """What ``env`` (an entry point's environment, app.core.settings) lets visitors load."""
        public = bool((env.get("SPACE_ID") or "").strip()) or _switch(env.get(PUBLIC_ENV))
        allowed = tuple(x.strip() for x in (env.get(ALLOWED_ENV) or "").split(",") if x.strip())
        return cls(public=public, allowed=allowed, local_paths=not public or _switch(env.get(LOCAL_PATHS_ENV)))

    def listed(self) -> list[str]:
        """The names the box takes in public mode, for the page and the messages."""
        return registry.names() + [a for a in self.allowed if registry.get(a) is None]

    def _is_listed(self, name: str, drafter: bool) -> bool:
        key = name.strip().rstrip("/").lower()
        if any(key == a.rstrip("/").lower() for a in self.allowed):
            return True
        pair = registry.get(name)
        if pair is not None:
            return not drafter or pair.official  # a shipped pair names a kind, not a drafter to load
        # The paper's targets and drafters, by their own hub ids.
        pairs = [p for p in registry.PAIRS.values() if p.official]
        return any(key == (p.drafter if drafter else p.target).lower() for p in pairs)

    def check_target(self, name: str) -> None:
        if not self.public or is_default(name) or self._is_listed(name, drafter=False):
            return
        if looks_like_path(name):
            if self.local_paths:
                return
            raise GumihoError(f"This public demo does not read folders or files on its server. Pick one of the "
                              f"models it lists ({', '.join(self.listed())}), or leave the box empty for the "
                              f"default.")
        raise GumihoError(f"This public demo loads only the models it lists: {', '.join(self.listed())}. "
                          f"{name[:80]!r} is not one of them; run the app on your own machine (python app.py) to "
                          f"load any model.")

    def check_drafter(self, path: str) -> None:
        if not self.public or not path.strip() or self._is_listed(path, drafter=True):
            return
        if self.local_paths and (looks_like_path(path) or "/" not in path):
            return
        raise GumihoError("This public demo does not read drafter folders or files on its server, and loads only "
                          "the drafters its models come with: leave the drafter box empty (or pick a listed "
                          "model, such as amd/Gumiho-vicuna-7b, which brings its own).")
