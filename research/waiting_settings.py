"""Benchmark: how the runtimes' worker threads wait, against a neighbour's load. For each
waiting setting, the race under load (research/race_under_load.py: the app's own race of
the page's example prompts, both weights, quiet and beside spinning processes) runs in a
fresh process, since OpenMP reads its settings once, when it starts:

* OMP_WAIT_POLICY: unset (libgomp spins a while before it sleeps), PASSIVE (sleeps at
  once) or ACTIVE (spins). Both runtimes wait through it here: PyTorch's threads, and
  llama.cpp's, which this build runs on OpenMP (libggml-cpu links libgomp), so its own
  threadpool and that pool's polling level (llama.cpp's ``--poll``) are not used at all;
* GOMP_SPINCOUNT: how long libgomp spins before it sleeps when the policy is unset (its
  default is 300,000 spins; a smaller count sleeps sooner);
* OMP_NUM_THREADS: 2 (a thread per core) or 1 (the race's runtimes on one thread each;
  llama.cpp takes PyTorch's count, gumiho.runtimes.llamacpp).

Per setting and weight: the quiet speedup, the loaded speedup over the quiet one with one
and with two spinning processes (1 = the lesson unchanged), vanilla's quiet speed against
the first setting's, paired by prompt (>= 0.97 keeps vanilla's quiet speed), and vanilla's
tokens/s quiet, beside one hog and beside two (how long a class waits). The chosen setting
keeps the loaded speedups closest to the quiet ones (one and two hogs alike) among those
that keep vanilla's quiet speed. The settings run one after another, so slow drift of the machine
falls on them unevenly: a difference under a few per cent is not one.

    PYTHONPATH=. python research/waiting_settings.py --out benchmarks/busy/waiting_settings.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (OMP_WAIT_POLICY, GOMP_SPINCOUNT, OMP_NUM_THREADS); "" leaves a variable unset.
SETTINGS = [("", "", "2"), ("PASSIVE", "", "2"), ("ACTIVE", "", "2"), ("", "10000", "2"), ("", "30000", "2"),
            ("PASSIVE", "", "1")]
KEEP_VANILLA = 0.97


def setting_name(policy: str, spin: str, threads: str) -> str:
    return (f"OMP_WAIT_POLICY={policy or 'unset'} GOMP_SPINCOUNT={spin or 'unset'} "
            f"OMP_NUM_THREADS={threads}")


def run_setting(policy: str, spin: str, threads: str, prompts: int, tokens: int, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    if spin:
        env["GOMP_SPINCOUNT"] = spin
    env["OMP_NUM_THREADS"] = threads
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run([sys.executable, str(ROOT / "research" / "race_under_load.py"), "--prompts", str(prompts),
                    "--max-new-tokens", str(tokens), "--loads", "one,hog", "--out", str(out)],
                   cwd=ROOT, env=env, check=True, timeout=3600)
    return json.loads(out.read_text())


def quiet_vanilla_s(result: dict, weights: str) -> list[float]:
    return [r["quiet"]["vanilla_s"] for r in result["runs"] if r["weights"] == weights]


def vanilla_tokens_per_s(result: dict, weights: str, load: str) -> float:
    """Vanilla's median tokens/s under ``load`` (each race's tokens are both lanes' together)."""
    return statistics.median(r[load]["tokens"] / 2 / r[load]["vanilla_s"] for r in result["runs"]
                             if r["weights"] == weights)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "busy" / "waiting_settings.json"))
    args = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (policy, spin, threads) in enumerate(SETTINGS):
            name = setting_name(policy, spin, threads)
            print(f"== {name}", flush=True)
            results[name] = run_setting(policy, spin, threads, args.prompts, args.max_new_tokens,
                                        Path(tmp) / f"setting{i}.json")
    first = next(iter(results.values()))
    rows, lines = [], [f"{'setting':<62} {'weights':<10} {'quiet':>6} {'1 hog/quiet':>12} {'2 hogs/quiet':>13} "
                       f"{'vanilla quiet vs first':>23}  vanilla tok/s quiet, 1 hog, 2 hogs"]
    for name, res in results.items():
        for weights in sorted({r["weights"] for r in res["runs"]}):
            t = res["table"]
            base = quiet_vanilla_s(first, weights)
            mine = quiet_vanilla_s(res, weights)
            # Speed ratio: the first setting's seconds over this one's, paired by prompt (>1 = faster here).
            vanilla = statistics.median(b / m for b, m in zip(base, mine)) if base and mine else float("nan")
            row = {"setting": name, "weights": weights, "quiet_speedup": t[f"{weights}/quiet"]["speedup"],
                   "one_hog_over_quiet": t[f"{weights}/one"]["loaded_over_quiet"],
                   "two_hogs_over_quiet": t[f"{weights}/hog"]["loaded_over_quiet"],
                   "vanilla_quiet_speed_vs_first": round(vanilla, 3),
                   "vanilla_tokens_per_s": {load: round(vanilla_tokens_per_s(res, weights, load), 1)
                                            for load in ("quiet", "one", "hog")}}
            rows.append(row)
            tps = row["vanilla_tokens_per_s"]
            lines.append(f"{name:<62} {weights:<10} {row['quiet_speedup']:6.3f} {row['one_hog_over_quiet']:12.3f} "
                         f"{row['two_hogs_over_quiet']:13.3f} {row['vanilla_quiet_speed_vs_first']:23.3f}  "
                         f"{tps['quiet']:.1f}, {tps['one']:.1f}, {tps['hog']:.1f}")
    # The choice: every weight keeps vanilla's quiet speed; then the smallest total distance of
    # the loaded-over-quiet ratios from 1, one hog and two alike.
    def distance(name: str) -> float:
        return sum(abs(r["one_hog_over_quiet"] - 1) + abs(r["two_hogs_over_quiet"] - 1)
                   for r in rows if r["setting"] == name)

    keep = [n for n in results if all(r["vanilla_quiet_speed_vs_first"] >= KEEP_VANILLA
                                      for r in rows if r["setting"] == n)]
    chosen = min(keep or list(results), key=distance)
    lines.append(f"chosen: {chosen} (keeps vanilla's quiet speed within {1 - KEEP_VANILLA:.0%}, and the loaded "
                 f"speedups closest to the quiet ones: total distance {distance(chosen):.3f}); "
                 f"CPU: {first.get('cpu', '')}")
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "rows": rows, "chosen": chosen,
                               "runs": {n: r["runs"] for n, r in results.items()}}, indent=1))
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
