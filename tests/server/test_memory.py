"""What an open file costs the server's memory (VmRSS of the real server process, from /proc):
about the figure docs/editors.md gives, and no more with every edit that spans statements."""
from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from tests.server.conftest import NEOVIM

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's /proc"),
              pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")]


def torch_code(chars: int) -> str:
    """Real PyTorch code: torch.nn's own modules, whole files, until `chars` characters."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch's source is the real code measured")
    parts, count = [], 0
    for path in sorted((Path(spec.origin).parent / "nn" / "modules").glob("*.py")):
        text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True)
                       if not line.startswith("from __future__"))  # only a file's first lines may say it
        parts.append(text)
        count += len(text)
        if count >= chars:
            break
    return "".join(parts)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def idle(pid: int) -> None:
    """Until the server stops using the CPU: it collects and frees memory after publishing."""
    before = cpu_ticks(pid)
    while True:
        await asyncio.sleep(0.5)
        now = cpu_ticks(pid)
        if now == before:
            return
        before = now


async def started(start):
    """A server past start-up (its first analysis turns the collector on), idle, and its pid."""
    session = await start(NEOVIM)
    pid = session.client._server.pid  # type: ignore[union-attr]
    first = session.open("first.py", "import torch\n")
    await session.diagnostics(first, version=1)
    await idle(pid)
    return session, pid


def whole_change(session, uri: str, text: str) -> int:
    """An edit at both ends of the file: no single statement holds it, the whole text is parsed."""
    mark = f"# version {session.versions[uri] + 1}\n"
    return session.replace(uri, mark + text + mark)


async def test_an_open_file_costs_the_server_about_50_bytes_per_character(start):
    # glibc kept the C heap libcst's parser freed: ~220 bytes per character stayed in the server.
    session, pid = await started(start)
    before = rss_bytes(pid)
    source = torch_code(150_000)
    uri = session.open("big.py", source)
    await session.diagnostics(uri, version=1, timeout=60)
    await idle(pid)
    per_char = (rss_bytes(pid) - before) / len(source)
    assert per_char < 100, f"{per_char:.0f} bytes per character (docs/editors.md says about 50)"


async def test_edits_that_span_statements_do_not_pile_up_old_trees(start):
    # Each whole parse let the previous tree and walk go, frozen (gc.freeze) for up to 100 analyses:
    # +3.5 MB per version of this 5,000-line file.
    session, pid = await started(start)
    source = torch_code(150_000)
    uri = session.open("big.py", source)
    await session.diagnostics(uri, version=1, timeout=60)
    for _ in range(4):
        await session.diagnostics(uri, version=whole_change(session, uri, source), timeout=60)
    await idle(pid)
    settled = rss_bytes(pid)
    for _ in range(4):
        await session.diagnostics(uri, version=whole_change(session, uri, source), timeout=60)
    await idle(pid)
    assert rss_bytes(pid) - settled < 6 * 2**20, f"{(rss_bytes(pid) - settled) / 2**20:.1f} MiB more after 4 edits"
