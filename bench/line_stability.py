"""How stable the per-line figures are from run to run: one profiled call vs the median of several.

    python bench/line_stability.py [--runs 5] [--burn]

Profiles reference functions (`tests/runtime/targets/`: `mixed` has a matmul, a relu, an
elementwise line and an `.item()`; `one_slow_call_in_three` a line that is slow on one call in
five) `--runs` times in this process, on CPU, with the attribution pass over one call (what the
profiler did for calls >= 200 ms before issue 11) and over the protocol's count (a median per
line), on the same ceilings, runs interleaved. `--burn` runs a process spinning on one core
alongside, as a busy machine. Prints, per case and variant: the dominant line of each run, and
the share of each line (min-max over the runs). Not a test: figures for bench/README.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ROOT / "tests" / "runtime" / "targets"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_targets.{name}", TARGETS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def profile(fn, args, peaks, attribution_calls):
    """The session's protocol, with the attribution pass's call count chosen here."""
    from perflsp.runtime import analysis, session
    from perflsp.runtime.profiling import run_attribution, run_clean_profile
    from perflsp.runtime.timing import TimingOptions, percentile, timed_calls, warm_up

    options = TimingOptions(min_time_s=0.2)
    source = str(Path(fn.__code__.co_filename).resolve())
    call = lambda: fn(*args)  # noqa: E731
    warm = warm_up(call, "cpu", options)
    samples = timed_calls(call, "cpu", options)
    median_s = percentile(sorted(samples), 0.5)
    clean = run_clean_profile(call, session.profile_calls_for(median_s), "cpu")
    calls = attribution_calls or session.attribution_calls_for(median_s)
    attribution = run_attribution(call, source, "cpu", calls)
    target = analysis.target_block(f"{source}:{fn.__name__}", fn.__module__, fn.__name__, Path(source))
    settings = analysis.settings_block(inputs="setup", setup=None, run_command=None, stop_program=True,
                                       timing=options, timeout_s=None, device="cpu")
    ctx = session.Context(device="cpu", peaks=peaks, peaks_source="cache", target=target, settings=settings,
                          source_file=source)
    return session.result_from(session.Measurement(warm, samples, "perf_counter", clean, attribution), ctx)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burn", action="store_true", help="spin a process on one core alongside")
    args = parser.parse_args()

    from perflsp.runtime import peaks as peaks_module

    peaks = peaks_module.measure("cpu", budget_s=1.0)
    ref, noisy = load("ref_cases"), load("noisy_cases")
    cases = {"mixed": ref.mixed, "one_slow_call_in_three": noisy.one_slow_call_in_three}
    inputs = {name: fn.__perflsp_profile__.setup() for name, fn in cases.items()}
    variants = {"1 call": 1, "median of the protocol's calls": None}
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.burn else None
    loads = [os.getloadavg()[0]]
    seen = defaultdict(list)  # (case, variant) -> [result, ...]
    try:
        time.sleep(0.5 if burner else 0)
        for _ in range(args.runs):
            for name, fn in cases.items():
                for variant, calls in variants.items():
                    seen[name, variant].append(profile(fn, inputs[name], peaks, calls))
            loads.append(os.getloadavg()[0])
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    print(f"{args.runs} runs per variant, {'one core burning' if burner else 'no extra load'}; "
          f"load average (1 min) {min(loads):.2f}-{max(loads):.2f}")
    for (name, variant), results in seen.items():
        dominant = [r["lines"][0]["line"] for r in results]
        regimes = sorted({r["verdict"]["regime"] for r in results})
        print(f"\n{name}, {variant}: dominant line per run {dominant}; regimes {regimes}")
        shares = defaultdict(list)
        for result in results:
            for entry in result["lines"]:
                shares[entry["line"], entry["code"]].append(entry["share"])
        for (line, code), values in sorted(shares.items()):
            print(f"  line {line:>3} {code[:40]:<40} share {min(values):6.1%} - {max(values):6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
