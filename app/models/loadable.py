"""Whether a model a visitor typed can load here, told in the app's words before the
loaders' own (a hub id not downloaded while the Hub is out of reach, a drafter folder
that is not a drafter's), and advising only what this deployment allows."""
from __future__ import annotations

import logging
from typing import Optional

from gumiho import Drafter, GumihoError, Target
from gumiho.loading import hub_cached, hub_unavailable_reason, is_local_source, load_drafter, local_model_folder

from ..core.access import Access

log = logging.getLogger("gumiho.app")


def _instead(access: Optional[Access], drafter: bool) -> str:
    """What to do instead, as far as this deployment allows it (a public one may read
    no folders: it must not advise one)."""
    folders = access is None or access.local_paths
    if drafter:
        return ("Give a drafter folder instead, or leave the drafter box empty." if folders else
                "Leave the drafter box empty: the models this demo lists bring their own drafters.")
    return ("Give a local folder instead, or leave the box empty for the default model." if folders else
            "Leave the box empty for the default model.")


def check_loadable(name: str, access: Optional[Access] = None) -> None:
    """Fail fast, with a clear message, for a model that cannot load here: a
    missing folder, or a hub id that is not downloaded while the Hub is out of
    reach (transformers would otherwise retry for about a minute)."""
    if local_model_folder(name) is not None:
        return
    if hub_cached(name, ("config.json",)):
        return  # downloaded before: loads offline
    reason = hub_unavailable_reason()
    if reason:
        raise GumihoError(f"{name!r} is not downloaded and {reason}, so it cannot load. "
                          f"{_instead(access, drafter=False)}")


DRAFTER_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")  # a drafter repo holds one of these


def check_drafter_loadable(path: str, access: Optional[Access] = None) -> None:
    """The same for a drafter given by hub id, in the app's words (the hub library's
    own would follow, naming files and a local-folder fallback)."""
    if is_local_source(path) or "/" not in path:
        return  # a folder: the loader's own message names it as typed
    if hub_cached(path, DRAFTER_FILES):
        return
    reason = hub_unavailable_reason()
    if reason:
        raise GumihoError(f"The drafter {path!r} is not downloaded and {reason}, so it cannot load. "
                          f"{_instead(access, drafter=True)}")


def load_drafter_as_typed(typed: str, folder: str, target: Target) -> Drafter:
    """``load_drafter`` whose messages name the drafter as the user typed it (not the
    server's expanded path: '~/x' must not show this machine's home), and whose
    failures of a malformed folder are the app's words, not Python's."""
    try:
        return load_drafter(folder, target)
    except GumihoError as e:
        raise GumihoError(str(e).replace(folder, typed)) from None
    except (TypeError, KeyError, ValueError, AttributeError, OSError) as e:
        log.info("drafter %r could not be read: %s: %s", typed, type(e).__name__, e)
        raise GumihoError(f"The drafter at {typed!r} could not be read: its config.json or weights are not a "
                          f"drafter's (a field is missing or malformed). A drafter folder is written by "
                          f"`python -m gumiho.train`.") from None


__all__ = ["check_loadable", "check_drafter_loadable", "load_drafter_as_typed", "DRAFTER_FILES"]
