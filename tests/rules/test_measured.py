"""Reading `.perflsp/hot.json` (perflsp.rules.measured): semantics, and never an exception."""
from __future__ import annotations

import json
import logging

import pytest

from perflsp.rules.measured import load_measured

GOOD = {
    "version": 1, "steps": 40, "step_source": "optimizer.step", "command": "python train.py",
    "measured_at": "2026-12-01T12:00:00Z", "recorder": "sys.monitoring",
    "functions": [
        {"file": "model.py", "qualname": "Net.forward", "first_line": 9, "calls": 40, "steps": 40},
        {"file": "model.py", "qualname": "Net.__init__", "first_line": 5, "calls": 1, "steps": 0},
        {"file": "pkg/loss.py", "qualname": "make.<locals>.inner", "first_line": 3, "calls": 45, "steps": 20},
        {"file": "train.py", "qualname": "log", "first_line": 12, "calls": 4, "steps": 4},
    ],
}


def _write(root, data):
    (root / ".perflsp").mkdir(exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    (root / ".perflsp" / "hot.json").write_text(text)


def test_hot_cold_and_unknown(tmp_path):
    _write(tmp_path, GOOD)
    measured = load_measured(tmp_path)
    assert (measured.steps, measured.step_source, measured.command) == (40, "optimizer.step", "python train.py")
    assert measured.counts("model.py", "Net.forward") == (40, 40)
    assert measured.is_hot("model.py", "Net.forward") is True
    assert measured.reason("model.py", "Net.forward") == "measured: 40 calls in 40 steps"
    # Half the steps is per-step enough; a nested function may be named with or without <locals>.
    assert measured.is_hot("pkg/loss.py", "make.inner") is True
    assert measured.reason("./pkg/loss.py", "make.<locals>.inner") == "measured: 45 calls, in 20 of 40 steps"
    # Called, but not per step: one-off setup and periodic logging are cold.
    assert measured.is_hot("model.py", "Net.__init__") is False and measured.reason("model.py", "Net.__init__") is None
    assert measured.is_hot("train.py", "log") is False
    # Never reached: static inference decides.
    assert measured.is_hot("model.py", "Net.predict") is None and measured.counts("other.py", "f") is None


def test_too_few_steps_judge_nothing(tmp_path):
    _write(tmp_path, dict(GOOD, steps=2, functions=[
        {"file": "a.py", "qualname": "f", "first_line": 1, "calls": 2, "steps": 2}]))
    measured = load_measured(tmp_path)
    assert measured.counts("a.py", "f") == (2, 2) and measured.is_hot("a.py", "f") is None


def test_no_file_is_none_without_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="perflsp"):
        assert load_measured(tmp_path) is None
    assert caplog.records == []


@pytest.mark.parametrize("data, complaint", [
    ("{not json", "ignoring"),
    ([1, 2], "not a JSON object"),
    (dict(GOOD, version=2), "version 2"),
    ({k: v for k, v in GOOD.items() if k != "version"}, "version None"),
    (dict(GOOD, steps=-1), "`steps`"),
    (dict(GOOD, steps="40"), "`steps`"),
    (dict(GOOD, step_source="epochs"), "step_source"),
    (dict(GOOD, functions={"f": 1}), "not a list"),
    (dict(GOOD, functions=[{"qualname": "f", "calls": 1, "steps": 1}]), "needs a `file`"),
    (dict(GOOD, functions=[{"file": "a.py", "qualname": "f", "calls": True, "steps": 1}]), "`calls`"),
    (dict(GOOD, functions=[{"file": "a.py", "qualname": "f", "calls": 1, "steps": 41}]), "ran in 41 steps of 40"),
])
def test_a_bad_file_is_none_and_a_warning(tmp_path, caplog, data, complaint):
    _write(tmp_path, data)
    with caplog.at_level(logging.WARNING, logger="perflsp"):
        assert load_measured(tmp_path) is None
    [record] = caplog.records
    assert complaint in record.getMessage() and "hot.json" in record.getMessage()


def test_an_unreadable_file_is_none(tmp_path, caplog):
    (tmp_path / ".perflsp" / "hot.json").mkdir(parents=True)  # a folder where the file should be
    with caplog.at_level(logging.WARNING, logger="perflsp"):
        assert load_measured(tmp_path) is None
    assert caplog.records
