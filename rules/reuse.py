"""The rules' candidates, one top-level statement at a time, and keeping a statement's candidates
while nothing they depend on changed (the language server's open files, `Reparser.reuse`).

The engine asks every rule about one top-level statement at a time (`ModuleContext.checking`):
a rule then iterates that statement's nodes, and its memos start empty, so that what it finds
there is the same whichever statements were checked before (the inference cuts a cycle of
bindings, `data = data.to(device)` at the module level, where it meets it again, so its answers
depended on where it started). `perflsp check` checks every
statement; an open file's next version checks the statements an edit changed and those whose
candidates (the `(rule, Report)` pairs, before hot classification, precedence and suppression,
which run after, on every version) may have changed, and takes over the others'.

What a statement's candidates depend on, beyond its own nodes (the audit of the rules and of
`context`, `devices`, `dtypes`, `tensor_hints`; each is either keyed below or recorded while the
statement is checked, `context.Reads`):

- The rules that run, the file's path, and the module's imports (`walk.imports`, merged over
  every statement, function-level imports included: `qualname`, `builtin` and the rules'
  spellings of `torch` read them everywhere): keyed; any change checks every statement again.
  The settings reach the rules only through the rule objects (their options), and the rules do
  not read `ctx.settings` or the hot map otherwise.
- The bindings of module-level names (`bindings_of` falling back to the module's scope, which
  also holds the names bound in class bodies; `_is_module_class` for base classes): recorded
  per name as their `signature`. A value bound elsewhere is analysed in the frames of its own
  statement (kinds, devices, dtypes, `value_before` at the module level), all reached through
  that binding; the statement walked again makes new bindings, so the read no longer holds. A
  `def` is read for what it binds: a function, or a class through its bases.
- Whether a name is bound anywhere in the module, in any scope (`builtin`): recorded per name.
- Facts about the whole module (`ModuleContext.fact`, worked out apart from any statement and
  compared by value; nodes and frames in a value compare by identity, so that the statements
  they come from are as good as read): whether `torch.compile` compiles a function and how (`is_compiled`,
  `compiled_by`: PFL501, PFL701, PFL702), whether the per-step model says a function runs per
  step (`runs_per_step`, from the hot map: PFL501), the values stored under a constant key
  (`state["step"] = ...`), the names passed as `collate_fn=`, `torch.set_default_device` and
  `torch.set_default_dtype` calls (devices and dtypes), the local names converted at the module
  level (PFL201), the first copy to the GPU (PFL602), whether the module trains (PFL604) or only
  evaluates and where it loads a checkpoint (PFL606), `capture_scalar_outputs` (PFL701).
- What runs across top-level statements: syncs outside functions and classes back to back
  (PFL101: `back_to_back` and `waits_anyway` follow the module's own block there) and the
  eval/train state of the module-level code (PFL605) are facts too, judged for the whole module
  at once; within functions and classes they stay inside the statement.
- The top-level statements themselves (`ModuleContext.top_level`, `whole_module`: `value_before`
  of a module-level name, `_blocks_around` at the module level, PFL301's reads of a module-level
  copy, PFL606's assignment just before): such a statement is checked again on every version.

Across statements, a rule's report of one node (a layer bound at the module level that two
`nn.Sequential` use, PFL606; a list a module-level name holds, PFL107) is kept once, from the
first statement. A rule that raises costs its candidates in the whole file, as before, and the
statement where it raised is checked again next time. `tests/rules/test_incremental.py` and
`bench/incremental_check.py` compare the findings of every version with a whole check.
"""
from __future__ import annotations

import logging
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import libcst as cst

from perflsp.rules.context import ModuleContext, Reads, signature
from perflsp.rules.rule import Report, Rule
from perflsp.rules.walk import Walk

log = logging.getLogger("perflsp")

Candidate = Tuple[Rule, Report]


class _Entry(NamedTuple):
    candidates: List[Candidate]
    reads: Reads


class Reuse:
    """An open file's candidates of its last check, per top-level statement."""

    def __init__(self) -> None:
        self.key: Optional[Tuple[object, ...]] = None
        self.entries: Dict[int, Tuple[cst.CSTNode, _Entry]] = {}  # id of a statement -> (it, its entry)
        self.reused = 0  # statements the last check took over (benchmarks and tests read it)


def candidates(ctx: ModuleContext, rules: Sequence[Rule], reuse: Optional[Reuse] = None) -> List[Candidate]:
    """What `rules` report in the module, statement by statement in source order (within one, in
    the rules' order), taking over from `reuse` what still holds, and leaving there this check's."""
    key = (tuple(rules), ctx.path, ctx.walk.imports)
    kept: Dict[int, Tuple[cst.CSTNode, _Entry]] = {}
    if reuse is not None:
        # Taken out first: a check that raises must leave nothing that the next one would trust.
        kept, reuse.entries = (reuse.entries if reuse.key == key else {}), {}
    changed = _changed_names(ctx.walk)
    entries: Dict[int, Tuple[cst.CSTNode, _Entry]] = {}
    failed: Set[Rule] = set()
    out: List[Candidate] = []
    first_from: Dict[Tuple[Rule, cst.CSTNode], int] = {}  # a rule's report of a node -> the statement it came from
    reused = 0
    for index, stmt in enumerate(ctx.module.body):
        found = kept.get(id(stmt))
        if found is not None and found[0] is stmt and _holds(found[1].reads, ctx, changed):
            entry, complete = found[1], True
            reused += 1
        else:
            entry, complete = _check(ctx, stmt, rules, failed)
        if complete and not entry.reads.top_level:
            entries[id(stmt)] = (stmt, entry)
        for rule, report in entry.candidates:
            if first_from.setdefault((rule, report.node), index) == index:
                out.append((rule, report))
    if reuse is not None:
        reuse.key, reuse.entries, reuse.reused = key, entries, reused
    return [c for c in out if c[0] not in failed]


def _check(ctx: ModuleContext, stmt: cst.CSTNode, rules: Sequence[Rule], failed: Set[Rule]) -> Tuple[_Entry, bool]:
    """Every rule's reports in `stmt`, and whether no rule raised there (a rule that raises is
    added to `failed`: a rule bug costs that rule on this file, never the others)."""
    found: List[Candidate] = []
    complete = True
    with ctx.checking(stmt) as reads:
        for rule in rules:
            try:
                reports = list(rule.check(ctx))
            except RecursionError:
                raise  # the file is too deep for every rule: one PFL000, not a traceback per rule
            except Exception:
                complete = False
                if rule not in failed:
                    failed.add(rule)
                    log.exception("perflsp: rule %s failed on %s; its findings for this file are skipped", rule.code, ctx.path)
                continue
            found.extend((rule, report) for report in reports)
    return _Entry(found, reads), complete


def _changed_names(walk: Walk) -> Tuple[Set[str], Set[str]]:
    """The names bound at the module level, and the names bound anywhere, in the statements that
    came or went since the walk before: only reads of those can have changed."""
    parts = walk.added + walk.removed
    return ({name for part in parts for name in part.module_scope},
            {name for part in parts for name in part.names})


def _holds(reads: Reads, ctx: ModuleContext, changed: Tuple[Set[str], Set[str]]) -> bool:
    """What a statement's check read outside it reads the same now."""
    module_level, bound = changed
    if any(signature(ctx.walk.module_scope.get(name, [])) != reads.scope[name] for name in module_level.intersection(reads.scope)):
        return False
    if any((name in ctx.walk.names) != reads.bound[name] for name in bound.intersection(reads.bound)):
        return False
    try:
        return all(ctx.fact(compute, *args) == value for (compute, args), value in reads.facts.items())
    except Exception:  # a fact that raises now: checked again, the rule that asks for it fails there
        return False
