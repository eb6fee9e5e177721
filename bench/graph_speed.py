"""What the project-wide per-step model costs: summaries, the graph, and a warm run after an edit.

Prints, for a corpus of Python files (default: a copy of the installed torch package's
`nn, optim, utils/data, distributions, amp, autograd, _refs`; or `--corpus DIR`, e.g. Lightning's
`src/` extracted from git):
- the `ast` summaries of every file next to a bare libcst parse of the same files (the floor of
  `perflsp check`), both in one process;
- the graph built from those summaries, and the same graph over the corpus replicated k times under
  other package names (up to `--max-files`), to show the build is linear in the project's size;
- a warm `check_paths` with the cache after touching one leaf file: its time, and how many files
  were analysed again (the touched file, plus files whose per-step facts changed).

    python bench/graph_speed.py [--runs 3] [--corpus DIR] [--max-files 10000]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_speed import DEFAULT_PACKAGES, bare_parse, copy_corpus  # noqa: E402


def summaries_of(files, root: Path):
    from perflsp.rules.project import module_name
    from perflsp.rules.summary import summarize

    out = []
    for path in files:
        module, is_package = module_name(path)
        out.append((str(path.relative_to(root)), summarize(path.read_text(encoding="utf-8"), module, is_package, str(path))))
    return out


def replicated(summaries, copies: int):
    """The corpus `copies` times over, each copy's modules renamed (`copy3.torch.nn...`)."""
    import json

    out = []
    for index in range(copies):
        prefix = f"copy{index}."
        for path, summary in summaries:
            text = json.dumps(summary)
            for name in {summary["module"].split(".")[0]}:
                text = text.replace(f'"{name}.', f'"{prefix}{name}.').replace(f'"{name}"', f'"{prefix}{name}"')
            out.append((f"{prefix}{path}", json.loads(text)))
    return out


def timed(fn, runs: int) -> float:
    values = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        values.append(time.perf_counter() - start)
    return statistics.median(values)


def main() -> int:
    from perflsp.rules.project import Project
    from perflsp.rules.runner import Cache, check_paths, discover

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--corpus", type=Path, help="a folder of Python files (copied first)")
    parser.add_argument("--max-files", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "corpus"
        if args.corpus:
            shutil.copytree(args.corpus, root)
            files = sorted(root.rglob("*.py"))
        else:
            files = copy_corpus(DEFAULT_PACKAGES, root / "torch")
        (root / "perflsp.toml").write_text("")
        lines = sum(p.read_text(encoding="utf-8").count("\n") for p in files)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"corpus: {len(files)} files, {lines} lines (median of {args.runs} runs)")

        parse = timed(lambda: bare_parse(files), args.runs)
        summaries = summaries_of(files, root)
        summarise = timed(lambda: summaries_of(files, root), args.runs)
        print(f"bare libcst parse        {parse:8.2f} s  1.00")
        print(f"ast summaries            {summarise:8.2f} s  {summarise / parse:.2f} x parse")
        graph = timed(lambda: Project(summaries), args.runs)
        print(f"graph, {len(files):>6} files     {graph:8.3f} s  {graph / parse:.3f} x parse")
        copies = max(1, args.max_files // max(len(files), 1))
        for k in sorted({1, max(1, copies // 4), copies}):
            many = replicated(summaries, k)
            seconds = timed(lambda: Project(many), args.runs)
            print(f"graph, {len(many):>6} files     {seconds:8.3f} s  {1e6 * seconds / len(many):.0f} us/file")

        cache = Cache(Path(tmp) / "cache")
        paths = discover([str(root)])
        check_paths(paths, jobs=1, cache=cache)
        leaf = max(files, key=lambda p: (p.name != "__init__.py", -p.stat().st_size))  # smallest leaf module
        warm = []
        for run in range(args.runs):
            leaf.write_text(leaf.read_text(encoding="utf-8") + f"\n# touched {run}\n", encoding="utf-8")
            start = time.perf_counter()
            results = check_paths(paths, jobs=1, cache=Cache(Path(tmp) / "cache"))
            warm.append(time.perf_counter() - start)
            again = [r.path for r in results if not r.cached]
        print(f"warm run, 1 file touched {statistics.median(warm):8.2f} s  {statistics.median(warm) / parse:.3f} x parse; "
              f"analysed again: {len(again)} of {len(paths)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
