"""Loading targets and drafters: what the library, the bench and the app call to get
a model, with clear errors when one cannot load or does not fit the other.

    assets    the embedded default target and the shipped drafters
    sources   a local folder or a hub id, and whether a hub id can load here
    device    the device, the target's dtype, a drafter's dtype beside it
    runtime   which runtime a target's forwards run on (gumiho.runtimes)
    weights   a target's config and weights checked before allocating it
    target    load_target, prepare_target
    drafter   load_drafter (every layout), random_drafter
"""
from .assets import (
                      ASSETS_DIR,
                      DEFAULT_TARGET,
                      DEFAULT_TARGET_LABEL,
                      SHIPPED_DRAFTERS,
                      default_target_files,
                      shipped_drafter_path,
)
from .device import DRAFTER_DTYPES, drafter_dtype, drafter_int4, pick_device, pick_dtype
from .drafter import check_drafter_source, load_drafter, random_drafter
from .runtime import RUNTIMES, llamacpp_available, pick_runtime, resolve_runtime
from .sources import (
                      hub_cached,
                      hub_unavailable_reason,
                      is_local_source,
                      is_model_folder,
                      local_model_folder,
                      looks_like_path,
                      no_model_folder,
)
from .targets import load_target, prepare_target

__all__ = ["ASSETS_DIR", "DEFAULT_TARGET", "DEFAULT_TARGET_LABEL", "DRAFTER_DTYPES", "RUNTIMES", "SHIPPED_DRAFTERS",
           "check_drafter_source", "default_target_files", "drafter_dtype", "drafter_int4", "hub_cached", "hub_unavailable_reason", "is_local_source",
           "is_model_folder", "llamacpp_available", "load_drafter", "load_target", "local_model_folder",
           "looks_like_path", "no_model_folder", "pick_device", "pick_dtype", "pick_runtime", "prepare_target",
           "random_drafter", "resolve_runtime", "shipped_drafter_path"]
