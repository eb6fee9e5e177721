"""`perflsp profile` writes its results, histories and recorded runs into the workspace only: a
cloned repository that commits `.perflsp/profiles` (or its `history`) as a symbolic link to
another folder gets nothing written there."""
from __future__ import annotations

import pytest

from perflsp import profile_history
from perflsp.safe_files import LeavesFolder


@pytest.mark.parametrize("linked", [".perflsp", ".perflsp/profiles", ".perflsp/profiles/history"])
def test_profile_writes_nothing_through_a_link_out_of_the_workspace(run_runtime, targets_dir, tmp_path, linked):
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    (workspace / linked).parent.mkdir(parents=True, exist_ok=True)
    (workspace / linked).symlink_to(outside, target_is_directory=True)
    out = run_runtime("profile", f"{targets_dir / 'ref_cases.py'}:matmul", "--min-time", "0.02",
                      "--workspace", str(workspace), cwd=workspace)
    assert out.returncode == 0, out.stderr
    assert list(outside.rglob("*")) == []
    if linked == ".perflsp/profiles/history":  # the result itself is saved; its history is not kept
        assert (workspace / ".perflsp" / "profiles" / "ref_cases.matmul.json").is_file()
        assert "perflsp: warning: no profile history is kept: a symbolic link leads" in out.stderr
    else:
        assert "perflsp: warning: the result is not saved in the workspace: a symbolic link leads" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_history_link_out_of_the_workspace_is_neither_read_nor_moved(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "m.f.json").write_text("not json")  # would be moved aside as damaged, were it read
    workspace = tmp_path / "ws"
    (workspace / "profiles").mkdir(parents=True)
    (workspace / "profiles" / "history").symlink_to(outside, target_is_directory=True)
    history = profile_history.load(workspace / "profiles" / "history" / "m.f.json", workspace)
    assert not history.writable and history.results == [] and "no profile history is kept" in history.warning
    assert history.append({"status": "ok"}) is None
    assert [p.name for p in outside.iterdir()] == ["m.f.json"]
    with pytest.raises(LeavesFolder):
        profile_history.write_json_atomic(workspace / "profiles" / "history" / "x.json", {}, inside=workspace)


# --- round 3, input and output: what stands where a result goes ----------------------------------------

# Inputs that, while the run measures, put plain files where its output folders were.
REPLACING = '''import os
import shutil


def make_inputs():
    for folder in (".perflsp", "out"):
        if os.path.isdir(folder):
            shutil.rmtree(folder)
            open(folder, "w").close()
    return (2.0,)


def step(x):
    return x * 2
'''


@pytest.mark.parametrize("command, where, problem", [
    ("profile", "afile/result.json", "afile is not a folder"),
    ("profile", ".", ". is a folder"),
    ("peaks", "afile/peaks.json", "afile is not a folder"),
])
def test_an_output_that_cannot_be_written_is_refused_before_measuring(run_runtime, tmp_path, command, where, problem):
    (tmp_path / "afile").write_text("notes\n")
    (tmp_path / "step.py").write_text(REPLACING)
    args = ["step.py:step", "--setup", "step.py:make_inputs"] if command == "profile" else ["--cached"]
    out = run_runtime(command, *args, "--json", where)
    assert out.returncode == 2 and out.stderr == f"perflsp: --json {where}: cannot write there: {problem}\n"
    assert out.stdout == "" and not (tmp_path / ".perflsp").exists()


def test_output_folders_replaced_by_files_during_the_run_cost_the_files_not_the_measurement(run_runtime, tmp_path):
    (tmp_path / "step.py").write_text(REPLACING)
    (tmp_path / ".perflsp").mkdir()
    (tmp_path / "out").mkdir()
    out = run_runtime("profile", "step.py:step", "--setup", "step.py:make_inputs", "--min-time", "0.02",
                      "--json", "out/result.json", "--progress", "none")
    assert out.stderr.splitlines() == [
        f"perflsp: warning: the result is not saved in the workspace: {tmp_path / '.perflsp'} is not a folder",
        "perflsp: --json out/result.json: cannot write there: out is not a folder",
    ]
    assert out.returncode == 2 and "verdict" in out.stdout  # the measurement is still shown
    assert (tmp_path / ".perflsp").read_text() == (tmp_path / "out").read_text() == ""
