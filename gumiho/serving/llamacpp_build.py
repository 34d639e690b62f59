"""llama.cpp's own server (``llama-server``), built once from the pinned source and
reused afterwards.

The source is the one this project already runs: llama-cpp-python 0.3.36's source
package (requirements.txt pins the binding; its ``vendor/llama.cpp`` is the llama.cpp
the 4-bit runtime links), fetched from PyPI by pip and checked against its SHA-256.
Only ``vendor/llama.cpp`` is unpacked, and only the ``llama-server`` target is built:

    cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \\
          -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    cmake --build build --target llama-server -j N

(about 8 minutes on two cores). It lives in the project's cache folder, never in a
clone (gumiho.files.cache_root: ``~/.cache/gumiho/llama.cpp-<first 12 hex digits of the
source's SHA-256>``), so every clone on a machine shares one build, and another pinned
source is another folder. A ready file, written last, marks a finished build; a folder
without it is built again. ``GUMIHO_LLAMA_SERVER`` names a llama-server binary to use
instead (one built from the same source: the EAGLE-3 file format is that source's); the
commands read it, with the cache folder, at their start (gumiho.files.paths), and this
module is handed the result (``LibraryPaths.llama_server``).

What is checked before anything is fetched or compiled: cmake and a C++ compiler on
the PATH.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from ..errors import GumihoError
from ..files import LibraryPaths, cache_root, configured, file_sha256
from ..runtimes.native_probe import cpu_signature
from .lifecycle import build_lock

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"
# The SHA-256 of PyPI's llama_cpp_python-0.3.36.tar.gz: the build is keyed by it, and a
# download that does not match it is refused.
SOURCE_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SOURCE_FILE = f"llama_cpp_python-{SOURCE_VERSION}.tar.gz"
VENDOR = f"llama_cpp_python-{SOURCE_VERSION}/vendor/llama.cpp/"
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
READY_FILE = "gumiho-ready.json"
ENV_VARIABLE = "GUMIHO_LLAMA_SERVER"  # named in its messages; the commands read it (gumiho.files.paths)


class ServerBuildError(GumihoError):
    """llama-server could not be fetched or built here."""


def build_dir(paths: Optional[LibraryPaths] = None) -> Path:
    """This project's build, in the cache folder of ``paths`` (else of the configured paths)."""
    return cache_root(paths) / f"llama.cpp-{SOURCE_SHA256[:12]}"


def server_binary(folder: Optional[Path] = None) -> Path:
    return (folder or build_dir()) / "build" / "bin" / "llama-server"


def ready(folder: Optional[Path] = None) -> Optional[dict]:
    """The finished build's record, or None."""
    folder = folder or build_dir()
    try:
        record = json.loads((folder / READY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("source_sha256") == SOURCE_SHA256 and server_binary(folder).is_file() else None


def check_tools() -> None:
    """cmake and a C++ compiler, before anything is fetched."""
    missing = [tool for tool, names in (("cmake", ("cmake",)), ("a C++ compiler", ("c++", "g++", "clang++")))
               if not any(shutil.which(n) for n in names)]
    if missing:
        raise ServerBuildError(f"llama-server is built here from llama.cpp's source, which needs {' and '.join(missing)} "
                               f"on the PATH (Debian: apt-get install cmake g++); or set {ENV_VARIABLE} to a "
                               f"llama-server built from llama-cpp-python {SOURCE_VERSION}'s vendor/llama.cpp.")


def ensure_server(log: Callable[[str], None] = lambda line: None, paths: Optional[LibraryPaths] = None) -> Path:
    """The llama-server binary: the one ``paths`` (else the configured paths) name
    (``GUMIHO_LLAMA_SERVER``), else the cached build, built first when there is none
    (once per machine; one builder at a time)."""
    paths = paths or configured()
    if paths.llama_server is not None:
        path = paths.llama_server
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerBuildError(f"{ENV_VARIABLE} names {str(path)!r}, which is not an executable file.")
        return path
    folder = build_dir(paths)
    if ready(folder):
        return server_binary(folder)
    check_tools()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(folder):
        if not ready(folder):  # another process may have built it while this one waited
            _build(folder, log)
    return server_binary(folder)


def source_dir(folder: Optional[Path] = None) -> Path:
    """llama.cpp's source as unpacked for the build (its converter, its docs)."""
    return (folder or build_dir()) / "src"


def _log_path(folder: Path) -> Path:
    return folder.parent / f"{folder.name}.gumiho-build.log"  # beside it: a failed build is removed, its log stays


def _step(folder: Path, command: list, what: str, cwd: Optional[Path] = None) -> None:
    with open(_log_path(folder), "a") as out:
        out.write(f"\n$ {' '.join(map(str, command))}\n")
        out.flush()
        code = subprocess.run([str(c) for c in command], stdout=out, stderr=subprocess.STDOUT, cwd=cwd).returncode
    if code != 0:
        try:
            tail = _log_path(folder).read_text(errors="replace")[-1500:]
        except OSError:
            tail = ""
        raise ServerBuildError(f"Could not {what} (exit {code}); see {_log_path(folder)}:\n{tail}")


def fetch_source(folder: Path, into: Path) -> Path:
    """The pinned source package, downloaded by pip into ``into`` and checked (the
    build of ``folder`` logs it)."""
    _step(folder, [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
                   "--no-binary", ":all:", "-d", into, f"{SOURCE_PACKAGE}=={SOURCE_VERSION}"],
          f"download {SOURCE_PACKAGE} {SOURCE_VERSION}'s source from the package registry")
    archive = into / SOURCE_FILE
    if not archive.is_file():
        raise ServerBuildError(f"pip did not leave {SOURCE_FILE} where it was asked to.")
    digest = file_sha256(archive)
    if digest != SOURCE_SHA256:
        raise ServerBuildError(f"{SOURCE_FILE} has SHA-256 {digest[:16]}..., not the pinned {SOURCE_SHA256[:16]}...: "
                               f"refusing to build from a source that is not the pinned one.")
    return archive


def unpack_llama_cpp(archive: Path, dest: Path) -> None:
    """Only vendor/llama.cpp, its paths made relative to ``dest`` (and checked to stay in it)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            if not member.name.startswith(VENDOR) or member.name == VENDOR.rstrip("/"):
                continue
            member.name = member.name[len(VENDOR):]
            members.append(member)
        tar.extractall(dest, members=members, filter="data")


# The instruction-set flags that decide which of ggml's CPU kernels a native build compiles in.
ISA_FLAGS = ("avx", "avx2", "f16c", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "asimd", "sve")


def built_for(folder: Path) -> dict:
    """What a build was compiled for: ggml's native detection (GGML_NATIVE, on by default:
    every instruction set the building CPU advertises) and that CPU, by model and flags.
    A build copied to a CPU without them dies by SIGILL; its trial names that
    (gumiho.serving.llamacpp_trial)."""
    options = {}
    try:
        for line in (folder / "build" / "CMakeCache.txt").read_text(errors="replace").splitlines():
            name = line.split(":", 1)[0]
            if name in ("GGML_NATIVE", "GGML_CPU_ALL_VARIANTS", "GGML_AVX512", "GGML_AMX_INT8"):
                options[name] = line.rsplit("=", 1)[-1]
    except OSError:
        pass
    cpu = cpu_signature()
    return {"cmake": options, "cpu": cpu["model"], "machine": cpu["machine"],
            "isa_flags": [f for f in cpu["flags"] if f in ISA_FLAGS]}


def _build(folder: Path, log: Callable[[str], None]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    _log_path(folder).write_text("")
    started = time.perf_counter()
    log(f"building llama-server from {SOURCE_PACKAGE} {SOURCE_VERSION}'s llama.cpp into {folder} "
        f"(once per machine; about 8 minutes on two cores) ...")
    try:
        with tempfile.TemporaryDirectory(dir=folder.parent) as download:
            archive = fetch_source(folder, Path(download))
            unpack_llama_cpp(archive, source_dir(folder))
        jobs = str(max(1, os.cpu_count() or 1))
        _step(folder, ["cmake", "-S", source_dir(folder), "-B", folder / "build", *CMAKE_FLAGS],
              "configure llama.cpp's build")
        _step(folder, ["cmake", "--build", folder / "build", "--target", "llama-server", "-j", jobs],
              "compile llama-server")
        version = subprocess.run([str(server_binary(folder)), "--version"], capture_output=True, text=True,
                                 timeout=60)
        if version.returncode != 0:
            raise ServerBuildError(f"The llama-server just built does not run:\n{version.stderr[-1000:]}")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    seconds = round(time.perf_counter() - started, 1)
    described = (version.stdout + version.stderr).strip().splitlines()
    record = {"source": f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "source_sha256": SOURCE_SHA256,
              "cmake_flags": list(CMAKE_FLAGS), "build_seconds": seconds, "version": described[:2],
              "built_for": built_for(folder)}
    (folder / READY_FILE).write_text(json.dumps(record, indent=1))
    log(f"llama-server ready in {seconds} s.")
