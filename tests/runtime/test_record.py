"""`perflsp record`: a short real run confirms or refutes the static findings (issue 19).

The program is tests/runtime/targets/record/train.py, recorded once per module (a record costs
a few seconds: torch's import and the steps); its lines are found by their `# case:` comments.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflsp.evidence_file import EVIDENCE_VERSION
from perflsp.rules.registry import rule_by_code

TARGET = Path(__file__).parent / "targets" / "record"
STEPS = 4


def perflsp(*args, cwd, timeout=180):
    return subprocess.run([sys.executable, "-m", "perflsp", *map(str, args)], cwd=str(cwd), capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONIOENCODING="utf-8"))


def line_of(path: Path, case: str) -> int:
    rows = [i for i, text in enumerate(path.read_text().splitlines(), 1) if text.rstrip().endswith(f"# case: {case}")]
    assert len(rows) == 1, case
    return rows[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("record") / "project"
    shutil.copytree(TARGET, workspace)
    (workspace / "perflsp.toml").write_text("")  # the default tier
    out = perflsp("record", "--steps", STEPS, "--progress", "none", "--", "python", "train.py", cwd=workspace)
    assert out.returncode == 0, out.stdout + out.stderr
    evidence = json.loads((workspace / ".perflsp" / "evidence.json").read_text())
    return workspace, out, evidence


def _entry(evidence, workspace, case):
    line = line_of(workspace / "train.py", case)
    found = [e for e in evidence["lines"] if e["file"] == "train.py" and e["line"] == line]
    assert found, f"{case} (line {line}) was not recorded"
    return found[0]


def test_record_writes_versioned_evidence_and_says_so(recorded):
    workspace, out, evidence = recorded
    assert f"recorded  {STEPS} steps (optimizer.step) after 2 of warm-up" in out.stdout
    assert str(workspace / ".perflsp" / "evidence.json") in out.stdout
    assert evidence["version"] == EVIDENCE_VERSION and evidence["steps"] == STEPS and evidence["ended"] == "stopped"
    assert evidence["command"] == "python train.py" and evidence["step_source"] == "optimizer.step"
    assert evidence["recorder"] in ("sys.monitoring", "sys.settrace")
    assert {e["file"] for e in evidence["lines"]} == {"train.py"}  # never torch's or the stdlib's lines
    assert all(len(e["statement"]) == 16 and e["offset"] == 0 for e in evidence["lines"])  # one-line statements


def test_host_reads_of_device_bound_tensors_are_counted_per_step_without_a_gpu(recorded):
    workspace, _, evidence = recorded
    assert evidence["accelerator"] is None
    expected = {"callback read": {"item": STEPS}, "loss object branch": {"bool": STEPS},
                "formatted log line": {"float": 2 * STEPS}}
    for case, reads in expected.items():
        entry = _entry(evidence, workspace, case)
        assert entry["host_reads"] == reads and entry["host_read_steps"] == STEPS, (case, entry)
        assert entry["operands"][0]["bound"] is True and entry["operands"][0]["device"] == "cpu", (case, entry)
    copies = _entry(evidence, workspace, "copies to the device")
    assert copies["h2d_copies"] == 2 * STEPS and copies["h2d_steps"] == STEPS and copies["steps"] == STEPS
    assert copies["operands"][0]["bound"] is False  # what was copied came from the host


def test_decoys_are_recorded_as_what_they_are(recorded):
    workspace, _, evidence = recorded
    lazy = _entry(evidence, workspace, "lazy init")
    assert lazy["setup_runs"] == 1 and lazy["runs"] == 0 and lazy["steps"] == 0
    for case in ("off branch", "unused class"):
        entry = _entry(evidence, workspace, case)
        assert (entry["setup_runs"], entry["runs"]) == (0, 0), (case, entry)
    host = _entry(evidence, workspace, "collate tensor on the host")
    assert host["host_reads"] == {} and host["host_reads_of_host_tensors"] == STEPS


def _findings(workspace, *extra):
    out = perflsp("check", "--no-cache", "--output-format", "json", *extra, "train.py", cwd=workspace)
    assert out.returncode in (0, 1), out.stderr
    return {(f["location"]["row"], f["code"]): f for f in json.loads(out.stdout)}


def test_check_reports_every_per_step_sync_and_none_of_the_decoys(recorded):
    workspace, _, _ = recorded
    source = workspace / "train.py"
    found = _findings(workspace)
    rows = {row for row, _ in found}
    for case in ("callback read", "loss object branch", "formatted log line", "copies to the device"):
        assert line_of(source, case) in rows, case
    for case in ("lazy init", "off branch", "unused class", "collate tensor on the host", "python bool branch",
                 "ema dtype check"):
        assert line_of(source, case) not in rows, case
    measured = found[(line_of(source, "formatted log line"), "PFL108")]
    assert "2 host reads per step [float ×2] of a float32 tensor bound for the device" in measured["message"]
    # A preview rule's finding that the run confirmed is reported in the default tier.
    assert rule_by_code("PFL106").preview
    copy = found[(line_of(source, "copies to the device"), "PFL106")]
    assert "recorded on this line: 2 host-to-device copies per step" in copy["message"]


def test_show_refuted_lists_the_decoys_the_static_rules_flag(recorded):
    workspace, _, _ = recorded
    out = perflsp("check", "--no-cache", "--show-refuted", "--preview", "train.py", cwd=workspace)
    source = workspace / "train.py"
    listed = out.stdout.split("Refuted by the recorded run", 1)[1]
    assert f"train.py:{line_of(source, 'lazy init')}:" in listed and "ran only before them" in listed
    assert f"train.py:{line_of(source, 'off branch')}:" in listed and "never ran" in listed
    assert f"train.py:{line_of(source, 'unused class')}:" in listed
    assert f"train.py:{line_of(source, 'collate tensor on the host')}:" in listed and "stayed on the host" in listed


def test_evidence_applies_only_to_the_statements_that_did_not_change(recorded, tmp_path):
    workspace, _, _ = recorded
    edited = tmp_path / "edited"
    shutil.copytree(workspace, edited)
    source = edited / "train.py"
    text = source.read_text()
    # A line added on top moves every statement; an edited one is no longer the one that ran.
    text = text.replace("import torch\n", "import torch\nimport math\n", 1)
    text = text.replace("print(loss.item())  # case: off branch", "print(loss.item(), 'debug')  # case: off branch")
    # Spaces between tokens are not the statement, nor is the body below an `if`.
    text = text.replace("x, y = x.to(device), y.to(device)", "x, y = x.to(device),  y.to( device )")
    text = text.replace('raise ValueError("nan loss")', 'raise ValueError("the loss is nan")')
    source.write_text(text)
    found = _findings(edited)
    assert (line_of(source, "callback read"), "PFL108") in found  # moved, unchanged: found by its fingerprint
    assert (line_of(source, "off branch"), "PFL101") in found  # changed: the static tier decides again
    assert (line_of(source, "lazy init"), "PFL101") not in found  # moved, unchanged: still refuted
    copy = found[(line_of(source, "copies to the device"), "PFL106")]  # preview: shown because confirmed
    assert "recorded on this line: 2 host-to-device copies per step" in copy["message"]
    branch = [f for (row, _), f in found.items() if row == line_of(source, "loss object branch")]
    assert branch and all("recorded on this line" in f["message"] for f in branch)


def _record_and_check(workspace, *record_args):
    (workspace / "perflsp.toml").write_text("")
    out = perflsp("record", "--progress", "none", *record_args, cwd=workspace)
    assert out.returncode == 0, out.stdout + out.stderr
    check = perflsp("check", "--no-cache", "--output-format", "json", ".", cwd=workspace)
    return json.loads((workspace / ".perflsp" / "evidence.json").read_text()), json.loads(check.stdout)


def _flagged_text(source: str, finding) -> str:
    lines = source.splitlines()
    start, end = finding["location"], finding["end_location"]
    assert start["row"] == end["row"]
    return lines[start["row"] - 1][start["column"] - 1:end["column"] - 1]


def test_pfl108_examples_are_what_a_record_reports(tmp_path):
    rule = rule_by_code("PFL108")
    for index, example in enumerate(rule.invalid):
        workspace = tmp_path / f"invalid{index}"
        workspace.mkdir()
        (workspace / "train.py").write_text(example.code)
        _, findings = _record_and_check(workspace, "--", "python", "train.py")
        measured = [f for f in findings if f["code"] == "PFL108"]
        assert measured and _flagged_text(example.code, measured[0]) == example.flagged, findings
    for index, code in enumerate(rule.valid):
        workspace = tmp_path / f"valid{index}"
        workspace.mkdir()
        (workspace / "train.py").write_text(code)
        _, findings = _record_and_check(workspace, "--", "python", "train.py")
        assert not [f for f in findings if f["code"] == "PFL108"], findings


INFERENCE = '''import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def predict(model, batch):
    scores = model(batch.to(device))
    return scores.argmax(dim=1).tolist()  # case: labels to the host


def main():
    model = torch.nn.Linear(16, 4).to(device).eval()
    with torch.no_grad():
        for _ in range(50):
            predict(model, torch.randn(8, 16))


main()
'''


def test_inference_counts_calls_of_the_step_function_as_steps(tmp_path):
    (tmp_path / "infer.py").write_text(INFERENCE)
    evidence, findings = _record_and_check(tmp_path, "--steps", "3", "--step-function", "infer.py:predict",
                                           "--", "python", "infer.py")
    assert evidence["step_source"] == "function" and evidence["steps"] == 3
    row = line_of(tmp_path / "infer.py", "labels to the host")
    [entry] = [e for e in evidence["lines"] if e["line"] == row]
    assert entry["host_reads"] == {"tolist": 3} and entry["host_read_steps"] == 3
    assert row in {f["location"]["row"] for f in findings}


@pytest.mark.gpu  # bench/gpu_check.sh runs the tests marked so
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_on_cuda_reads_are_device_reads_with_their_stall(tmp_path):
    workspace = tmp_path / "cuda"
    shutil.copytree(TARGET, workspace)
    (workspace / "perflsp.toml").write_text("")
    out = perflsp("record", "--steps", STEPS, "--progress", "none", "--", "python", "train.py", cwd=workspace)
    assert out.returncode == 0, out.stdout + out.stderr
    evidence = json.loads((workspace / ".perflsp" / "evidence.json").read_text())
    assert evidence["accelerator"]
    entry = _entry(evidence, workspace, "callback read")
    assert entry["host_reads"] == {"item": STEPS} and entry["operands"][0]["device"].startswith("cuda")
    assert entry["stall_us"] > 0
    found = _findings(workspace)
    assert (line_of(workspace / "train.py", "callback read"), "PFL108") in found


def test_a_program_without_steps_is_told_how_to_name_them(tmp_path):
    (tmp_path / "infer.py").write_text(INFERENCE)  # no optimizer: its steps are calls of predict
    (tmp_path / "perflsp.toml").write_text("")
    out = perflsp("record", "--progress", "none", "--", "python", "infer.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "recorded  0 steps (optimizer.step)" in out.stdout and "(the program finished)" in out.stdout
    assert "--step-function FILE:FUNC" in out.stdout


@pytest.mark.parametrize("program, said", [
    (["torchrun", "train.py"], "the command after `perflsp record --` must start with python"),
    (["python", "-c", "1"], "the command after `perflsp record --` does not take python -c"),
    (["python", "missing.py"], "the command after `perflsp record --`: no such script"),
])
def test_a_program_it_cannot_run_is_named_as_the_user_gave_it(tmp_path, program, said):
    (tmp_path / "perflsp.toml").write_text("")
    run = perflsp("record", "--", *program, cwd=tmp_path)
    assert run.returncode == 2
    assert said in run.stderr and "--run" not in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / ".perflsp").exists()


def test_a_bad_configuration_in_the_workspace_is_a_usage_error(tmp_path):
    (tmp_path / "perflsp.toml").write_text("")
    (tmp_path / "train.py").write_text("print('never runs')\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "perflsp.toml").write_text("select = 3\n")
    (tmp_path / "sub" / "a.py").write_text("x = 1\n")
    run = perflsp("record", "--", "python", "train.py", cwd=tmp_path)
    assert run.returncode == 2
    assert "sub/perflsp.toml" in run.stderr and "select" in run.stderr and "Traceback" not in run.stderr
    assert "never runs" not in run.stdout
