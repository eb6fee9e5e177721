"""Readers validate a result before they use it: `profile_result.check` (stdlib, what the server
and the GPU machines run) agrees with `jsonschema` on real results and on any damage done to them,
and `read_result` refuses what a cloned repository could commit in a result's place."""
from __future__ import annotations

import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from perflsp import profile_result as pr

jsonschema = pytest.importorskip("jsonschema")
VALIDATOR = jsonschema.Draft202012Validator(pr.load_schema())


@pytest.fixture(scope="module")
def real_results(tmp_path_factory, peaks_cache, targets_dir):
    """An `ok` result and an `error` result, as `perflsp profile` writes them."""
    import subprocess
    import sys

    workspace = tmp_path_factory.mktemp("validated")
    env = dict(os.environ, PERFLSP_CACHE_DIR=str(peaks_cache))
    found = []
    for target in ("matmul", "no_such_function"):
        subprocess.run([sys.executable, "-m", "perflsp.runtime", "profile", f"{targets_dir / 'ref_cases.py'}:{target}",
                        "--min-time", "0.02", "--workspace", str(workspace), "--json", str(workspace / f"{target}.json")],
                       env=env, capture_output=True, timeout=180)
        found.append(json.loads((workspace / f"{target}.json").read_text()))
    assert [r["status"] for r in found] == ["ok", "error"]
    return found


def _json_values():
    scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False) | st.sampled_from(
        ["", "ok", "error", "cuda", "memory-bound", "warm", "exception"])
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["line", "regime", "kind", "x", "name"]), inner, max_size=3), max_leaves=6)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


@st.composite
def _damaged(draw, results):
    result = copy.deepcopy(draw(st.sampled_from(results)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_paths(result))[1:]))
        parent = result
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "line", "regime"]))] = draw(_json_values())
        else:
            parent[path[-1]] = draw(_json_values())
    return result


def test_real_results_are_valid(real_results):
    for result in real_results:
        VALIDATOR.validate(result)
        assert pr.check(result) == []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_check_agrees_with_jsonschema_on_damaged_results(real_results, data):
    result = data.draw(_damaged(real_results))
    valid = VALIDATOR.is_valid(result)
    problems = pr.check(result)
    assert (problems == []) == valid, (problems, [e.message for e in VALIDATOR.iter_errors(result)])


def test_read_result_refuses_what_is_not_a_valid_result(tmp_path, real_results):
    ok = real_results[0]
    cases = {
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "garbage.json": json.dumps({**ok, "lines": [{**ok["lines"][0], "line": "ten"}]}),
        "verdict.json": json.dumps({**ok, "verdict": {"regime": "io-bound"}}),
        "text.json": "not json",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    messages = {}
    for name in [*cases, "fifo.json", "zero.json"]:
        with pytest.raises(pr.ResultError) as caught:
            pr.read_result(tmp_path / name)
        messages[name] = str(caught.value).split(": ", 1)[1]
    assert messages["deep.json"] == "cannot read profile result: nested too deeply"
    assert messages["garbage.json"] == "not a valid profile result: $.lines[0].line: a string, expected integer"
    assert messages["verdict.json"].startswith("not a valid profile result: $.verdict: missing `summary`")
    assert messages["text.json"].startswith("cannot read profile result: Expecting value")
    assert messages["fifo.json"] == "cannot read profile result: skipped: a FIFO (named pipe), not a regular file"
    assert messages["zero.json"] == "cannot read profile result: skipped: a character device, not a regular file"
