"""The `Rule` base class: a rule is a self-describing module (Fixit's habit).

A rule declares its code, kebab-case name, one-line summary, why the pattern is slow, how to fix
it, where it applies (`scope`), its fix safety, its options, and examples that must be flagged
(`invalid`, with the flagged text and the fixed code where it has a fix) and must stay clean
(`valid`). The example test and the docs pages are generated from these declarations.

A rule is stable (on by default) or, as in Ruff, in preview: a preview rule runs only in preview
mode (`preview = true`, `perflsp check --preview`). A stable "hot" rule may be stable only in some
kinds of per-step code (`stable_contexts`) and keep the rest in preview. Its `tier_reason` says why
it is in its tier: the evidence from real code judged by hand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, FrozenSet, Iterator, Optional, Sequence, Tuple, Union

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.walk import Frame


@dataclass(frozen=True)
class Invalid:
    """An example the rule must flag: `flagged` is the exact source text of the first finding's
    range; `fixed` is the code after applying the rule's fix (unsafe fixes included)."""

    code: str
    flagged: Optional[str] = None
    fixed: Optional[str] = None


@dataclass(frozen=True)
class Option:
    default: Any
    description: str

    def check(self, value: Any) -> bool:
        kind = type(self.default)
        if kind is bool:
            return isinstance(value, bool)
        if kind in (int, float):
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        return isinstance(value, kind)


@dataclass(frozen=True)
class FixSpec:
    """Replace each old node with new code (a node or text); `safe` or `unsafe` as Ruff means it."""

    message: str
    applicability: str
    replacements: Tuple[Tuple[cst.CSTNode, Union[cst.CSTNode, str]], ...]


@dataclass(frozen=True)
class Report:
    node: cst.CSTNode
    frame: Frame
    message: str  # "{where}" is replaced by why the code is hot ("inside `for b in loader` at line 4")
    fix: Optional[FixSpec] = None
    on_accelerator: bool = False  # the code shows the tensor lives on the GPU (see `CALL_CHAINS`)


# The option of a "hot" rule that, by default, reports code reached through a call chain or in a
# loop nested in per-step code only when the tensor is known to be on the accelerator. For syncs,
# on four samples of unseen real code judged by hand, findings directly in a step loop or a
# `forward` were right about 3 times in 4, those in functions called from a step loop 9 times in
# 31: there the data was often already on the host (metrics on a driver process, metadata), which
# no file shows.
CALL_CHAINS = "call-chains"
CALL_CHAINS_OPTION = Option(False, "in preview mode, also report per-step code reached through calls or in a "
                                   "loop nested in it when nothing shows the tensor is on the GPU")


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    why: ClassVar[str]
    how_to_fix: ClassVar[str]
    scope: ClassVar[str] = "hot"  # "hot": per-step code only; "any": unless known cold; "setup": all but tests
    fix_safety: ClassVar[Optional[str]] = None  # None, "safe", "unsafe", or "safe/unsafe" (depends on the case)
    preview: ClassVar[bool] = False
    # The kinds of per-step code (`perflsp.rules.hotness.CONTEXTS`) where a stable rule's findings
    # are on by default; elsewhere they are preview behaviour, as Ruff extends stable rules in
    # preview mode. Empty: everywhere the rule reports. Each context is stable only when its
    # findings were right at least 4 times in 5 on unseen judged code.
    stable_contexts: ClassVar[FrozenSet[str]] = frozenset()
    tier_reason: ClassVar[str] = ""  # why the rule is stable, or not yet on by default: the evidence
    # Reported from a recorded run (`perflsp record`, `perflsp.rules.evidence`), never from the text
    # alone: its examples are programs, recorded by the tests rather than checked as text.
    measured: ClassVar[bool] = False
    options: ClassVar[Dict[str, Option]] = {}
    valid: ClassVar[Sequence[str]] = ()
    invalid: ClassVar[Sequence[Invalid]] = ()
    # Code that runs the page's two examples (`docs.example_pair`): it follows each of them in one
    # namespace where `device` is the GPU, and calls what they define with inputs on it.
    # tests/rules/test_example_pages.py runs both on the CPU, checking where each tensor lives.
    example_run: ClassVar[str] = ""

    def __init__(self, options: Optional[Dict[str, Any]] = None):
        values = {name: opt.default for name, opt in self.options.items()}
        values.update(options or {})
        self.opts = values

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        raise NotImplementedError

    @property
    def needs_direct_evidence(self) -> bool:
        """See `CALL_CHAINS`."""
        return self.opts.get(CALL_CHAINS) is False

    def report(self, node: cst.CSTNode, frame: Frame, message: str, fix: Optional[FixSpec] = None,
               on_accelerator: bool = False) -> Report:
        return Report(node, frame, message, fix, on_accelerator)

    @staticmethod
    def replace(message: str, applicability: str, *pairs: Tuple[cst.CSTNode, Union[cst.CSTNode, str]]) -> FixSpec:
        return FixSpec(message, applicability, tuple(pairs))

