"""Typing in real files over a real client connection: every version gets its diagnostics, with
its version, and they are those a whole analysis of the same text gives, though the server
re-parses only the statement each edit changed; a half-typed line keeps the last good findings."""
from __future__ import annotations

import ast
import importlib.util
import random
from pathlib import Path
from typing import List, Tuple

import pytest

from perflsp.config import Settings
from perflsp.rules.engine import check_source
from perflsp.rules.project import single_file_facts

from .conftest import NEOVIM

ROOT = Path(__file__).resolve().parents[2]
PREVIEW = {"select": ["PFL"], "preview": True, "logLevel": "debug"}  # every rule: many findings to compare


def _real_files() -> List[Path]:
    files = [ROOT / "examples" / "train_loop.py"]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        batchnorm = Path(spec.origin).parent / "nn" / "modules" / "batchnorm.py"
        files += [batchnorm] if batchnorm.is_file() else []
    return files


def _expected(text: str, name: str) -> List[Tuple]:
    """A whole analysis of `text` by the engine, as the server judges a file alone in its folder."""
    findings = check_source(text, name, Settings(preview=True), facts=single_file_facts(text, name))
    return sorted((f.code, f.start.row - 1, f.start.column, f.end.row - 1, f.end.column, f.message) for f in findings)


def _shown(diagnostics) -> List[Tuple]:
    return sorted((d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character,
                   d.message) for d in diagnostics)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _rows_in_functions(text: str) -> List[int]:
    lines = text.split("\n")
    return [i for i, line in enumerate(lines) if line.startswith("        ") and "#" not in line
            and not line.strip().startswith(('"', "'")) and line.rstrip().endswith((")", "]"))]


@pytest.mark.parametrize("real", _real_files(), ids=lambda p: p.name)
async def test_typing_in_a_real_file_gives_what_a_whole_analysis_gives(start, real):
    session = await start(NEOVIM, init_options={"settings": PREVIEW})
    text = real.read_text(encoding="utf-8")
    uri = session.open(real.name, text)
    assert _shown(await session.diagnostics(uri, version=1, timeout=60)) == _expected(text, real.name)
    rng = random.Random(12)
    versions = [1]
    for _ in range(12):
        while True:  # an edit that keeps the file parsing (half-typed lines come below)
            lines = text.split("\n")
            row = rng.choice(_rows_in_functions(text))
            column = len(lines[row].rstrip())
            edit = rng.choice([" ", ".item()", "  # note", ".float()"])
            lines[row] = lines[row][:column] + edit + lines[row][column:]
            if _parses("\n".join(lines)):
                break
        version = session.edit(uri, (row, column), (row, column), edit)
        text = "\n".join(lines)
        versions.append(version)
        assert _shown(await session.diagnostics(uri, version=version, timeout=60)) == _expected(text, real.name)
    # A half-typed line: no analysis of its own, the last good findings kept; then completed.
    row = rng.choice(_rows_in_functions(text))
    lines = text.split("\n")
    broken = session.edit(uri, (row, len(lines[row])), (row, len(lines[row])), " + (")
    diagnostics = await session.diagnostics(uri, version=broken, timeout=60)
    assert "PFL000" in {d.code for d in diagnostics}
    kept = {(d.code, d.range.start.line) for d in diagnostics if d.code != "PFL000"}
    assert kept == {(c, r) for c, r, _, end, *_ in _expected(text, real.name) if not r <= row <= end}
    fixed = session.edit(uri, (row, len(lines[row]) + 4), (row, len(lines[row]) + 4), "1)")
    lines[row] += " + (1)"
    text = "\n".join(lines)
    assert _shown(await session.diagnostics(uri, version=fixed, timeout=60)) == _expected(text, real.name)
    versions += [broken, fixed]
    assert [p.version for p in session.published(uri)] == versions  # every version, each with its own
    assert "(the statements edited parsed again)" in session.log_text()


async def test_trees_past_the_memory_cap_are_dropped(start):
    # A cap of 1 kB: no tree of these files stays after its analysis, so every edit parses the
    # whole file, and the diagnostics are the same all the same.
    text = (ROOT / "examples" / "train_loop.py").read_text(encoding="utf-8")
    for env, incremental in (({"PERFLSP_MAX_TREE_MB": "0.001"}, False), ({}, True)):
        session = await start(NEOVIM, init_options={"settings": PREVIEW}, env=env)
        uri = session.open("train_loop.py", text)
        await session.diagnostics(uri, version=1, timeout=60)
        row = _rows_in_functions(text)[0]
        column = len(text.split("\n")[row])
        version = session.edit(uri, (row, column), (row, column), " ")
        lines = text.split("\n")
        lines[row] += " "
        shown = _shown(await session.diagnostics(uri, version=version, timeout=60))
        assert shown == _expected("\n".join(lines), "train_loop.py")
        assert ("(the statements edited parsed again)" in session.log_text()) is incremental
