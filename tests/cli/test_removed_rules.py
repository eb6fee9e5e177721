"""Removed rules from the command line: named in configuration, in `# noqa`, or to `perflsp rule`."""
from __future__ import annotations

import json

from perflsp.rules.removed import REMOVED

LOOP_ITEM = "import torch\n\ndef train(model, loader):\n    for x, y in loader:\n        print(model(x).sum().item())\n"
NOTICE = "names PFL303 (contiguous-then-view), which was removed in"


def test_configuration_naming_a_removed_rule_warns_and_applies(perflsp_cli, tmp_path):
    (tmp_path / "perflsp.toml").write_text('preview = true\nignore = ["PFL303"]\nseverity = { PFL303 = "error" }\n')
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "loop.py").write_text(LOOP_ITEM)
    result = perflsp_cli("check", ".", "--output-format", "json", "--no-cache")
    assert result.returncode == 1, result.stderr  # the findings, not a config error (2)
    assert [f["code"] for f in json.loads(result.stdout)] == ["PFL101", "PFL101"]
    warnings = result.stderr.splitlines()
    # One warning per key, not per folder, naming the file and saying why the rule went.
    assert warnings == [f"perflsp: warning: {tmp_path / 'perflsp.toml'}: `{key}` {NOTICE} {REMOVED[0].removed_in} "
                        f"because {REMOVED[0].why}. Naming it has no effect: remove it" for key in ("ignore", "severity")]
    assert perflsp_cli("check", ".", "--no-cache", "--quiet").stderr == ""  # --quiet: findings only, as in Ruff


def test_a_removed_rule_on_the_command_line_warns(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    result = perflsp_cli("check", ".", "--no-cache", "--extend-select", "PFL303", "--per-file-ignores", "x.py:PFL303")
    assert result.returncode == 1, result.stderr
    assert [line.split(" names ")[0] for line in result.stderr.splitlines()] == [
        "perflsp: warning: command line: `extend-select`", "perflsp: warning: command line: `per-file-ignores.x.py`"]
    result = perflsp_cli("check", "-", "--stdin-filename", "loop.py", "--ignore", "PFL303", stdin=LOOP_ITEM)
    assert result.returncode == 1 and "PFL101" in result.stdout
    assert result.stderr.startswith(f"perflsp: warning: command line: `ignore` {NOTICE}")


def test_noqa_naming_a_removed_rule_checks_cleanly(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM.replace(".item())", ".item())  # noqa: PFL101, PFL303")
                                      .replace("import torch", "import torch  # noqa: PFL303"))
    result = perflsp_cli("check", ".", "--no-cache")
    assert (result.returncode, result.stderr) == (0, ""), result.stdout + result.stderr


def test_rule_prints_the_removal_notice(perflsp_cli):
    result = perflsp_cli("rule", "PFL303")
    assert (result.returncode, result.stderr) == (0, "")  # as `ruff rule` does for a removed rule
    assert result.stdout.startswith("# PFL303 contiguous-then-view\n")
    assert f"Removed in {REMOVED[0].removed_in} because {REMOVED[0].why}." in result.stdout
    assert "after a permute `.reshape()` must copy too" in result.stdout
    assert not any(line.startswith("PFL303") for line in perflsp_cli("rule", "--all").stdout.splitlines())
    assert perflsp_cli("rule", "PFL304").returncode == 2  # never a rule: still an error
