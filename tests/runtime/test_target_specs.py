"""Target strings, module naming, 'what does this file define', the capture rewrite, --run parsing."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perflsp.runtime import program
from perflsp.runtime.targets import (SpecSyntaxError, TargetError, check_exists, defined_names, module_name_for,
                                     parse_target)
from perflsp.runtime.worker import normalize_inputs, user_traceback


def test_file_and_method_targets(tmp_path):
    spec = parse_target("sub/train.py:Model.forward", tmp_path)
    assert spec.file == (tmp_path / "sub" / "train.py").resolve()
    assert (spec.module, spec.qualname, spec.import_root) == ("train", "Model.forward", (tmp_path / "sub").resolve())


def test_module_targets():
    spec = parse_target("pkg.models:step")
    assert (spec.file, spec.module, spec.qualname) == (None, "pkg.models", "step")


@pytest.mark.parametrize("text", ["train.py", "train.py:", ":step", "train.py:1x", "pkg mod:step", "a.py:Model..f"])
def test_malformed_targets(text):
    with pytest.raises(SpecSyntaxError):
        parse_target(text)


def test_module_name_follows_packages(tmp_path):
    (tmp_path / "proj" / "pkg" / "sub").mkdir(parents=True)
    for folder in ("pkg", "pkg/sub"):
        (tmp_path / "proj" / folder / "__init__.py").write_text("")
    file = tmp_path / "proj" / "pkg" / "sub" / "mod.py"
    assert module_name_for(file) == ("pkg.sub.mod", tmp_path / "proj")
    assert module_name_for(tmp_path / "script.py") == ("script", tmp_path)


def test_what_a_file_defines(targets_dir):
    names = defined_names(targets_dir / "ref_cases.py")
    assert {"matmul", "tiny_ops", "Model", "Model.forward", "Model.__init__"} <= set(names)


def test_missing_names_and_files_are_reported_with_the_definitions(targets_dir, tmp_path):
    with pytest.raises(TargetError) as missing:
        check_exists(parse_target(f"{targets_dir / 'ref_cases.py'}:matmull"))
    assert "it defines:" in str(missing.value) and "matmul" in missing.value.defined
    with pytest.raises(TargetError, match="no such file"):
        check_exists(parse_target(f"{tmp_path / 'nope.py'}:f"))
    check_exists(parse_target(f"{targets_dir / 'ref_cases.py'}:Model.forward"))


SOURCE = """
import functools

calls = []

def f(x):
    return x + 1

class C:
    @staticmethod
    @functools.lru_cache(maxsize=None)
    def g(x):
        return x * 2
"""


def test_capture_rewrite_wraps_the_target_and_keeps_line_numbers():
    namespace = {}
    exec(program.add_capture(SOURCE, "<mem>", "f"), namespace)
    assert namespace["f"].__wrapped__.__code__.co_firstlineno == 6
    assert namespace["f"](1) == 2  # no session active: a plain pass-through
    namespace = {}
    exec(program.add_capture(SOURCE, "<mem>", "C.g"), namespace)
    g = namespace["C"].__dict__["g"]
    assert isinstance(g, staticmethod)  # the capture sits inside staticmethod
    assert hasattr(g.__func__, "__wrapped__") and namespace["C"].g(3) == 6
    with pytest.raises(TargetError):
        program.add_capture(SOURCE, "<mem>", "C")


@pytest.mark.parametrize("command, expected", [
    ("python train.py --steps 40", ("script", "train.py", ["train.py", "--steps", "40"])),
    ("python3 -u -W ignore train.py", ("script", "train.py", ["train.py"])),
    ("python -m pkg.train --fast", ("module", "pkg.train", ["pkg.train", "--fast"])),
    (f"{sys.executable} 'my script.py'", ("script", "my script.py", ["my script.py"])),
])
def test_run_commands(command, expected):
    assert program.parse_command(command) == expected


@pytest.mark.parametrize("command, message", [
    ("torchrun train.py", "must start with python"),
    ("python -c 'print(1)'", "put the program in a file"),
    ("python", "names no script"),
    ("", "empty"),
    ("python -m", "needs a module"),
])
def test_unusable_run_commands(command, message):
    with pytest.raises(program.UsageError, match=message):
        program.parse_command(command)


def test_setup_return_values():
    assert normalize_inputs((1, 2)) == ((1, 2), {})
    assert normalize_inputs({"x": 1}) == ((), {"x": 1})
    assert normalize_inputs(((1,), {"y": 2})) == ((1,), {"y": 2})
    assert normalize_inputs(None) == ((), {})
    assert normalize_inputs([1, 2]) == (([1, 2],), {})


def test_user_traceback_hides_the_runtime_frames():
    from perflsp.runtime import timing

    def user_code():
        raise KeyError("k")

    try:
        timing.timed_calls(user_code, 1, "cpu")  # the user's code called from runtime code
    except KeyError as exc:
        text = user_traceback(exc)
    assert "in user_code" in text and "KeyError: 'k'" in text
    assert "in timed_calls" not in text and str(Path(timing.__file__)) not in text


def test_a_program_run_refuses_a_generator_target_as_it_loads():
    source = "def step(n):\n    def inner():\n        yield 1\n    return n\n\n\ndef lazy(n):\n    yield from range(n)\n"
    program.add_capture(source, "m.py", "step")  # only a nested function yields
    with pytest.raises(program.UsageError, match="lazy is a generator function"):
        program.add_capture(source, "m.py", "lazy")
