"""`--fix`, `--diff` and `--unsafe-fixes` on findings that are per step only because a caller in
another module calls them in its step loop: the fixer must judge each file by the project graph,
as the check did, or it fixes less than the check called fixable."""
from __future__ import annotations

import json

TRAIN = """\
from ops import patchify, zero_state


def train(model, proj, loader, opt):
    for x, y in loader:
        h = zero_state(x.shape[0], 16, x.device)
        loss = model(patchify(x, proj), h).sum()
        loss.backward()
        opt.step()
"""
# PFL302 twice: safe after a factory, unsafe after `.reshape()` (its input may be non-contiguous).
OPS = """\
import torch


def zero_state(batch, hidden, device):
    return torch.zeros(2, batch, hidden, device=device).contiguous()


def patchify(x, proj):
    b, c, h, w = x.shape
    return proj(x).reshape(b, -1, h * w).contiguous()
"""
SAFE_FIXED = OPS.replace("device=device).contiguous()", "device=device)")
ALL_FIXED = SAFE_FIXED.replace("h * w).contiguous()", "h * w)")


def _project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "ops.py").write_text(OPS)
    return tmp_path / "ops.py"


def test_the_findings_are_per_step_only_through_the_other_module(perflsp_cli, tmp_path):
    _project(tmp_path)
    alone = perflsp_cli("check", "ops.py", "--no-cache")
    assert alone.returncode == 0, alone.stdout
    findings = json.loads(perflsp_cli("check", ".", "--no-cache", "--output-format", "json").stdout)
    assert [(f["filename"], f["code"], f["fix"]["applicability"]) for f in findings] == [
        ("ops.py", "PFL302", "safe"), ("ops.py", "PFL302", "unsafe")]
    assert all("train.py:" in f["hot"]["message"] for f in findings)


def test_fix_applies_what_the_check_counts_as_fixable(perflsp_cli, tmp_path):
    ops = _project(tmp_path)
    check = perflsp_cli("check", ".", "--no-cache")
    assert "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled" in check.stdout
    fix = perflsp_cli("check", ".", "--fix")
    assert fix.returncode == 1 and "Found 2 errors (1 fixed, 1 remaining)." in fix.stdout, fix.stdout + fix.stderr
    assert ops.read_text() == SAFE_FIXED
    fix = perflsp_cli("check", ".", "--fix", "--unsafe-fixes")
    assert fix.returncode == 0 and "Found 1 error (1 fixed, 0 remaining)." in fix.stdout, fix.stdout + fix.stderr
    assert ops.read_text() == ALL_FIXED
    again = perflsp_cli("check", ".", "--no-cache")
    assert again.returncode == 0 and "All checks passed!" in again.stdout, again.stdout


def _changed_lines(diff: str):
    return [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def test_diff_shows_the_fixes_without_writing(perflsp_cli, tmp_path):
    ops = _project(tmp_path)
    diff = perflsp_cli("check", ".", "--diff")
    assert diff.returncode == 1
    assert _changed_lines(diff.stdout) == [
        "-    return torch.zeros(2, batch, hidden, device=device).contiguous()",
        "+    return torch.zeros(2, batch, hidden, device=device)"]
    diff = perflsp_cli("check", ".", "--diff", "--unsafe-fixes")
    assert len(_changed_lines(diff.stdout)) == 4 and "+    return proj(x).reshape(b, -1, h * w)" in diff.stdout
    assert ops.read_text() == OPS
