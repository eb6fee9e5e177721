"""Memory of `perflsp serve` per open file: the server's resident set before and after `didOpen`.

Files of ~1,000, ~10,000 and ~50,000 lines of real PyTorch code: the installed torch package's
own modules (`torch/nn/modules`, `optim`, `distributions`, ...) concatenated in order, whole
top-level statements only, `from __future__` lines left out (they may only start a file). For
each size a fresh server (Neovim 0.7's capabilities: pushed diagnostics) is started and
initialized in an empty folder, and a one-line file is opened first (start-up ends with the first
analysis: the collector comes on, what start-up made is frozen); once the server is idle (its CPU
time stopped moving) its VmRSS (`/proc/PID/status`) is read, the file is opened, and VmRSS is read
again once the diagnostics of version 1 arrived and the server is idle again, then VmHWM (the
peak). Reported: the growth, in MiB and in bytes per character of the file; medians of `--runs`
runs (the sizes and variants take turns, so the machine's load falls on all alike). The load
average is printed before and after.

`--edits N` then changes the file N times at both ends (a comment line above and below, new each
time: no one statement holds the edit, so every version is parsed whole, as after a paste across
functions or a formatter), and reads VmRSS once the server is idle after the last.

    python bench/server_memory.py [--sizes 1000 10000 50000] [--runs 3] [--edits N] [--variant NAME:VAR=VALUE,...]
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from lsprotocol import types as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import Client, cpu_s  # noqa: E402

TORCH_FOLDERS = ["nn/modules", "optim", "distributions", "nn/utils", "utils/data", "nn/parallel"]
IDLE_S = 1.0  # the server counts as idle once its CPU time moved less than 10 ms in this long


def torch_source(lines: int) -> str:
    """About `lines` lines of torch's own modules, whole top-level statements, valid as one file."""
    torch_dir = Path(importlib.util.find_spec("torch").origin).parent  # type: ignore[union-attr, arg-type]
    out: List[str] = []
    count = 0
    for folder in TORCH_FOLDERS:
        for path in sorted((torch_dir / folder).rglob("*.py")):
            text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True)
                           if not line.startswith("from __future__"))
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            rows = text.splitlines(True)
            if count + len(rows) <= lines:
                out.append(text)
                count += len(rows)
                continue
            cut = max((stmt.lineno - 1 for stmt in tree.body if stmt.lineno - 1 <= lines - count), default=0)
            out.append("".join(rows[:cut]))
            return "".join(out)
    return "".join(out)


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


async def idle(pid: int) -> None:
    before = cpu_s(pid)
    while True:
        await asyncio.sleep(IDLE_S)
        now = cpu_s(pid)
        if now - before < 0.01:
            return
        before = now


async def open_file(client: Client, path: Path, text: str) -> None:
    """Write, open and wait for the first diagnostics of a file."""
    path.write_text(text, encoding="utf-8")
    client.lsp.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
        uri=path.as_uri(), language_id="python", version=1, text=text)))
    await client.wait(path.as_uri(), 1, timeout=1800)


async def one_run(source: str, env: Dict[str, str], edits: int) -> Tuple[int, int, int, int]:
    """(VmRSS before didOpen, VmRSS after its diagnostics, VmHWM then, VmRSS after `edits` edits
    across the file), bytes. The workspace is a folder of its own, empty until the file is opened:
    the server reads no other file."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        client = Client()
        await client.start(root, {}, env)
        pid = client.lsp._server.pid  # type: ignore[union-attr]
        await open_file(client, root / "first.py", "import torch\n")
        await idle(pid)
        before = status_kib(pid, "VmRSS")
        path = root / "big.py"
        await open_file(client, path, source)
        await idle(pid)
        after, peak = status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM")
        for version in range(2, edits + 2):
            mark = f"# version {version}\n"
            client.lsp.text_document_did_change(T.DidChangeTextDocumentParams(
                T.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
                [T.TextDocumentContentChangeWholeDocument(text=mark + source + mark)]))
            await client.wait(path.as_uri(), version, timeout=1800)
        await idle(pid)
        edited = status_kib(pid, "VmRSS")
        await client.stop()
    return before * 1024, after * 1024, peak * 1024, edited * 1024


async def main(sizes: List[int], runs: int, edits: int, variants: Dict[str, Dict[str, str]]) -> None:
    print(f"load average before: {os.getloadavg()}")
    sources = {lines: torch_source(lines) for lines in sizes}
    figures: Dict[Tuple[str, int], List[Tuple[int, int, int, int]]] = {}
    for run in range(runs):
        for lines, source in sources.items():
            for name, env in variants.items():
                figures.setdefault((name, lines), []).append(await one_run(source, env, edits))
                before, after, peak, edited = figures[(name, lines)][-1]
                print(f"  run {run + 1} {name} {lines} lines: {before / 2**20:.0f} -> {after / 2**20:.0f} MiB "
                      f"(peak {peak / 2**20:.0f}), {edited / 2**20:.0f} MiB after {edits} edits", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(f"| variant | lines | characters | RSS idle | RSS with the file open | growth | bytes / character "
          f"| peak RSS | RSS after {edits} edits across the file |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (name, lines), results in figures.items():
        chars = len(sources[lines])
        before, after, peak, edited = (statistics.median(r[i] for r in results) for i in range(4))
        growth = statistics.median(r[1] - r[0] for r in results)
        print(f"| {name} | {sources[lines].count(chr(10)):,} | {chars:,} | {before / 2**20:.0f} MiB | "
              f"{after / 2**20:.0f} MiB | {growth / 2**20:.1f} MiB | {growth / chars:.0f} | {peak / 2**20:.0f} MiB "
              f"| {edited / 2**20:.0f} MiB |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--edits", type=int, default=0, help="edits across the file after it is open")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE,...",
                        help="a server with these environment variables (repeatable; default: one, as is)")
    args = parser.parse_args()
    chosen: Dict[str, Dict[str, str]] = {}
    for spec in args.variant or ["server:"]:
        name, _, assignments = spec.partition(":")
        chosen[name] = dict(pair.split("=", 1) for pair in assignments.split(",") if pair)
    asyncio.run(main(args.sizes, args.runs, args.edits, chosen))
