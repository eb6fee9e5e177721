"""The language server's project index: the whole folder's graph, open buffers first, built again
only when a summary changed in a way the graph reads."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from perflsp.config import Settings
from perflsp.hot_file import HOT_VERSION
from perflsp.rules.engine import check_source
from perflsp.rules.project import COLD, STEP
from perflsp.rules.project_index import ProjectIndex

HELPERS = "def log(t):\n    return t.item()\n"
MODEL = """\
from torch import nn

import helpers


class Net(nn.Module):
    def forward(self, x):
        return helpers.log(x)
"""


@pytest.fixture
def project(tmp_path: Path):
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "model.py").write_text(MODEL)
    index = ProjectIndex(tmp_path, {}, tmp_path / ".perflsp_cache")
    index.load()
    return tmp_path, index


def why_log(index: ProjectIndex, root: Path):
    """`helpers.log`'s status and reason, or None when the graph says nothing of it."""
    state = index.facts(str(root / "helpers.py"))["functions"].get("helpers.log")
    return state and state[:2]  # the third item, the call row in this file, is None here


def test_a_helper_called_from_forward_in_another_module_is_per_step(project):
    root, index = project
    assert why_log(index, root) == [
        STEP, "called from `Net.forward` (model.py:8), which runs on every forward pass (`nn.Module.forward`)"]
    assert list((root / ".perflsp_cache").glob("*/findings.json"))  # summaries kept for the next start
    assert index.facts(str(root / "elsewhere.py")) is None  # not part of the project: judged alone


def test_not_loaded_yet_means_judged_alone(tmp_path):
    (tmp_path / "helpers.py").write_text(HELPERS)
    assert ProjectIndex(tmp_path).facts(str(tmp_path / "helpers.py"), HELPERS) is None


def test_the_graph_is_built_again_only_when_a_summary_the_graph_reads_changed(project):
    root, index = project
    model = str(root / "model.py")
    builds = index.builds
    index.buffer_changed(model, MODEL)  # opened: the same text as on disk
    index.facts(model, MODEL)
    assert index.builds == builds
    inside_a_line = MODEL.replace("forward(self, x)", "forward(self, x_in)").replace("log(x)", "log(x_in)")
    index.buffer_changed(model, inside_a_line)
    index.facts(model, inside_a_line)
    assert index.builds == builds  # same definitions and calls: same graph
    assert not index.settle()
    no_call = MODEL.replace("return helpers.log(x)", "return x")
    index.buffer_changed(model, no_call)
    assert index.facts(model, no_call) is not None
    assert index.builds == builds + 1  # a call went away: built before answering
    assert why_log(index, root) is None


def test_moved_lines_keep_the_statuses_and_settle_renames_the_lines(project):
    root, index = project
    model = str(root / "model.py")
    builds = index.builds
    moved = "# a comment on top\n" + MODEL
    index.buffer_changed(model, moved)
    facts = index.facts(model, moved)
    assert index.builds == builds  # a status cannot change when only line numbers move
    assert facts["functions"]["model.Net.forward"][0] == STEP
    assert facts["summary"]["functions"][0]["start"] == 8  # the file's own summary is its current text's
    assert "(model.py:8)" in why_log(index, root)[1]
    assert index.settle()  # typing paused: the chains name the new lines
    assert "(model.py:9)" in why_log(index, root)[1]
    assert not index.settle()


def test_a_buffer_that_does_not_parse_keeps_its_last_summary(project):
    root, index = project
    model = str(root / "model.py")
    builds = index.builds
    half_typed = MODEL.replace("return helpers.log(x)", "return helpers.log(x")
    index.buffer_changed(model, half_typed)
    index.facts(model, half_typed)
    assert index.builds == builds
    assert why_log(index, root)[0] == STEP


def test_open_buffers_win_over_the_disk_until_closed(project):
    root, index = project
    model = str(root / "model.py")
    index.buffer_changed(model, MODEL.replace("return helpers.log(x)", "return x"))
    assert why_log(index, root) is None
    index.files_changed([model])  # saved elsewhere meanwhile: the buffer still stands for the file
    assert why_log(index, root) is None
    index.buffer_closed(model)  # edits thrown away: the file on disk again
    assert why_log(index, root)[0] == STEP


def test_files_created_changed_and_deleted_on_disk(project):
    root, index = project
    (root / "model.py").write_text(MODEL.replace("return helpers.log(x)", "return x"))
    index.files_changed([str(root / "model.py")])
    assert why_log(index, root) is None
    steps = root / "steps.py"
    steps.write_text("import helpers\n\n\ndef train(loader):\n    for batch in loader:\n        helpers.log(batch)\n")
    index.files_changed([str(steps)])
    assert why_log(index, root) == [STEP, "called inside a step loop (steps.py:6)"]
    steps.unlink()
    index.files_changed([str(steps)])
    assert why_log(index, root) is None
    assert index.facts(str(steps)) is None


def test_facts_for_a_text_the_index_has_not_seen_teach_it_the_file_on_disk(project):
    root, index = project
    changed = MODEL.replace("return helpers.log(x)", "return x")
    (root / "model.py").write_text(changed)  # no watcher told the index
    assert index.facts(str(root / "model.py"), changed)["functions"]["model.Net.forward"][0] == STEP
    assert why_log(index, root) is None


def test_editor_events_and_answers_from_many_threads(project):
    root, index = project
    model, errors = str(root / "model.py"), []
    texts = [MODEL, MODEL.replace("return helpers.log(x)", "return x"), "\n" + MODEL]

    def edit():
        for n in range(60):
            index.buffer_changed(model, texts[n % len(texts)])

    def ask():
        try:
            for n in range(30):
                index.facts(model, texts[n % len(texts)])
                index.facts(str(root / "helpers.py"))
                index.settle()
        except Exception as exc:  # pragma: no cover - what the test is looking for
            errors.append(exc)

    threads = [threading.Thread(target=edit)] + [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    index.buffer_changed(model, MODEL)
    assert why_log(index, root)[0] == STEP


def test_a_new_recorded_run_is_read_without_an_edit(project):
    root, index = project
    assert why_log(index, root)[0] == STEP
    (root / ".perflsp").mkdir()
    (root / ".perflsp" / "hot.json").write_text(json.dumps({
        "version": HOT_VERSION, "steps": 10, "step_source": "optimizer.step", "command": "python train.py",
        "measured_at": "2026-12-01T14:00:00Z",
        "functions": [{"file": "helpers.py", "qualname": "log", "first_line": 1, "calls": 1, "steps": 1}]}))
    assert why_log(index, root) == [COLD, "measured: called, but not on every step"]


STAGE = """\
# one
# two
import torch


def stage(t):
    return t.pin_memory().cuda()


def train(model, loader):
    for x in loader:
        model(stage(x))
"""


def test_a_finding_is_never_placed_at_a_row_of_the_last_build_that_the_text_no_longer_has(tmp_path):
    (tmp_path / "train.py").write_text(STAGE)
    path = str(tmp_path / "train.py")
    index = ProjectIndex(tmp_path)
    index.load()
    pfl106 = Settings(select=("PFL106",), preview=True)  # reports in what calls make per step
    [finding] = check_source(STAGE, path, pfl106, facts=index.facts(path, STAGE))
    assert finding.hot.start.row == 12  # the call that makes `stage` per step
    moved = STAGE.replace("# one\n# two\n", "")  # the call is on row 10 now; the text has no row 12
    index.buffer_changed(path, moved)
    [finding] = check_source(moved, path, pfl106, facts=index.facts(path, moved))
    assert finding.hot.start.row == 4  # `def stage`, until the graph is built for the moved rows
    assert index.settle()
    [finding] = check_source(moved, path, pfl106, facts=index.facts(path, moved))
    assert finding.hot.start.row == 10
