"""What files at and past the parser's limits cost `perflsp check`: CPU seconds and peak RSS of one
`perflsp check --preview --no-cache --jobs 1` process (and its workers) per file, from `os.wait4`.

Files, generated: N `.item()` reads back to back in one training loop's body (N = 1,000, 2,000,
4,000, 8,000), a list literal of 900,000 numbers (2.7 MB), an `if` with 10,000 `elif`s and a
t-string with 1,500 nested brackets in its field. With `--before PYTHON` (an interpreter whose
`perflsp` is an older checkout) each run checks every file under both, taking turns, and the
table gives the ratio of the medians.

    python bench/parser_limits.py [--runs 3] [--before /path/to/old/venv/bin/python] [--reads 1000 2000]
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple


class Run(NamedTuple):
    cpu_s: float
    peak_mib: float
    outcome: str  # the exit code, or the signal that killed it


def reads(n: int) -> str:
    body = "".join(f"        print(loss{i % 7}.item())\n" for i in range(n))
    return ("import torch\n\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
            "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n" + body)


def files(read_counts: List[int]) -> Dict[str, str]:
    out = {f"reads_{n}.py": reads(n) for n in read_counts}
    out["list_900k.py"] = "x = [" + "1, " * 900_000 + "]\n"
    out["elif_10k.py"] = "if a:\n    pass\n" + "".join(f"elif a == {i}:\n    pass\n" for i in range(10_000))
    out["t_string.py"] = 'y = t"{' + "(" * 1500 + "1" + ")" * 1500 + '}"\n'
    return out


def check(python: str, path: Path) -> Run:
    with open(os.devnull, "w") as devnull:
        process = subprocess.Popen([python, "-m", "perflsp", "check", path.name, "--preview", "--no-cache",
                                    "--jobs", "1", "--output-format", "concise"], cwd=path.parent,
                                   stdout=devnull, stderr=devnull)
        _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    outcome = signal.Signals(-code).name if code < 0 else f"exit {code}"
    return Run(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, outcome)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", help="also run under this interpreter (an older perflsp), turn by turn")
    parser.add_argument("--reads", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    args = parser.parse_args()
    pythons = {"after": sys.executable, **({"before": args.before} if args.before else {})}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average at the start {os.getloadavg()[0]:.2f}", flush=True)
    runs: Dict[str, Dict[str, List[Run]]] = {name: {} for name in pythons}
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, text in files(args.reads).items():
            paths.append(Path(tmp) / name)
            paths[-1].write_text(text)
        (Path(tmp) / "perflsp.toml").write_text("")  # no config above the folder applies
        for _ in range(args.runs):
            for path in paths:
                for version, python in pythons.items():
                    runs[version].setdefault(path.name, []).append(check(python, path))
    print(f"load average at the end {os.getloadavg()[0]:.2f}; CPU s and peak RSS: median of {args.runs} runs")
    columns = ["file", *(f"{v} {c}" for v in pythons for c in ("CPU s", "peak RSS", "outcome"))]
    columns += ["CPU before/after"] if args.before else []
    print("| " + " | ".join(columns) + " |\n|" + " --- |" * len(columns))
    for path in paths:
        cells, medians = [], {}
        for version in pythons:
            done = runs[version][path.name]
            medians[version] = statistics.median(r.cpu_s for r in done)
            outcomes = sorted({r.outcome for r in done})
            cells += [f"{medians[version]:.2f}", f"{statistics.median(r.peak_mib for r in done):.0f} MiB",
                      "/".join(outcomes)]
        ratio = [f"{medians['before'] / medians['after']:.1f}×"] if args.before else []
        print(f"| {path.name} | " + " | ".join(cells + ratio) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
