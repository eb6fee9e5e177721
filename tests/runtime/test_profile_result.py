"""The result contract: schema, stdlib check, file naming, atomic writes, staleness."""
from __future__ import annotations

import json
import os
import stat

import pytest

from perflsp import profile_result as pr
from perflsp.runtime import analysis
from perflsp.runtime.timing import TimingOptions

jsonschema = pytest.importorskip("jsonschema")
VALIDATOR = jsonschema.Draft202012Validator(pr.load_schema())


def _error_result(kind="exception", message="ValueError: boom (during warm-up)"):
    base = analysis.new_result(
        {"spec": "m.py:f", "file": "/w/m.py", "module": "m", "qualname": "f", "def_line": 3,
         "source_sha256": "ab", "file_sha256": "cd"},
        analysis.settings_block(inputs="marker", setup=None, run_command=None, stop_program=True,
                                timing=TimingOptions(), timeout_s=300.0, device="auto"))
    return analysis.with_error(base, analysis.error_block(kind, message, phase="warm-up",
                                                          exception_type="ValueError", traceback="Traceback ..."))


def test_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(pr.load_schema())


@pytest.mark.parametrize("kind", pr.ERROR_KINDS)
def test_error_results_validate_and_pass_the_stdlib_check(kind):
    result = _error_result(kind)
    VALIDATOR.validate(result)
    assert pr.check(result) == []


def test_schema_and_check_reject_an_unknown_regime():
    result = _error_result()
    result["status"] = "ok"
    result["error"] = None
    result["verdict"] = {"regime": "io-bound", "summary": "", "reasons": [], "levers": [], "notes": []}
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(result)
    problems = pr.check(result)
    assert any(p.startswith("$.verdict.regime: 'io-bound' is not one of 'compute-bound'") for p in problems)
    assert "$.timing: a null, expected object" in problems  # status ok needs the measured blocks too


def test_check_reports_missing_keys_and_wrong_version():
    result = _error_result()
    del result["syncs"]
    assert pr.check(result) == ["$: missing `syncs`"]
    result = _error_result()
    result["schema_version"] = pr.SCHEMA_VERSION - 1  # an older version is refused too
    assert pr.check(result) == [f"$.schema_version: {pr.SCHEMA_VERSION - 1}, expected {pr.SCHEMA_VERSION}"]


def test_result_path_is_module_dot_qualname_and_safe(tmp_path):
    assert pr.result_path(tmp_path, "pkg.mod", "Model.forward") == tmp_path / ".perflsp" / "profiles" / "pkg.mod.Model.forward.json"
    assert pr.result_filename("a/b", "f<x>").startswith("a_b.f_x_-")


def test_result_names_that_needed_replacing_never_collide():
    names = {pr.result_filename("t", name) for name in ("fé", "fè", "f_", "f<é>")}
    assert len(names) == 4
    assert all(n.startswith("t.f_") and n.endswith(".json") and n.isascii() for n in names)
    assert pr.result_filename("t", "f_") == "t.f_.json"  # names with nothing to replace stay as they are


def test_exit_codes_follow_the_documented_table():
    assert pr.exit_code_for("exception") == 3
    assert pr.exit_code_for("timeout") == 4
    assert pr.exit_code_for("out-of-memory") == 5
    assert pr.exit_code_for("target-not-found") == 6
    assert pr.exit_code_for("usage") == 2


def test_atomic_write_replaces_and_uses_normal_permissions(tmp_path):
    path = tmp_path / "deep" / "r.json"
    pr.write_json_atomic(path, {"a": 1})
    pr.write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert os.listdir(path.parent) == ["r.json"]


def test_atomic_write_failure_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    pr.write_json_atomic(path, {"old": True})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(pr.os, "replace", broken_replace)
    with pytest.raises(OSError):
        pr.write_json_atomic(path, {"new": True})
    assert json.loads(path.read_text()) == {"old": True}
    assert os.listdir(tmp_path) == ["r.json"]


def test_unencodable_result_writes_nothing(tmp_path):
    with pytest.raises(ValueError):
        pr.write_json_atomic(tmp_path / "r.json", {"x": float("nan")})
    assert os.listdir(tmp_path) == []


def test_read_result_refuses_other_versions(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(pr.ResultError, match="schema_version 99"):
        pr.read_result(path)
    path.write_text("{not json")
    with pytest.raises(pr.ResultError):
        pr.read_result(path)
    pr.write_json_atomic(path, _error_result())
    assert pr.read_result(path)["status"] == "error"


SOURCE = '''import torch

@decorator
def step(x):
    return x + 1

class Model:
    def forward(self, x):
        return x * 2
'''


def test_source_hash_tracks_only_the_function():
    digest, def_line = pr.function_source_sha256(SOURCE, "step")
    assert def_line == 4
    assert pr.function_source_sha256(SOURCE.replace("import torch", "import torch, os"), "step")[0] == digest
    assert pr.function_source_sha256(SOURCE.replace("x + 1", "x + 2"), "step")[0] != digest
    assert pr.function_source_sha256(SOURCE.replace("@decorator", "@other"), "step")[0] != digest
    assert pr.function_source_sha256(SOURCE.replace("\n", "\r\n"), "step")[0] == digest
    assert pr.function_source_sha256(SOURCE, "Model.forward")[1] == 8
    assert pr.function_source_sha256(SOURCE, "missing") == (None, None)


def test_is_stale_compares_the_recorded_digest():
    digest, _ = pr.function_source_sha256(SOURCE, "step")
    result = {"target": {"qualname": "step", "source_sha256": digest}}
    assert not pr.is_stale(result, SOURCE)
    assert pr.is_stale(result, SOURCE.replace("x + 1", "x - 1"))
    assert pr.is_stale({"target": {"qualname": "step", "source_sha256": None}}, SOURCE)
