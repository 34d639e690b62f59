"""What loading the default target costs, each figure measured in a child process of its own
(so one load's memory never counts in another's):

* seconds of ``load_target`` from the GGUF file (the converted folder removed first) and
  from the converted folder (gumiho.loading.embedded);
* resident memory after a load on each runtime (llama.cpp: its float32 view packed on
  first use; torch: packed at load);
* resident memory after each of three llama.cpp load-decode-drop rounds (what stays);
* with ``--vllm``: seconds of one vLLM start and decode of the exported default target,
  with vLLM's engine core in its own process (vLLM's default) and in the driver's
  (``run_vllm(one_process=True)``).

    PYTHONPATH=. python research/load_costs.py [--vllm] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import ctypes, gc, json, os, shutil, sys, time
from gumiho.files import LibraryPaths, configure
configure(LibraryPaths.from_environment(os.environ))
from gumiho import generate
from gumiho.loading import load_target
from gumiho.loading.assets import default_target_files
from gumiho.loading.embedded import converted_folder

def resident_mb():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20)

what = sys.argv[1]
if what == "from-gguf":
    shutil.rmtree(converted_folder(os.path.join(*default_target_files())), ignore_errors=True)
if what in ("from-gguf", "from-folder"):
    began = time.perf_counter()
    load_target(None, runtime="torch")
    print(json.dumps({"seconds": round(time.perf_counter() - began, 2)}))
elif what in ("torch", "llama.cpp"):
    before = resident_mb()
    target = load_target(None, runtime=what)
    print(json.dumps({"added_mb": resident_mb() - before}))
elif what == "rounds":
    after = []
    for _ in range(3):
        target = load_target(None, runtime="llama.cpp")
        generate(target, prompt_ids=target.encode("Why do cats purr?"), max_new_tokens=8)
        del target
        after.append(resident_mb())
    print(json.dumps({"resident_after_each_mb": after}))
"""


def child(what: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, what], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def vllm_starts() -> dict:
    import time

    from gumiho.export.__main__ import main as export_main
    from gumiho.serving.vllm_env import run_vllm

    out = {}
    with tempfile.TemporaryDirectory() as work:
        folder = os.path.join(work, "target")
        assert export_main(["target", folder]) == 0
        for name, one in (("engine core in its own process", False), ("engine core in the driver", True)):
            began = time.perf_counter()
            run_vllm(folder, [[1, 2, 3, 4, 5]], 16, one_process=one)
            out[name] = round(time.perf_counter() - began, 1)
    return out


def main(argv=None) -> int:
    from gumiho.files import LibraryPaths, configure

    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", action="store_true", help="also time vLLM starts (needs the vLLM environment)")
    ap.add_argument("--out", help="write the JSON here too")
    args = ap.parse_args(argv)
    record = {"load_seconds": {w: child(w)["seconds"] for w in ("from-gguf", "from-folder")},
              "resident_after_load_mb": {w: child(w)["added_mb"] for w in ("torch", "llama.cpp")},
              "llamacpp_rounds": child("rounds")}
    if args.vllm:
        record["vllm_start_seconds"] = vllm_starts()
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
