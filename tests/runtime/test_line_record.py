"""The line recorder of `perflsp record`: executions per step of the wanted lines, and which
wanted line is running when other code (a torch call) runs, under both of its hooks."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from perflsp.runtime.line_record import LineRecorder

TARGET = Path(__file__).parent / "targets" / "lines" / "stepper.py"
HOOKS = [pytest.param(False, id="sys.settrace"),
         pytest.param(True, id="sys.monitoring", marks=pytest.mark.skipif(
             not hasattr(sys, "monitoring"), reason="sys.monitoring needs Python 3.12+"))]


def wanted_lines():
    rows = {}
    for row, text in enumerate(TARGET.read_text().splitlines(), 1):
        if "# wanted: " in text:
            rows[text.split("# wanted: ")[1]] = row
    return rows


@pytest.fixture
def stepper():
    spec = importlib.util.spec_from_file_location("lines_stepper", TARGET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(stepper, monitoring, steps):
    rows = wanted_lines()
    recorder = LineRecorder([("stepper.py", row) for row in rows.values()],
                            lambda path: "stepper.py" if Path(path) == TARGET else None, monitoring=monitoring)
    stepper.recorder = recorder
    recorder.start()
    try:
        stepper.step()  # setup: not counted as a step
        recorder.counts.end_setup()
        for _ in range(steps):
            stepper.step()
            recorder.counts.end_step()
    finally:
        recorder.stop()
    return recorder, rows


@pytest.mark.parametrize("monitoring", HOOKS)
def test_lines_are_counted_per_step_through_generators_and_exceptions(stepper, monitoring):
    recorder, rows = record(stepper, monitoring, steps=3)
    assert recorder.method == ("sys.monitoring" if monitoring else "sys.settrace")
    runs = {name: recorder.counts.runs.get(("stepper.py", row), 0) for name, row in rows.items()}
    # `sum` consumes 3 yields, the abandoned generator 1: 4 per step.
    assert runs == {"yield": 12, "raise": 3, "sum": 3, "abandoned generator": 3, "after an unwind": 3}
    assert all(recorder.counts.steps_ran[("stepper.py", row)] == 3 for row in rows.values())
    assert all(recorder.counts.setup[("stepper.py", row)] >= 1 for row in rows.values())


@pytest.mark.parametrize("monitoring", HOOKS)
def test_the_caller_line_is_active_again_after_a_yield_or_an_unwind(stepper, monitoring):
    # What a torch call made there is charged to: the wanted line of the innermost frame that has
    # one. A generator that yields and is never resumed, and a frame an exception left, hand the
    # line back to their caller's statement.
    _, rows = record(stepper, monitoring, steps=2)
    expected = [("stepper.py", rows["abandoned generator"]), ("stepper.py", rows["after an unwind"])] * 3
    assert stepper.seen == expected


@pytest.mark.parametrize("monitoring", HOOKS)
def test_stopping_a_recorder_that_never_started_is_harmless(monitoring):
    recorder = LineRecorder([("stepper.py", 1)], lambda path: None, monitoring=monitoring)
    recorder.stop()
    recorder.start()
    recorder.stop()
