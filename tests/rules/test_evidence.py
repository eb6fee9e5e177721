"""Reading `.perflsp/evidence.json` in `perflsp check`: confirmed, refuted, or left to the static tier.

The evidence here is written by hand in the documented format (docs/evidence-json.md), with each
line's hash computed from the source like the recorder does; tests/runtime/test_record.py
records real runs.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from perflsp.evidence_file import line_hash
from perflsp.rules import runner
from perflsp.rules.evidence import ANY_RULES, SETUP_RULES, load_evidence
from perflsp.rules.registry import all_rules

SOURCE = '''import torch


def train(model, loader, opt, debug):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(loss.item())
        if debug:
            print(loss.sum().item())
        total = loss.detach()
        history = float(total)
'''
LOOP_ITEM, DEBUG_ITEM, FLOAT_READ = 9, 11, 13


def _line(row, **fields):
    entry = {"file": "train.py", "line": row, "hash": line_hash(SOURCE.splitlines()[row - 1]), "candidate": True,
             "setup_runs": 0, "runs": 0, "steps": 0, "tensor_ops": 0, "operands": [], "host_reads": {},
             "host_read_steps": 0, "host_reads_of_host_tensors": 0, "h2d_copies": 0, "h2d_steps": 0, "syncs": 0,
             "stall_us": 0.0}
    entry.update(fields)
    return entry


BOUND = [{"device": "cuda:0", "bound": True, "dtype": "float32", "numel": 1}]


def _workspace(tmp_path, lines, steps=5, config="", source=SOURCE):
    (tmp_path / "perflsp.toml").write_text(config)
    (tmp_path / "train.py").write_text(source)
    (tmp_path / ".perflsp").mkdir(exist_ok=True)
    document = {"version": 1, "steps": steps, "warmup_steps": 2, "step_source": "optimizer.step",
                "command": "python train.py", "measured_at": "2026-12-02T10:00:00Z", "recorder": "sys.settrace",
                "ended": "stopped", "accelerator": "NVIDIA H200", "step_ms": 3.0, "lines": lines}
    (tmp_path / ".perflsp" / "evidence.json").write_text(json.dumps(document))
    return tmp_path


def _check(workspace):
    [result] = runner.check_paths([workspace / "train.py"], jobs=1)
    return {(f.start.row, f.code): f for f in result.findings}, {(f.start.row, f.code): f for f in result.refuted}


def test_without_evidence_the_static_tier_decides(tmp_path):
    (tmp_path / "perflsp.toml").write_text("")
    (tmp_path / "train.py").write_text(SOURCE)
    found, refuted = _check(tmp_path)
    assert (LOOP_ITEM, "PFL101") in found and (DEBUG_ITEM, "PFL101") in found and not refuted


def test_a_read_on_every_step_confirms_and_a_line_that_never_ran_refutes(tmp_path):
    workspace = _workspace(tmp_path, [
        _line(LOOP_ITEM, runs=5, steps=5, tensor_ops=5, operands=BOUND, host_reads={"item": 5}, host_read_steps=5,
              stall_us=500.0),
        _line(DEBUG_ITEM, setup_runs=0),
    ])
    found, refuted = _check(workspace)
    message = found[(LOOP_ITEM, "PFL101")].message
    assert "recorded on this line: 1 host read per step [item ×1] of a float32 tensor on cuda:0" in message
    assert "100 µs stalled per step" in message
    assert (DEBUG_ITEM, "PFL101") not in found
    assert "never ran: not during the 5 recorded steps" in refuted[(DEBUG_ITEM, "PFL101")].message


def test_a_preview_finding_the_run_confirms_is_reported_in_the_default_tier(tmp_path):
    workspace = _workspace(tmp_path, [
        _line(FLOAT_READ, runs=5, steps=5, tensor_ops=5, operands=BOUND, host_reads={"float": 5}, host_read_steps=5),
    ])
    found, _ = _check(workspace)
    assert "PFL103" in {code for row, code in found if row == FLOAT_READ}


def test_host_tensors_refute_sync_findings(tmp_path):
    host = [{"device": "cpu", "bound": False, "dtype": "int64", "numel": 8}]
    workspace = _workspace(tmp_path, [
        _line(LOOP_ITEM, runs=5, steps=5, tensor_ops=5, operands=host, host_reads_of_host_tensors=5),
    ])
    found, refuted = _check(workspace)
    assert (LOOP_ITEM, "PFL101") not in found
    assert "stayed on the host" in refuted[(LOOP_ITEM, "PFL101")].message


def test_a_per_step_read_no_rule_flagged_is_pfl108_unless_ignored_or_suppressed(tmp_path):
    row = 12  # `total = loss.detach()`: no rule looks there
    read = _line(row, candidate=False, operands=BOUND, host_reads={"bool": 10}, host_read_steps=5)
    found, _ = _check(_workspace(tmp_path, [read]))
    assert "2 host reads per step [bool ×2]" in found[(row, "PFL108")].message
    found, _ = _check(_workspace(tmp_path, [read], config='ignore = ["PFL108"]\n'))
    assert (row, "PFL108") not in found
    silenced = SOURCE.replace("total = loss.detach()", "total = loss.detach()  # noqa: PFL108")
    found, _ = _check(_workspace(tmp_path, [read], source=silenced))
    assert (row, "PFL108") not in found


def test_too_few_steps_confirm_and_refute_nothing(tmp_path):
    workspace = _workspace(tmp_path, [_line(DEBUG_ITEM)], steps=2)
    found, refuted = _check(workspace)
    assert (DEBUG_ITEM, "PFL101") in found and not refuted


def test_a_bad_evidence_file_is_ignored_with_a_warning(tmp_path, caplog):
    workspace = _workspace(tmp_path, [_line(DEBUG_ITEM)])
    path = workspace / ".perflsp" / "evidence.json"
    for text, why in [("{", "Expecting"), (json.dumps({"version": 2}), "version 2"),
                      (json.dumps({"version": 1, "steps": -1}), "non-negative")]:
        path.write_text(text)
        with caplog.at_level(logging.WARNING, logger="perflsp"):
            assert load_evidence(Path(workspace)) is None
        assert why in caplog.text
        found, refuted = _check(workspace)
        assert (DEBUG_ITEM, "PFL101") in found and not refuted


def test_the_rules_evidence_judges_by_their_scope_are_the_registrys():
    assert SETUP_RULES == {rule.code for rule in all_rules() if rule.scope == "setup"}
    assert ANY_RULES == {rule.code for rule in all_rules() if rule.scope == "any"}


FLOAT64 = '''import numpy as np
import torch


def main(loader, model, opt):
    weights = torch.from_numpy(np.linspace(0, 1, 8))
    for x, y in loader:
        loss = (model(x) * weights).sum()
        loss.backward()
        opt.step()
'''


def test_a_once_made_cost_is_not_refuted_for_running_only_in_setup(tmp_path):
    row = 6  # PFL201: a float64 tensor built once, used on every step
    (tmp_path / "perflsp.toml").write_text("preview = true\n")
    (tmp_path / "train.py").write_text(FLOAT64)
    (tmp_path / ".perflsp").mkdir()
    entry = {"file": "train.py", "line": row, "hash": line_hash(FLOAT64.splitlines()[row - 1]), "candidate": True,
             "setup_runs": 1, "runs": 0, "steps": 0, "tensor_ops": 0, "operands": [], "host_reads": {},
             "host_read_steps": 0, "host_reads_of_host_tensors": 0, "h2d_copies": 0, "h2d_steps": 0, "syncs": 0,
             "stall_us": 0.0}
    document = {"version": 1, "steps": 5, "warmup_steps": 2, "step_source": "optimizer.step", "lines": [entry]}
    (tmp_path / ".perflsp" / "evidence.json").write_text(json.dumps(document))
    found, refuted = _check(tmp_path)
    assert (row, "PFL201") in found and not refuted
