"""A result judged against other ceilings than the previous result for the function says so."""
from __future__ import annotations

import argparse
import copy
import json

import pytest

torch = pytest.importorskip("torch")

from perflsp.profile_result import read_result, result_path  # noqa: E402
from perflsp.runtime import analysis, cli  # noqa: E402
from perflsp.runtime.peaks import ceilings_id  # noqa: E402
from perflsp.runtime.session import profile_function  # noqa: E402
from perflsp.runtime.timing import TimingOptions  # noqa: E402

FAST = TimingOptions(min_time_s=0.02, min_iters=3)


def scale(x):
    return x * 2.0


def _finish(result, workspace):
    args = argparse.Namespace(json=None, plot=None)
    assert cli._finish(args, result, workspace) == 0
    return read_result(result_path(workspace, result["target"]["module"], result["target"]["qualname"]))


def test_a_profile_on_new_ceilings_names_both_ids(cpu_peaks, tmp_path, capsys):
    x = torch.randn(100_000)
    first = _finish(profile_function(scale, (x,), device="cpu", peaks=cpu_peaks, timing=FAST), tmp_path)
    assert not any("other ceilings" in n for n in first["verdict"]["notes"])
    # the same ceilings again: nothing to say
    again = _finish(profile_function(scale, (x,), device="cpu", peaks=cpu_peaks, timing=FAST), tmp_path)
    assert not any("other ceilings" in n for n in again["verdict"]["notes"])
    # `perflsp peaks` re-measured in between
    remeasured = copy.deepcopy(cpu_peaks)
    remeasured["measured_at"] = "2031-01-01T00:00:00+00:00"
    remeasured["bandwidth_bytes_per_s"] *= 2
    old_id, new_id = ceilings_id(cpu_peaks), ceilings_id(remeasured)
    assert old_id != new_id
    third = _finish(profile_function(scale, (x,), device="cpu", peaks=remeasured, timing=FAST), tmp_path)
    (note,) = [n for n in third["verdict"]["notes"] if "other ceilings" in n]
    assert old_id in note and new_id in note and again["created_at"] in note
    assert note in capsys.readouterr().out  # the CLI prints it too


def test_ceilings_change_note_rules():
    ok = {"status": "ok", "created_at": "t0", "ceilings": {"id": "aaa", "measured_at": "m0"},
          "verdict": {"regime": "compute-bound", "notes": []}}
    new = {"status": "ok", "ceilings": {"id": "bbb", "measured_at": "m1"},
           "verdict": {"regime": "memory-bound", "notes": []}}
    note = analysis.ceilings_change_note(new, ok)
    assert "aaa" in note and "bbb" in note and "from compute-bound to memory-bound" in note
    assert analysis.ceilings_change_note(new, None) is None
    assert analysis.ceilings_change_note(new, dict(ok, ceilings={"id": "bbb"})) is None
    assert analysis.ceilings_change_note(new, {"status": "error", "ceilings": None}) is None
    assert analysis.ceilings_change_note(new, dict(ok, ceilings={})) is None  # a result from before ids


def test_an_unreadable_previous_file_is_no_previous(tmp_path):
    path = tmp_path / "r.json"
    assert analysis.read_previous(path) is None
    path.write_text("{not json")
    assert analysis.read_previous(path) is None
    path.write_text(json.dumps([1, 2]))
    assert analysis.read_previous(path) is None
    path.write_text(json.dumps({"schema_version": 1, "status": "ok"}))
    assert analysis.read_previous(path) == {"schema_version": 1, "status": "ok"}
