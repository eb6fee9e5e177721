"""The torch.compile rules' premises (PFL7xx), re-checked against the installed torch.

Every example of those rules is a small runnable module: each compiled function in it is traced
with `torch._dynamo.explain`. An invalid example must break the graph on the very line the rule
flags; a valid one must break nothing. A torch whose tracing changes fails here first.
"""
from __future__ import annotations

import pytest

from perflsp.config import Settings
from perflsp.rules.engine import check_source
from perflsp.rules.registry import all_rules

torch = pytest.importorskip("torch")

COMPILE_RULES = [rule for rule in all_rules() if rule.code.startswith("PFL7")]


def _break_lines(source: str):
    """The lines where torch breaks the graph of each compiled function of `source` (None: it
    compiles nothing that can be called here)."""
    import torch._dynamo

    saved = torch._dynamo.config.get_config_copy()  # an example may set config (capture_scalar_outputs)
    try:
        namespace = {"__name__": "perflsp_premise_example"}
        exec(compile(source, "example.py", "exec"), namespace)
        targets = [value._orig_mod if isinstance(value, torch.nn.Module) and hasattr(value, "_orig_mod")
                   else value._torchdynamo_orig_callable for value in namespace.values()
                   if hasattr(value, "_orig_mod") or hasattr(value, "_torchdynamo_orig_callable")]
        lines = set()
        for target in targets:
            torch._dynamo.reset()
            out = torch._dynamo.explain(target)(torch.randn(8, 8))
            lines |= {r.user_stack[-1].lineno for r in out.break_reasons if r.user_stack}
    finally:
        torch._dynamo.config.load_config(saved)
        torch._dynamo.reset()
    return lines if targets else None


def _cases(kind):
    for rule in COMPILE_RULES:
        for i, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example if kind == "valid" else example.code, id=f"{rule.code}-{kind}-{i}")


@pytest.mark.parametrize("rule, source", list(_cases("invalid")))
def test_each_flagged_line_is_where_torch_breaks_the_graph(rule, source):
    flagged = {f.start.row for f in check_source(source, "example.py", Settings(preview=True)) if f.code == rule.code}
    breaks = _break_lines(source)
    assert flagged and breaks is not None and flagged <= breaks, (flagged, breaks)


@pytest.mark.parametrize("rule, source", list(_cases("valid")))
def test_compiled_code_the_rules_leave_alone_does_not_break(rule, source):
    assert _break_lines(source) in (None, set())


def test_the_group_exists_and_is_in_preview():
    assert COMPILE_RULES and all(rule.preview for rule in COMPILE_RULES)
