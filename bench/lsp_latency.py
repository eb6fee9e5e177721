"""Editing latency of `perflsp serve`: from `didChange` to the diagnostics of that version.

Over a real client connection (pygls' JSON-RPC client on the server's stdio, with Neovim 0.7's
recorded capabilities, so diagnostics are pushed), for files of ~500, ~2,000 and ~10,000 lines made
by repeating `examples/*.py`. Each edit inserts a comment line at a random statement boundary and
waits for the diagnostics of its version before the next one (so no edits are merged by the
debounce). Reported beside the floor, a bare `libcst.parse_module` of the same text in this process,
and the engine alone (`check_text`). Also: the first diagnostics of a small file, from the server's
`initialize` answer (then `initialized` + `didOpen`) and from the process start. Clock: `time.perf_counter`,
wall time; medians of the timed runs, warm-up runs not reported.

`--files PATH ...` times real files instead: each edit types one space at the end of a one-line
statement inside a function (the file keeps parsing; an incremental analysis re-parses that
statement), and the table gives the latency as a multiple of the bare parse.

`--variant NAME:VAR=VALUE,...` (repeatable) runs each size once per variant, the variants taking
turns edit by edit (each its own server, so the machine's load falls on all alike), e.g. the
server's benchmark knobs `PERFLSP_GC_FREEZE=0` (no `gc.freeze()`) and `PERFLSP_CHEAP_MS=0` (always
debounce), `PERFLSP_INCREMENTAL=0` (every version parsed and summarised whole), or
`PYTHONPATH=DIR` with another checkout's `perflsp` package laid out in DIR (run from outside the
repository, whose own `perflsp` folder would come first). The load average is printed before and
after. `--preview` runs every rule, the preview tier too (`preview = true` in the workspace).

    python bench/lsp_latency.py [--sizes 500 2000 10000] [--edits 30 20 10] [--debounce-ms 150]
        [--first-lines 1000] [--variant new: --variant old:PERFLSP_GC_FREEZE=0,PERFLSP_CHEAP_MS=0] [--json out.json]
    python bench/lsp_latency.py --files timm/models/vision_transformer.py ... --edits 40 ... --variant new: \
        --variant whole:PERFLSP_INCREMENTAL=0
"""
from __future__ import annotations

import argparse
import asyncio
import ast
import io
import json
import os
import platform
import random
import statistics
import sys
import time
import tokenize
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SERVER = [sys.executable, "-m", "perflsp", "serve", "--stdio"]


def make_source(lines: int) -> str:
    """The examples repeated until `lines` lines (definitions repeat, which Python allows)."""
    parts = [p.read_text(encoding="utf-8") for p in sorted(EXAMPLES.glob("*.py"))]
    if not parts:
        raise SystemExit(f"no examples in {EXAMPLES}")
    out: List[str] = []
    count = 0
    while count < lines:
        for part in parts:
            out.append(part if part.endswith("\n") else part + "\n")
            count += part.count("\n") + 1
            if count >= lines:
                break
    return "".join(out)


def statement_starts(source: str) -> List[int]:
    """0-based lines where a statement begins: a comment line inserted there keeps the file valid."""
    rows = {0}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NEWLINE:
            rows.add(token.end[0])  # the next line (0-based) starts a new logical line
    total = source.count("\n")
    return sorted(r for r in rows if r < total)


def rows_in_functions(source: str) -> List[int]:
    """0-based rows of one-line statements inside functions: a space typed at the end of one
    keeps the file valid and changes that function only."""
    rows = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in ast.walk(node):
                if (isinstance(stmt, ast.stmt) and stmt is not node and stmt.lineno == stmt.end_lineno
                        and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))):
                    rows.add(stmt.lineno - 1)
    return sorted(rows)


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def capabilities() -> T.ClientCapabilities:
    try:
        from pytest_lsp import client_capabilities

        return client_capabilities("neovim@v0.7.0")
    except Exception:  # pytest-lsp is a dev dependency; plain push capabilities do as well
        return T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
            publish_diagnostics=T.PublishDiagnosticsClientCapabilities(related_information=True)))


class Client:
    """A pygls client that timestamps every publishDiagnostics by (uri, version)."""

    def __init__(self) -> None:
        self.lsp = LanguageClient("perflsp-bench", "1")
        self.arrived: Dict[Tuple[str, Optional[int]], float] = {}
        self.event = asyncio.Event()

        @self.lsp.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: T.PublishDiagnosticsParams) -> None:
            self.arrived.setdefault((params.uri, params.version), time.perf_counter())
            self.event.set()

        @self.lsp.feature(T.WINDOW_LOG_MESSAGE)
        def logged(params: T.LogMessageParams) -> None:
            pass

    async def start(self, root: Path, settings: dict, env: Optional[Dict[str, str]] = None) -> float:
        """Spawn and initialize (as editors do: `initialize` right after the spawn); the
        perf_counter at which the server answered `initialize`."""
        await self.lsp.start_io(*SERVER, env={**os.environ, **(env or {})})
        await self.lsp.initialize_async(T.InitializeParams(
            capabilities=capabilities(), root_uri=root.as_uri(), process_id=None,
            workspace_folders=[T.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options={"settings": settings}))
        answered = time.perf_counter()
        self.lsp.initialized(T.InitializedParams())
        return answered

    async def wait(self, uri: str, version: int, timeout: float = 600) -> float:
        deadline = time.perf_counter() + timeout
        while (uri, version) not in self.arrived:
            self.event.clear()
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError(f"no diagnostics for {uri} version {version}")
            try:
                await asyncio.wait_for(self.event.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        return self.arrived[(uri, version)]

    async def stop(self) -> None:
        await self.lsp.shutdown_async(None)
        self.lsp.exit(None)
        await self.lsp.stop()


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux: /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def first_diagnostics(root: Path, runs: int, lines: int) -> Tuple[List[float], List[float], List[float]]:
    """(from the `initialize` answer + `didOpen`, from the process start, the server's CPU seconds
    until then) to the first diagnostics of a file of `lines` lines (0: examples/train_loop.py)."""
    small = make_source(lines) if lines else (EXAMPLES / "train_loop.py").read_text(encoding="utf-8")
    path = root / "first.py"
    path.write_text(small, encoding="utf-8")
    from_init, from_spawn, cpu = [], [], []
    for _ in range(runs + 1):  # the first run warms the OS file cache and is not reported
        client = Client()
        spawned = time.perf_counter()
        answered = await client.start(root, {})
        client.lsp.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
            uri=path.as_uri(), language_id="python", version=1, text=small)))
        arrived = await client.wait(path.as_uri(), 1)
        cpu.append(cpu_s(client.lsp._server.pid))  # type: ignore[union-attr]
        from_init.append(arrived - answered)
        from_spawn.append(arrived - spawned)
        await client.stop()
    return from_init[1:], from_spawn[1:], cpu[1:]


async def edit_latency(root: Path, lines: int, edits: int, debounce_ms: int, seed: int,
                       variants: Dict[str, Dict[str, str]], real: Optional[Path] = None,
                       preview: bool = False) -> Dict[str, Dict[str, float]]:
    """Per variant: the latency figures of `edits` edits of the same file, the variants taking turns.
    `real`: that file, with one-space edits inside functions, instead of a generated file of `lines`."""
    import libcst

    from perflsp.config import Settings
    from perflsp.rules.runner import check_text

    source = real.read_text(encoding="utf-8") if real is not None else make_source(lines)
    path = root / (real.name if real is not None else f"generated_{lines}.py")
    path.write_text(source, encoding="utf-8")
    parse_s = statistics.median(_timed(lambda: libcst.parse_module(source)) for _ in range(3))
    settings = Settings(preview=preview)
    check_s = statistics.median(_timed(lambda: check_text(source, str(path), settings)) for _ in range(2))

    function_rows = rows_in_functions(source) if real is not None else []
    uri = path.as_uri()
    clients, texts, rngs, latencies = {}, {}, {}, {}
    for name, env in variants.items():
        client = clients[name] = Client()
        await client.start(root, {"debounceMs": debounce_ms}, env)
        client.lsp.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=source)))
        await client.wait(uri, 1)
        texts[name], rngs[name], latencies[name] = source, random.Random(seed), []
    for version in range(2, edits + 3):  # the first edit is a warm-up and not reported
        for name, client in clients.items():  # the same edit for every variant, one after the other
            text = texts[name]
            lines_now = text.split("\n")
            if real is not None:
                row = rngs[name].choice(function_rows)
                at, inserted = T.Position(row, len(lines_now[row])), " "
                lines_now[row] += " "
            else:
                row = rngs[name].choice(statement_starts(text))
                at, inserted = T.Position(row, 0), f"# edit {version}\n"
                lines_now.insert(row, inserted.rstrip("\n"))
            texts[name] = "\n".join(lines_now)
            sent = time.perf_counter()
            client.lsp.text_document_did_change(T.DidChangeTextDocumentParams(
                T.VersionedTextDocumentIdentifier(uri=uri, version=version),
                [T.TextDocumentContentChangePartial(range=T.Range(at, at), text=inserted)]))
            arrived = await client.wait(uri, version)
            latencies[name].append(arrived - sent)
    out = {}
    for name, client in clients.items():
        await client.stop()
        timed = latencies[name][1:]
        out[name] = {"file": real.name if real is not None else None, "lines": source.count("\n"), "edits": len(timed),
                     "parse_s": parse_s, "check_s": check_s,
                     "median_s": statistics.median(timed), "p95_s": percentile(timed, 0.95)}
    return out


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def main_async(args: argparse.Namespace) -> dict:
    import tempfile

    variants: Dict[str, Dict[str, str]] = {}
    for spec in args.variant or ["server:"]:
        name, _, assignments = spec.partition(":")
        variants[name] = dict(a.split("=", 1) for a in assignments.split(",") if a)
    with tempfile.TemporaryDirectory(prefix="perflsp-bench-") as tmp:
        root = Path(tmp)
        # No config of this repository applies; `--preview` turns every rule on.
        (root / "pyproject.toml").write_text("[tool.perflsp]\n" + ("preview = true\n" if args.preview else ""))
        load_before = os.getloadavg()
        from_init, from_spawn, first_cpu = await first_diagnostics(root, args.first_runs, args.first_lines)
        sizes = []
        runs = [(0, edits, path) for path, edits in zip(args.files, args.edits)] if args.files else [
            (lines, edits, None) for lines, edits in zip(args.sizes, args.edits)]
        for lines, edits, real in runs:
            sizes.append(await edit_latency(root, lines, edits, args.debounce_ms, args.seed, variants, real, args.preview))
            print(f"  {real or lines} done", file=sys.stderr)
        load_after = os.getloadavg()
    return {"python": platform.python_version(), "machine": platform.machine(), "debounce_ms": args.debounce_ms,
            "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": load_after,
            "first_lines": args.first_lines, "variants": variants,
            "first_diagnostics_from_initialize_s": statistics.median(from_init),
            "first_diagnostics_from_spawn_s": statistics.median(from_spawn),
            "first_diagnostics_cpu_s": statistics.median(first_cpu), "sizes": sizes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 2000, 10000])
    parser.add_argument("--edits", type=int, nargs="+", default=[30, 20, 10], help="timed edits per size")
    parser.add_argument("--debounce-ms", type=int, default=150, help="the server's debounce (default: its default)")
    parser.add_argument("--first-runs", type=int, default=5, help="server starts timed for the first diagnostics")
    parser.add_argument("--first-lines", type=int, default=0,
                        help="lines of the file timed for the first diagnostics (0: examples/train_loop.py)")
    parser.add_argument("--variant", action="append", metavar="NAME:VAR=VALUE,...",
                        help="a server environment to compare (repeatable; they take turns edit by edit)")
    parser.add_argument("--files", type=Path, nargs="+", help="real files to edit (one-space edits inside functions)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preview", action="store_true", help="run every rule (the preview tier too), as `preview = true`")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if len(args.edits) != len(args.files or args.sizes):
        parser.error("--edits needs one count per size (or per file)")
    result = asyncio.run(main_async(args))
    print(f"perflsp serve latency (Python {result['python']}, {result['cpus']} CPUs, debounce {result['debounce_ms']} ms, "
          f"medians; wall clock; load average {result['loadavg_before'][0]:.2f} before, "
          f"{result['loadavg_after'][0]:.2f} after)\n")
    print(f"first diagnostics of a {'%d-line' % result['first_lines'] if result['first_lines'] else 'small'} file: "
          f"{result['first_diagnostics_from_initialize_s']:.2f} s after the "
          f"`initialize` answer and `didOpen`, {result['first_diagnostics_from_spawn_s']:.2f} s after the process "
          f"started, {result['first_diagnostics_cpu_s']:.2f} s of the server's CPU time\n")
    print("| variant | file | lines | edits | bare parse | engine check | didChange→diagnostics median | p95 | "
          "median / parse | p95 / parse |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for per_variant in result["sizes"]:
        for name, s in per_variant.items():
            print(f"| {name} | {s['file'] or 'generated'} | {s['lines']} | {s['edits']} | {s['parse_s'] * 1000:.0f} ms | "
                  f"{s['check_s'] * 1000:.0f} ms | {s['median_s'] * 1000:.0f} ms | {s['p95_s'] * 1000:.0f} ms | "
                  f"{s['median_s'] / s['parse_s']:.2f} | {s['p95_s'] / s['parse_s']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
