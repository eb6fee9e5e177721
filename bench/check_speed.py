"""How fast is `perflsp check` next to the floor, a bare libcst parse of the same files?

Corpus: the installed torch package's own Python source (real PyTorch code that every machine
with the runtime extra has), a fixed set of sub-packages copied to a temporary folder so that no
.gitignore or config of this repository applies. Prints the median of several runs of:
bare `libcst.parse_module` over every file (one process), `perflsp check --no-cache --jobs 1`,
`--jobs 2`, `--jobs 1 --preview` (every rule), and a warm-cache run, as ratios to the bare parse,
and the peak RSS of the checker.

    python bench/check_speed.py [--runs 3] [--packages nn optim ...]
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_PACKAGES = ["nn", "optim", "utils/data", "distributions", "amp", "autograd", "_refs"]


def copy_corpus(packages, dest: Path) -> list[Path]:
    import torch

    root = Path(torch.__file__).parent
    for package in packages:
        shutil.copytree(root / package, dest / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return sorted(dest.rglob("*.py"))


def bare_parse(files) -> float:
    import libcst

    start = time.perf_counter()
    for path in files:
        libcst.parse_module(path.read_text(encoding="utf-8"))
    return time.perf_counter() - start


def run_check(corpus: Path, *args: str) -> tuple[float, int, int]:
    """(wall seconds, findings, peak RSS in MiB of the largest process of the run)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perflsp", "check", str(corpus), "--output-format", "json",
                           "--exit-zero", *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"perflsp check failed:\n{proc.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, proc.stdout.count('"code":'), max(before, after) // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--packages", nargs="+", default=DEFAULT_PACKAGES)
    parser.add_argument("--corpus", type=Path, help="check a copy of this folder instead (e.g. Lightning's src/)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.corpus:
            corpus = Path(tmp) / "corpus"
            shutil.copytree(args.corpus, corpus)
            (corpus / "perflsp.toml").write_text("")  # no config above the copy applies
            files = sorted(corpus.rglob("*.py"))
        else:
            corpus = Path(tmp) / "torch"
            files = copy_corpus(args.packages, corpus)
        lines = sum(p.read_text(encoding="utf-8").count("\n") for p in files)
        cache = Path(tmp) / "cache"
        # Default rules skip the libcst parse where none of them can report; `--preview` parses
        # every file, so its row is the cost of the whole catalogue.
        timings: dict[str, list[float]] = {"bare parse": [], "jobs 1": [], "jobs 2": [], "preview j1": [],
                                           "warm cache": []}
        findings, peak_mib = 0, 0
        for _ in range(args.runs):
            timings["bare parse"].append(bare_parse(files))
            wall, findings, peak = run_check(corpus, "--no-cache", "--jobs", "1")
            timings["jobs 1"].append(wall)
            peak_mib = max(peak_mib, peak)
            timings["jobs 2"].append(run_check(corpus, "--no-cache", "--jobs", "2")[0])
            timings["preview j1"].append(run_check(corpus, "--no-cache", "--jobs", "1", "--preview")[0])
            shutil.rmtree(cache, ignore_errors=True)
            run_check(corpus, "--cache-dir", str(cache))  # fill the cache
            timings["warm cache"].append(run_check(corpus, "--cache-dir", str(cache))[0])
    floor = statistics.median(timings["bare parse"])
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    name = str(args.corpus) if args.corpus else f"torch/{{{','.join(args.packages)}}}"
    print(f"corpus: {name}: {len(files)} files, {lines} lines; {findings} findings; load average {os.getloadavg()[0]:.1f}")
    print(f"{'run':<12} {'median s':>9} {'× parse':>8}   (median of {args.runs})")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:<12} {median:>9.2f} {median / floor:>8.2f}")
    print(f"jobs 2 / jobs 1: {statistics.median(timings['jobs 2']) / statistics.median(timings['jobs 1']):.2f}")
    print(f"peak RSS of one checker process: {peak_mib} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
