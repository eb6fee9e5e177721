"""Incremental analysis against whole analyses, edit by edit, on real files: thousands of edits.

The CI test (tests/rules/test_incremental.py) runs hundreds; this runs as many as asked. Each file
gets `--edits` random edits in a row (a character typed or deleted, a line pasted from elsewhere
in the file, a new line, a half-typed call; an edit that breaks the file is followed by one made
to its last version that parsed, as when a line is completed), and every version is analysed
twice: incrementally (the file's `Reparser`, remembered summaries, the rules' candidates of the
statements whose reads still hold) and whole (`libcst.parse_module`, `summarize_whole`, every
statement checked). Findings must be equal, and for the versions that parse the trees and
summaries too; the script prints the versions compared, how many parsed, how many of those were
parsed one statement only, how many top-level statements kept their candidates, how many of the
statements holding findings moved their positions instead of generating their code again, the
mismatches (0 expected) and the CPU time of both paths.

    python bench/incremental_check.py FILE ... [--edits 500] [--seed 0]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import libcst as cst

from perflsp.config import Settings
from perflsp.rules.engine import check_source
from perflsp.rules.project import Project, single_file_facts
from perflsp.rules.reparse import Reparser
from perflsp.rules.summary import summarize_whole

SETTINGS = Settings(preview=True, report_cold=("PFL",))  # every rule everywhere: the most findings
PIECES = [" ", "x", "(", ")", ":", "\n", "\n    ", "#", ".item()", "        y = x.cpu()\n", "def f(", "'",
          "        loss.backward()\n"]
NAME = "m.py"


def edited(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text) + 1)
    kind = rng.random()
    if kind < 0.45:
        return text[:at] + rng.choice(PIECES) + text[at:]
    if kind < 0.8:
        return text[:at] + text[at + rng.randint(1, 20):]
    lines = text.splitlines(keepends=True)
    row = text.count("\n", 0, at)
    return "".join(lines[:row] + [rng.choice(lines)] + lines[row:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--edits", type=int, default=500, help="edits per file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    total = parsed = spliced = mismatches = statements = reused = located = moved = 0
    incremental_s = whole_s = 0.0
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        rng = random.Random(args.seed)
        reparser = Reparser()
        check_source(text, NAME, SETTINGS, facts=single_file_facts(text, NAME), reparser=reparser)
        good = text
        for _ in range(args.edits):
            text = edited(text, rng)
            started = time.process_time()
            summary, _ = summarize_whole(text, "m", False, NAME)
            want = check_source(text, NAME, SETTINGS, facts=Project([(NAME, summary)]).facts("m", summary))
            whole_s += time.process_time() - started
            started = time.process_time()
            facts = single_file_facts(text, NAME)
            reparser.positions.moved = 0  # a version with no candidates locates nothing
            got = check_source(text, NAME, SETTINGS, facts=facts, reparser=reparser)
            incremental_s += time.process_time() - started
            total += 1
            try:
                tree = cst.parse_module(text)
            except (cst.ParserSyntaxError, SyntaxError):
                tree = None
            if tree is not None:
                parsed += 1
                spliced += reparser.spliced
                statements += len(tree.body)
                reused += reparser.reuse.reused
                located += len(reparser.positions.statements)
                moved += reparser.positions.moved
            if got != want or facts["summary"] != summary or (tree is not None and not tree.deep_equals(reparser.module)):
                mismatches += 1
                print(f"MISMATCH: {path} after edit {total}", file=sys.stderr)
            good, text = (text, text) if tree is not None else (good, good)
        print(f"{path}: done", file=sys.stderr)
    print(f"{total} versions compared, {parsed} parsed, {spliced} of those parsed one statement only, "
          f"{reused} of their {statements} top-level statements kept their candidates, {moved} of the "
          f"{located} that held candidates moved their positions, {mismatches} mismatches; "
          f"CPU: incremental {incremental_s:.1f} s, whole {whole_s:.1f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
