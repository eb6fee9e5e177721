"""How long `perflsp profile` and `perflsp peaks` take, end to end, as a user runs them.

    python bench/profile_speed.py [--runs 5] [--entry module|perflsp] [--device auto|cpu|cuda]

Measures the wall time of whole commands (process start, torch import, measuring, writing the
result), median of several runs, each in a fresh process:
- `perflsp peaks` (measures the ceilings, default 3 s budget, and caches them);
- `perflsp profile` of a ~1 ms function (a float32 matmul sized to take 1 ms at the measured
  float32 ceiling; the table shows the median the profile itself measured) with the ceilings
  already cached, default settings (timing window 1 s) and with a
  short window (--min-time 0.2);
- `perflsp profile` of a long function (`--long-ms`, default 500: repeated 1024² float32
  matmuls), against issue 11's bound for functions of median m >= 10 ms: at most 3 s + 20 m
  beyond the torch import, which is timed on its own (`python -c "import torch"`).
The issue's targets: profile <= 10 s, peaks <= 10 s. The ceilings are cached in a temporary
folder, never in the user's cache. Prints a table and the load average; `--json PATH` also
writes the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TARGET = textwrap.dedent('''
    import torch
    import perflsp

    N = {n}

    def inputs():
        a = torch.randn(N, N)
        return a, a.clone(), torch.empty(N, N)

    @perflsp.profile(setup=inputs)
    def one_millisecond(a, b, out):
        torch.mm(a, b, out=out)
''')


LONG_TARGET = textwrap.dedent('''
    import torch
    import perflsp

    REPS = {reps}

    def inputs():
        a = torch.randn(1024, 1024)
        return a, a.clone(), torch.empty(1024, 1024)

    @perflsp.profile(setup=inputs)
    def long_call(a, b, out):
        for _ in range(REPS):
            torch.mm(a, b, out=out)
''')


def best_mm_1024_s(torch) -> float:
    """The fastest of a few 1024² float32 matmuls here: the long function's unit of work (the
    cached ceilings are measured for other sizes, and a loaded machine can put them far off)."""
    a, out = torch.randn(1024, 1024), torch.empty(1024, 1024)
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        torch.mm(a, a, out=out)
        times.append(time.perf_counter() - t0)
    return min(times[1:])


def size_for_one_millisecond(flops_per_s: float) -> int:
    """The float32 matmul size that takes about 1 ms at the measured float32 ceiling."""
    return max(32, round((flops_per_s * 1e-3 / 2) ** (1 / 3) / 32) * 32)


def command(entry: str, *args: str) -> list:
    if entry == "perflsp":
        return ["perflsp", *args]
    return [sys.executable, "-m", "perflsp.runtime", *args]


def timed(cmd: list, env: dict, cwd: str) -> tuple:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return elapsed, out.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--entry", choices=("module", "perflsp"), default="module",
                        help="`python -m perflsp.runtime` (default) or the `perflsp` console script")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--long-ms", type=float, default=500.0,
                        help="median of the long function, at the cached float32 ceiling (0: skip it)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    with tempfile.TemporaryDirectory(prefix="perflsp-bench-") as work:
        env = dict(os.environ, PERFLSP_CACHE_DIR=str(Path(work, "cache")))
        peaks = [timed(command(args.entry, "peaks", "--device", device), env, work)[0] for _ in range(args.runs)]
        rows.append(("perflsp peaks (measure + cache)", peaks, None))
        # Size the target from the cached float32 ceiling (its best run): a timing taken here
        # would be at the mercy of whatever else the machine is doing at that moment.
        (cached,) = Path(work, "cache", "peaks").glob("*.json")
        n = size_for_one_millisecond(json.loads(cached.read_text())["compute_flops_per_s"]["float32"])
        Path(work, "speed_target.py").write_text(TARGET.format(n=n))
        target = f"{Path(work, 'speed_target.py')}:one_millisecond"
        for label, extra in (("perflsp profile, default (--min-time 1)", []),
                             ("perflsp profile --min-time 0.2", ["--min-time", "0.2"])):
            walls, medians = [], []
            for _ in range(args.runs):
                wall, _ = timed(command(args.entry, "profile", target, "--device", device, "--json",
                                        str(Path(work, "r.json")), *extra), env, work)
                result = json.loads(Path(work, "r.json").read_text())
                assert result["ceilings"]["source"] == "cache"
                walls.append(wall)
                medians.append(result["timing"]["median_us"])
            rows.append((label, walls, statistics.median(medians)))
        bound = None
        if args.long_ms > 0:
            reps = max(1, round(args.long_ms / 1e3 / best_mm_1024_s(torch)))
            Path(work, "long_target.py").write_text(LONG_TARGET.format(reps=reps))
            imports = [timed([sys.executable, "-c", "import torch"], env, work)[0] for _ in range(args.runs)]
            walls, medians = [], []
            for _ in range(args.runs):
                wall, _ = timed(command(args.entry, "profile", f"{Path(work, 'long_target.py')}:long_call", "--device",
                                        device, "--json", str(Path(work, "r.json"))), env, work)
                walls.append(wall)
                medians.append(json.loads(Path(work, "r.json").read_text())["timing"]["median_us"])
            rows.append(("python -c 'import torch'", imports, None))
            rows.append((f"perflsp profile, long function ({reps} mm)", walls, statistics.median(medians)))
            beyond = [w - statistics.median(imports) for w in walls]
            bound = [(b, 3 + 20 * m / 1e6) for b, m in zip(beyond, medians)]

    machine = (f"{platform.node()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
               f"Python {platform.python_version()}, torch {torch.__version__}, device {device}"
               + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    print(f"machine: {machine}; load average {os.getloadavg()[0]:.2f} (1 min) at the end")
    print(f"target: float32 matmul n={n}; {args.runs} runs each, fresh process per run, wall clock")
    print(f"{'command':<42} {'median':>8} {'min':>8} {'max':>8}   function median")
    for label, walls, function_us in rows:
        func = f"{function_us / 1e3:.2f} ms" if function_us is not None else "-"
        print(f"{label:<42} {statistics.median(walls):>7.2f}s {min(walls):>7.2f}s {max(walls):>7.2f}s   {func}")
    if bound:
        for beyond, limit in bound:
            print(f"long function: {beyond:.2f} s beyond the torch import, bound 3 s + 20 x median = {limit:.2f} s "
                  f"{'ok' if beyond <= limit else 'OVER'}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine, "matmul_n": n, "runs": args.runs, "long_function_bound": bound,
            "rows": [{"command": label, "wall_s": walls, "median_s": statistics.median(walls),
                      "function_median_us": function_us} for label, walls, function_us in rows],
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
