"""The re-measure loop: each function's history, the `comparison` block, and "near the roof".

Real torch on the CPU, the real CLI in a subprocess where the wording matters, real files.
Assertions are about what changed (code, inputs), never about absolute speed.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json

import pytest

torch = pytest.importorskip("torch")

from perflsp import comparison, profile_history, profile_result  # noqa: E402
from perflsp.runtime import cli  # noqa: E402
from perflsp.runtime.session import profile_function  # noqa: E402
from perflsp.runtime.timing import TimingOptions  # noqa: E402

FAST = TimingOptions(min_time_s=0.05, min_iters=5)

# A per-element Python loop (hundreds of tiny ops) and its vectorised rewrite: the same work.
SLOW_BODY = "    for i in range(x.shape[0]):\n        out[i] = x[i] * 2\n"
FAST_BODY = "    torch.mul(x, 2, out=out)\n"
TARGET = """\
import torch
import perflsp

N = {n}


def make():
    return torch.randn(N), torch.empty(N)


@perflsp.profile(setup=make)
def step(x, out):
{body}"""


def _validate(result):
    assert profile_result.check(result) == []
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(profile_result.load_schema()).validate(result)


def _profile_file(run_runtime, workspace, n, body):
    (workspace / "target.py").write_text(TARGET.format(n=n, body=body))
    out = run_runtime("profile", "target.py:step", "--min-time", "0.1", "--workspace", str(workspace), cwd=workspace)
    assert out.returncode == 0, out.stdout + out.stderr
    result = profile_result.read_result(profile_result.result_path(workspace, "target", "step"))
    _validate(result)
    return out, result


def _history(workspace, name="target.step.json"):
    return profile_history.load(workspace / ".perflsp" / "profiles" / "history" / name, workspace)


def test_a_rewrite_is_compared_with_the_previous_result(run_runtime, tmp_path):
    out, first = _profile_file(run_runtime, tmp_path, 200, SLOW_BODY)
    assert first["comparison"] is None and not any(line.startswith("change ") for line in out.stdout.splitlines())
    assert first["settings"]["arguments"] == ["float32[200] cpu", "float32[200] cpu"]

    out, second = _profile_file(run_runtime, tmp_path, 200, FAST_BODY)
    block = second["comparison"]
    assert block["previous_created_at"] == first["created_at"]
    assert block["previous_median_us"] == first["timing"]["median_us"]
    assert block["previous_regime"] == first["verdict"]["regime"]
    assert (block["source_changed"], block["inputs_changed"], block["device_changed"], block["ceilings_changed"]) == (
        True, False, False, False)
    assert block["speedup"] == pytest.approx(first["timing"]["median_us"] / second["timing"]["median_us"])
    assert block["speedup"] > 3 and block["significant"] is True
    [row] = [line for line in out.stdout.splitlines() if line.startswith("change ")]
    assert f"since {comparison.since(first['created_at'])}: {comparison._change(block)}" in row and "faster" in row
    assert block["significance_test"] == "bootstrap" and block["speedup_interval"][0] > 1
    assert comparison.since(first["created_at"]) in row
    if first["verdict"]["regime"] != second["verdict"]["regime"]:
        assert f"{first['verdict']['regime']} → {second['verdict']['regime']}" in row

    history = _history(tmp_path)
    assert history.warning is None
    assert [r["created_at"] for r in history.results] == [first["created_at"], second["created_at"]]


def test_smaller_inputs_are_not_a_speedup(run_runtime, tmp_path):
    _, big = _profile_file(run_runtime, tmp_path, 1_000_000, FAST_BODY)
    out, small = _profile_file(run_runtime, tmp_path, 1_000, FAST_BODY)
    block = small["comparison"]
    assert block["source_changed"] is False  # only the setup changed
    assert block["inputs_changed"] is True and block["speedup"] is None and block["significant"] is None
    assert any("float32[1000000] cpu" in note and "float32[1000] cpu" in note for note in block["notes"])
    [row] = [line for line in out.stdout.splitlines() if line.startswith("change ")]
    assert "faster" not in row and "not a speedup: the inputs changed" in row
    assert big["timing"]["median_us"] > small["timing"]["median_us"]  # it did get faster, and says why


def _finish(result, workspace):
    assert cli._finish(argparse.Namespace(json=None, plot=None), result, workspace) == 0
    path = profile_result.result_path(workspace, result["target"]["module"], result["target"]["qualname"])
    return profile_result.read_result(path), path


def double(x):
    return x * 2


def test_a_result_from_an_older_perflsp_is_compared_as_far_as_it_goes(cpu_peaks, tmp_path, capsys):
    result = profile_function(double, (torch.randn(1000),), device="cpu", peaks=cpu_peaks, timing=FAST)
    old = copy.deepcopy(result)
    old.update(schema_version=2, created_at="2026-11-30T09:15:00+00:00")
    del old["settings"]["arguments"], old["comparison"], old["device"]
    path = profile_result.result_path(tmp_path, result["target"]["module"], result["target"]["qualname"])
    profile_result.write_json_atomic(path, old)

    now, _ = _finish(result, tmp_path)
    block = now["comparison"]
    assert block["previous_created_at"] == old["created_at"]
    assert block["inputs_changed"] is None and block["device_changed"] is None and block["speedup"] is None
    assert block["source_changed"] is False and block["ceilings_changed"] is False
    [note] = block["notes"]
    assert "schema_version 2" in note and "settings.arguments" in note and "device" in note
    assert "not comparable: the previous result does not say which inputs or device" in capsys.readouterr().out
    # The old result is not lost: it starts the history.
    assert [r["created_at"] for r in _history(tmp_path, path.name).results] == [old["created_at"], now["created_at"]]


def test_a_damaged_history_is_set_aside_with_a_warning(cpu_peaks, tmp_path, capsys):
    result = profile_function(double, (torch.randn(1000),), device="cpu", peaks=cpu_peaks, timing=FAST)
    path = profile_result.result_path(tmp_path, result["target"]["module"], result["target"]["qualname"])
    damaged = profile_history.history_path(path)
    damaged.parent.mkdir(parents=True)
    damaged.write_text('{"format": 1, "results": [{"created_at": "cut sho')

    now, _ = _finish(result, tmp_path)
    err = capsys.readouterr().err
    [aside] = damaged.parent.glob(damaged.name + ".damaged-*")
    assert aside.read_text() == '{"format": 1, "results": [{"created_at": "cut sho'  # nothing lost
    assert f"perflsp: warning: profile history {damaged} is not JSON" in err and aside.name in err
    assert now["comparison"] is None
    assert [r["created_at"] for r in _history(tmp_path, path.name).results] == [now["created_at"]]


@pytest.mark.parametrize("content, problem", [
    ("[1, 2]", "is not a format-1 history (found 'list')"),
    ('{"format": 7, "results": []}', "is not a format-1 history (found 7)"),
    ('{"format": 1, "results": [3]}', "has no list of result objects"),
    ('{"format": 1}', "has no list of result objects"),
])
def test_history_shapes_that_cannot_be_used(tmp_path, content, problem):
    path = tmp_path / "history" / "m.f.json"
    path.parent.mkdir()
    path.write_text(content)
    history = profile_history.load(path, tmp_path)
    assert history.results == [] and problem in history.warning and history.writable
    assert not path.exists() and len(list(path.parent.glob("m.f.json.damaged-*"))) == 1


def test_a_history_that_cannot_be_moved_aside_is_left_alone(tmp_path):
    path = tmp_path / "history" / "m.f.json"
    path.parent.mkdir()
    path.write_text("not json")
    # Folders (not empty) where the next seconds' set-aside names go: the rename must fail.
    now = datetime.datetime.now(datetime.timezone.utc)
    for second in range(10):
        stamp = (now + datetime.timedelta(seconds=second)).strftime("%Y%m%dT%H%M%S")
        blocker = path.with_name(f"{path.name}.damaged-{stamp}")
        blocker.mkdir()
        (blocker / "keep").write_text("")
    history = profile_history.load(path, tmp_path)
    assert not history.writable and "could not be moved aside" in history.warning and "left as it is" in history.warning
    assert history.append({"status": "ok"}) is None
    assert path.read_text() == "not json"


def test_the_history_keeps_the_last_ten(tmp_path):
    path = tmp_path / "history" / "m.f.json"
    for i in range(13):
        history = profile_history.load(path, tmp_path)
        history.append({"status": "ok", "created_at": str(i)})
    stored = json.loads(path.read_text())
    assert stored["format"] == 1
    assert [r["created_at"] for r in stored["results"]] == [str(i) for i in range(3, 13)]
    assert profile_history.load(path, tmp_path).previous["created_at"] == "12"


def test_a_failed_run_is_published_but_kept_out_of_the_history(cpu_peaks, tmp_path):
    from perflsp.runtime import analysis

    ok = profile_function(double, (torch.randn(1000),), device="cpu", peaks=cpu_peaks, timing=FAST)
    _, path = _finish(ok, tmp_path)
    failed = analysis.with_error(analysis.new_result(ok["target"], ok["settings"]),
                                 analysis.error_block("exception", "ValueError: boom", phase="timing"))
    assert cli._finish(argparse.Namespace(json=None, plot=None), failed, tmp_path) == 3
    assert profile_result.read_result(path)["status"] == "error"
    again, _ = _finish(profile_function(double, (torch.randn(1000),), device="cpu", peaks=cpu_peaks, timing=FAST),
                       tmp_path)
    assert again["comparison"]["previous_created_at"] == ok["created_at"]  # the last successful one
    assert len(_history(tmp_path, path.name).results) == 2


def test_near_the_roof_the_first_lever_names_the_next_line(cpu_peaks, ref_cases):
    import dataclasses

    from perflsp.runtime import session
    from perflsp.runtime.channel import NullReporter

    args = ref_cases.mixed.__perflsp_profile__.setup()
    ctx, call, options = session.function_context(ref_cases.mixed, args, device="cpu", peaks=cpu_peaks, timing=FAST)
    measured = session.measure(call, "cpu", ctx.source_file, options, NullReporter())
    first = session.result_from(measured, ctx)
    assert first["verdict"]["regime"] == "compute-bound"
    # The same measurement against a float32 peak at 1/0.9 of what it attained: at 90% of its roof.
    at_roof = copy.deepcopy(cpu_peaks)
    at_roof["compute_flops_per_s"]["float32"] = first["totals"]["attained_flops_per_s"] / 0.9
    result = session.result_from(measured, dataclasses.replace(ctx, peaks=at_roof))
    _validate(result)
    near = result["verdict"]["near_roof"]
    assert near["ceiling"] == "compute" and near["fraction"] == pytest.approx(0.9)
    second = result["lines"][1]
    assert near["next"] == {k: second[k] for k in ("line", "code", "share", "regime")}
    lever = result["verdict"]["levers"][0]
    assert lever.startswith("near the roof: 90% of the measured float32 peak, at most 1.1x left to gain")
    assert f"look next at line {second['line']}" in lever
    # Just below 80%: not near.
    below = copy.deepcopy(cpu_peaks)
    below["compute_flops_per_s"]["float32"] = first["totals"]["attained_flops_per_s"] / 0.79
    assert session.result_from(measured, dataclasses.replace(ctx, peaks=below))["verdict"]["near_roof"] is None


def test_far_from_any_roof_there_is_no_near_roof(cpu_peaks, ref_cases):
    args = ref_cases.tiny_ops.__perflsp_profile__.setup()
    result = profile_function(ref_cases.tiny_ops, args, device="cpu", peaks=cpu_peaks, timing=FAST)
    assert result["verdict"]["regime"] == "overhead-bound"
    assert result["verdict"]["near_roof"] is None
    assert not result["verdict"]["levers"][0].startswith("near the roof")


def test_comparison_sentences():
    base = {"status": "ok", "timing": {"median_us": 120.0}, "verdict": {"regime": "compute-bound"}}
    block = {"previous_created_at": "2026-12-01T11:02:00+00:00", "previous_median_us": 410.0, "speedup": 410 / 120,
             "significant": True, "previous_regime": "memory-bound", "source_changed": True,
             "ceilings_changed": False, "inputs_changed": False, "device_changed": False, "notes": []}
    when = comparison.since(block["previous_created_at"])
    text = comparison.describe(dict(base, comparison=block))
    assert text == f"410 µs → 120 µs since {when}: 3.42× faster; memory-bound → compute-bound"
    assert comparison.short(dict(base, comparison=block)) == f"3.42× faster since {when}"
    slower = dict(block, speedup=0.5, previous_regime="compute-bound", source_changed=False)
    assert comparison.describe(dict(base, comparison=slower)) == f"410 µs → 120 µs since {when}: 2× slower; same code"
    noise = dict(block, speedup=1.02, significant=False)
    assert ": 1.02× faster, but the runs are too noisy to tell (their p10–p90 ranges overlap)" in comparison.describe(
        dict(base, comparison=noise))
    assert comparison.short(dict(base, comparison=noise)) == f"no clear change since {when}"
    other = dict(block, speedup=None, significant=None, device_changed=True)
    assert comparison.describe(dict(base, comparison=other)).endswith("not comparable: another device")
    assert comparison.describe(base) is None and comparison.short(base) is None
    assert comparison.since("not a time") == "not a time"


def test_arguments_are_described_in_a_few_words():
    from perflsp.runtime.arguments import describe_arguments

    model = torch.nn.Linear(4, 2)
    described = describe_arguments(
        (torch.zeros(3, 5, dtype=torch.bfloat16), model, [torch.ones(2)] * 10, {"lr": 0.1}, "x" * 100),
        {"steps": 3, "opt": object()})
    assert described == [
        "bfloat16[3, 5] cpu",
        "Linear(10 parameters, float32 cpu)",
        "[" + ", ".join(["float32[2] cpu"] * 8) + ", ... 10 in all]",
        "{'lr': 0.1}",
        "'" + "x" * 56 + "...",
        "steps=3",
        "opt=object",
    ]
