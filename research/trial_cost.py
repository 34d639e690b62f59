"""What the llama.cpp runtime's trial before trust costs (gumiho/runtimes/llamacpp_trial.py,
run in a child process by gumiho.runtimes.llamacpp_trust): on each 4-bit file the runtime
offers, the first verdict (the trial run) and the second (read from the cache), in a fresh
cache folder so nothing earlier answers.

    PYTHONPATH=. python research/trial_cost.py
"""
import dataclasses
import os
import tempfile
import time
from pathlib import Path

from gumiho.files import LibraryPaths, configure
from gumiho.loading import default_target_files
from gumiho.runtimes.llamacpp_files import LAYOUTS, layout_file, pick_layout


def main() -> None:
    # The script's entry: the library's paths as the environment sets them, in a fresh cache folder (the
    # verdicts, and the Q4_0 rewrite).
    fresh = Path(tempfile.mkdtemp(prefix="trial-cost-"))
    configure(dataclasses.replace(LibraryPaths.from_environment(os.environ), cache_root=fresh))
    from gumiho.runtimes.llamacpp import TRIAL_SHAPE, check_runtime

    shipped = os.path.join(*default_target_files())
    files = {name: layout_file(shipped, pick_layout(name)) for name in LAYOUTS}
    print(f"trial shape (kv type, flash attention, batch, chunk, sequences, context): {TRIAL_SHAPE}")
    for name, path in files.items():
        for attempt in ("first", "cached"):
            started = time.perf_counter()
            verdict = check_runtime(path)
            print(f"{name}: {attempt}: {time.perf_counter() - started:.3f} s (usable {verdict.usable}, "
                  f"trial {verdict.seconds:.2f} s, setting {verdict.setting})")


if __name__ == "__main__":
    main()
