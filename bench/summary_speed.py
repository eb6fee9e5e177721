"""CPU cost of the project graph's inputs: every file's summary, then the graph built from them.

Summaries are what `perflsp check` and the language server compute for every file before the
rules run (and again for each edited statement), so a change to `perflsp.rules.summary` shows here
first. Runs alternate between this interpreter and `--before` (a venv of an earlier commit) in one
session, so the machine's load weighs on both alike; the medians and their ratio are printed.

    python bench/summary_speed.py SRC_FOLDER [--runs 5] [--before /path/to/other/venv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def measure(folder: str) -> dict:
    from perflsp.rules.project import Project, module_name
    from perflsp.rules.summary import summarize_whole

    files = []
    for path in sorted(Path(folder).rglob("*.py")):
        try:
            files.append((path, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    start = time.process_time()
    summaries = []
    for path, text in files:
        module, is_package = module_name(path)
        summaries.append((str(path), summarize_whole(text, module, is_package, str(path))[0]))
    summarised = time.process_time()
    Project(summaries)
    return {"files": len(files), "summaries_s": summarised - start, "graph_s": time.process_time() - summarised}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="the Python of a venv with another perflsp installed")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single measurement, as JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.folder)))
        return 0
    pythons = {"after": sys.executable, **({"before": args.before} if args.before else {})}
    results = {name: [] for name in pythons}
    for _ in range(args.runs):
        for name, python in pythons.items():  # alternating: both see the same load
            out = subprocess.run([python, __file__, args.folder, "--one"], capture_output=True, text=True, check=True)
            results[name].append(json.loads(out.stdout))
    for name, runs in results.items():
        summaries = [r["summaries_s"] for r in runs]
        graphs = [r["graph_s"] for r in runs]
        print(f"{name:6s} {runs[0]['files']} files: summaries {statistics.median(summaries):.2f} s CPU "
              f"({min(summaries):.2f}-{max(summaries):.2f}), graph {statistics.median(graphs):.2f} s")
    if args.before:
        ratio = statistics.median(r["summaries_s"] for r in results["after"]) / statistics.median(
            r["summaries_s"] for r in results["before"])
        print(f"after / before (summaries, medians): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
