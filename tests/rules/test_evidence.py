"""Reading `.perflsp/evidence.json` in `perflsp check`: confirmed, refuted, or left to the static tier.

The evidence here is written by hand in the documented format (docs/evidence-json.md), with each
line's statement fingerprint and offset computed from the source like the recorder does;
tests/runtime/test_record.py records real runs.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from perflsp.evidence_file import EVIDENCE_VERSION, statements
from perflsp.rules import runner
from perflsp.rules.evidence import ANY_RULES, SETUP_RULES, load_evidence, parse
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


def _line(row, source=SOURCE, **fields):
    """A recorded line of `source`, named by its statement as the recorder names it."""
    [statement] = [s for s in statements(source) if s.first <= row <= s.last]
    entry = {"file": "train.py", "line": row, "statement": statement.fingerprint, "offset": row - statement.first,
             "candidate": True, "setup_runs": 0, "runs": 0, "steps": 0, "tensor_ops": 0, "operands": [],
             "host_reads": {}, "host_read_steps": 0, "host_reads_of_host_tensors": 0, "h2d_copies": 0, "h2d_steps": 0,
             "syncs": 0, "stall_us": 0.0}
    entry.update(fields)
    return entry


def _document(lines, steps=5):
    return {"version": EVIDENCE_VERSION, "steps": steps, "warmup_steps": 2, "step_source": "optimizer.step",
            "command": "python train.py", "measured_at": "2026-12-02T10:00:00Z", "recorder": "sys.settrace",
            "ended": "stopped", "accelerator": "NVIDIA H200", "step_ms": 3.0, "lines": lines}


BOUND = [{"device": "cuda:0", "bound": True, "dtype": "float32", "numel": 1}]


def _workspace(tmp_path, lines, steps=5, config="", source=SOURCE):
    (tmp_path / "perflsp.toml").write_text(config)
    (tmp_path / "train.py").write_text(source)
    (tmp_path / ".perflsp").mkdir(exist_ok=True)
    (tmp_path / ".perflsp" / "evidence.json").write_text(json.dumps(_document(lines, steps)))
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
    for text, why in [("{", "Expecting"),
                      (json.dumps(dict(_document([]), version=1)),
                       f"reads version {EVIDENCE_VERSION}: run `perflsp record` again"),
                      (json.dumps({"version": EVIDENCE_VERSION, "steps": -1}), "non-negative")]:
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
    document = {"version": EVIDENCE_VERSION, "steps": 5, "warmup_steps": 2, "step_source": "optimizer.step",
                "lines": [_line(row, FLOAT64, setup_runs=1)]}
    (tmp_path / ".perflsp" / "evidence.json").write_text(json.dumps(document))
    found, refuted = _check(tmp_path)
    assert (row, "PFL201") in found and not refuted


# --- edited files: evidence applies per statement ----------------------------------------------

STATEMENTS = '''import torch


def evaluate(model, loader, log):
    for x, y in loader:
        log.append(model(x).sum().item())


def train(model, loader, opt, criterion, log, debug):
    for step, (x, y) in enumerate(loader):
        out = model(x)
        loss = criterion(
            out.float(), y)
        if (loss.isnan().any()
                or debug):
            print(loss.item())
        loss.backward()
        opt.step()
        log.append(model(x).sum().item())
'''
EVAL_READ, FOR, BODY, CALL, ARGUMENTS, IF, CONDITION, PRINT, TRAIN_READ = 6, 10, 11, 12, 13, 14, 15, 16, 19
RECORDED = (EVAL_READ, FOR, BODY, CALL, ARGUMENTS, IF, CONDITION, PRINT, TRAIN_READ)


def _applied(now):
    """Row of `now` -> the row of STATEMENTS whose record applies there."""
    evidence = parse(_document([_line(row, STATEMENTS) for row in RECORDED])).lines_of("train.py")
    return {row: record.line for row, record in evidence.by_row(now).items()}


def test_unchanged_statements_keep_their_evidence_on_every_line_however_they_are_laid_out():
    assert _applied(STATEMENTS) == {row: row for row in RECORDED}
    # Indentation, spaces between tokens and comments are not the statement.
    reformatted = STATEMENTS.replace("            out.float(), y)", "  out.float() ,y)  # the target")
    assert _applied(reformatted) == {row: row for row in RECORDED}


def test_a_change_on_any_line_of_a_statement_stops_its_evidence_on_all_of_them():
    edited = STATEMENTS.replace("out.float(), y)", "out, y.cpu())")
    assert CALL not in _applied(edited) and ARGUMENTS not in _applied(edited)
    assert _applied(edited)[BODY] == BODY
    # A row added inside the statement moves its tokens: not the statement that ran either.
    split = STATEMENTS.replace("out.float(), y)", "out.float(),\n            y)")
    assert CALL not in _applied(split) and ARGUMENTS not in _applied(split)


def test_a_header_change_stops_the_evidence_of_the_header_not_of_its_body():
    edited = STATEMENTS.replace("enumerate(loader):", "enumerate(loader, 1):").replace("or debug):", "or step > 9):")
    applied = _applied(edited)
    assert FOR not in applied and IF not in applied and CONDITION not in applied
    assert {row: applied.get(row) for row in (BODY, CALL, ARGUMENTS, PRINT)} == {row: row for row in
                                                                                  (BODY, CALL, ARGUMENTS, PRINT)}


def test_a_moved_statement_is_found_again_unless_an_identical_one_makes_it_ambiguous():
    moved = STATEMENTS.replace("import torch\n", "import torch\nimport math\n\nSCALE = 2\n")
    # The two identical reads: where they were, each is its own (the test above); moved, neither is.
    assert _applied(moved) == {row + 3: row for row in RECORDED if row not in (EVAL_READ, TRAIN_READ)}
    # Lines added between them: the one that stayed keeps its record, the one that moved has a twin.
    applied = _applied(STATEMENTS.replace("def train(", "SCALE = 2\n\n\ndef train("))
    assert applied[EVAL_READ] == EVAL_READ and applied[FOR + 3] == FOR and TRAIN_READ + 3 not in applied
    # One of them gone, the other moved: which of the two records is its own is not known.
    gone = STATEMENTS.replace("        log.append(model(x).sum().item())\n", "        pass\n        pass\n", 1)
    applied = _applied(gone)
    assert applied[FOR + 1] == FOR and TRAIN_READ + 1 not in applied


def test_a_change_on_the_second_line_of_a_statement_stops_what_check_reports_on_its_first(tmp_path):
    read = _line(CALL, STATEMENTS, candidate=False, operands=BOUND, host_reads={"float": 5}, host_read_steps=5)
    found, _ = _check(_workspace(tmp_path, [read], source=STATEMENTS))
    assert "recorded on this line: 1 host read per step" in found[(CALL, "PFL108")].message
    found, _ = _check(_workspace(tmp_path, [read], source=STATEMENTS.replace("out.float(), y)", "out, y.cpu())")))
    assert not [f for f in found.values() if "recorded" in f.message]


def test_a_file_that_does_not_tokenize_has_no_evidence_that_applies():
    assert _applied(STATEMENTS + "print((\n") == {}


def test_a_fingerprint_is_the_same_on_every_python_version():
    """Python 3.12 tokenizes f-strings into parts, 3.11 as one string; the editor may record with
    the project's interpreter and check with another. These values were computed on 3.9 to 3.13."""
    sample = '''print(f"step {step}: {loss.item():.{digits}f} {f'{lr!r}'}")
log(f"""{name}
  {value=}""",
    end="")
'''
    assert [tuple(s) for s in statements(sample)] == [(1, 1, "56f367691a863055"), (2, 4, "934c095af3ec42b1")]
