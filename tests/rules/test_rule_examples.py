"""Every rule's embedded examples are its tests (Fixit's habit): one test enumerates them all."""
from __future__ import annotations

import pytest

from perflsp.config import Settings
from perflsp.rules.engine import check_source
from perflsp.rules.fixes import apply_edits
from perflsp.rules.registry import all_rules

SETTINGS = Settings(preview=True)  # preview rules keep examples too


def _cases(kind):
    for rule in all_rules():
        if rule.measured:  # examples of a run, not of a text: tests/cli/test_record.py records them
            continue
        for i, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{i}")


def _own(rule, source):
    return [f for f in check_source(source, "example.py", SETTINGS) if f.code == rule.code]


def _text(source, finding):
    lines = source.splitlines(keepends=True)
    start = sum(len(l) for l in lines[: finding.start.row - 1]) + finding.start.column
    end = sum(len(l) for l in lines[: finding.end.row - 1]) + finding.end.column
    return source[start:end]


@pytest.mark.parametrize("rule, source", list(_cases("valid")))
def test_valid_examples_stay_clean(rule, source):
    assert _own(rule, source) == []


@pytest.mark.parametrize("rule, example", list(_cases("invalid")))
def test_invalid_examples_are_flagged(rule, example):
    findings = _own(rule, example.code)
    assert findings, f"{rule.code} did not flag:\n{example.code}"
    if example.flagged is not None:
        assert _text(example.code, findings[0]) == example.flagged
    for finding in findings:
        assert "{where}" not in finding.message
    if example.fixed is not None:
        fixable = [f for f in findings if f.fix is not None]
        assert fixable, f"{rule.code} offered no fix for:\n{example.code}"
        assert apply_edits(example.code, fixable[0].fix.edits) == example.fixed


def test_every_rule_is_fully_described():
    for rule in all_rules():
        assert rule.code.startswith("PFL") and len(rule.code) == 6
        assert rule.name == rule.name.lower() and " " not in rule.name
        assert rule.summary and rule.why and rule.how_to_fix
        assert rule.scope in ("hot", "any", "setup")
        assert rule.valid and rule.invalid, f"{rule.code} needs valid and invalid examples"
        has_fix_example = any(e.fixed is not None for e in rule.invalid)
        assert (rule.fix_safety is not None) == has_fix_example, f"{rule.code}: a fix needs an example with `fixed`"
