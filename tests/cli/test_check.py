"""`perflsp check` end to end, in subprocesses, on real files."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT

LOOP_ITEM = textwrap.dedent(
    """\
    import torch

    def train(model, loader):
        for x, y in loader:
            loss = model(x).sum()
            print(loss.item())
    """
)
# PFL502, a preview rule with an unsafe fix: `torch.log1p(x)` differs in the last bits.
LOG = "import torch\n\n\n# perflsp: hot\ndef soft(x):\n    return torch.log(1 + x)\n"
# PFL301, a preview rule, reports the copy: a matmul reads the transposed view as it is.
SCORES = "import torch\n\n\ndef project(batches, w):\n    for x in batches:\n        yield x @ w.t().contiguous()\n"


def _json(result):
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_examples_show_many_rules(perflsp_cli):
    result = perflsp_cli("check", ROOT / "examples", "--output-format", "json", "--no-cache", "--preview")
    assert result.returncode == 1, result.stderr
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert len(codes) >= 15, sorted(codes)
    assert "PFL000" not in codes


def test_clean_file_exits_zero(perflsp_cli, tmp_path):
    (tmp_path / "ok.py").write_text("import torch\n\nx = torch.ones(3)\nprint(x.sum().item())\n")
    result = perflsp_cli("check", "ok.py", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_json_uses_ruff_field_names(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    [finding] = _json(perflsp_cli("check", "loop.py", "--output-format", "json", "--no-cache"))
    assert finding["code"] == "PFL101"
    assert finding["filename"].endswith("loop.py")
    assert finding["location"] == {"row": 6, "column": 15}  # 1-based, like Ruff
    assert finding["end_location"] == {"row": 6, "column": 26}
    assert finding["url"] is None  # no published site unless `rule-docs-url` names one (test_rule_urls.py)
    assert "for x, y in loader" in finding["hot"]["message"]
    assert finding["hot"]["context"] == "step-loop"  # the kind of evidence its tier is judged in (no backward here)
    assert "line 4" in finding["message"]


def test_syntax_error_is_one_finding_and_the_run_goes_on(perflsp_cli, tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    findings = _json(perflsp_cli("check", ".", "--output-format", "json", "--no-cache"))
    by_code = {f["code"]: f for f in findings}
    assert set(by_code) == {"PFL000", "PFL101"}
    assert by_code["PFL000"]["location"] == {"row": 1, "column": 7}
    assert "invalid syntax" in by_code["PFL000"]["message"]


def test_select_ignore_and_per_file_ignores(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "log.py").write_text(LOG)
    (tmp_path / "perflsp.toml").write_text("preview = true\n")  # PFL502 is a preview rule
    codes = lambda *a: sorted(f["code"] for f in _json(perflsp_cli("check", ".", "--output-format", "json", "--no-cache", *a)))
    assert codes() == ["PFL101", "PFL502"]
    assert codes("--select", "PFL5") == ["PFL502"]
    assert codes("--ignore", "PFL101") == ["PFL502"]
    assert codes("--per-file-ignores", "log.py:PFL502") == ["PFL101"]


def test_preview_from_the_command_line_and_the_config(perflsp_cli, tmp_path):
    (tmp_path / "perflsp.toml").unlink()
    (tmp_path / "scores.py").write_text(SCORES)
    codes = lambda *a: [f["code"] for f in _json(perflsp_cli("check", ".", "--output-format", "json", *a))]
    assert codes() == []
    assert codes("--preview") == ["PFL301"]  # with the cache on: preview is part of its key
    (tmp_path / "perflsp.toml").write_text("preview = true\n")
    assert codes() == ["PFL301"]
    assert codes("--no-preview") == []


def test_selecting_a_preview_rule_without_preview_warns(perflsp_cli, tmp_path):
    (tmp_path / "perflsp.toml").unlink()
    (tmp_path / "scores.py").write_text(SCORES)
    result = perflsp_cli("check", ".", "--select", "PFL301", "--no-cache")
    assert result.returncode == 0, result.stdout
    assert "warning: Selection `PFL301` has no effect because preview is not enabled" in result.stderr
    assert "Selection" not in perflsp_cli("check", ".", "--select", "PFL301", "--preview", "--no-cache").stderr


def test_suppression_comments(perflsp_cli, tmp_path):
    (tmp_path / "a.py").write_text(LOOP_ITEM.replace("print(loss.item())", "print(loss.item())  # noqa: PFL101"))
    (tmp_path / "b.py").write_text(LOOP_ITEM.replace("print(loss.item())", "print(loss.item())  # perflsp: ignore[PFL101]"))
    (tmp_path / "c.py").write_text("# perflsp: ignore-file\n" + LOOP_ITEM)
    (tmp_path / "d.py").write_text(LOOP_ITEM.replace("print(loss.item())", "print(loss.item())  # noqa: PFL102"))
    findings = _json(perflsp_cli("check", ".", "--output-format", "json", "--no-cache"))
    assert [Path(f["filename"]).name for f in findings] == ["d.py"]


def test_config_from_pyproject_and_bad_key(perflsp_cli, tmp_path):
    (tmp_path / "perflsp.toml").unlink()
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "pyproject.toml").write_text('[tool.perflsp]\npreview = true\nignore = ["PFL101"]\n')
    assert _json(perflsp_cli("check", ".", "--output-format", "json", "--no-cache")) == []
    (tmp_path / "pyproject.toml").write_text('[tool.perflsp]\nignroe = ["PFL101"]\n')
    result = perflsp_cli("check", ".", "--no-cache")
    assert result.returncode == 2
    assert "ignroe" in result.stderr and "did you mean `ignore`" in result.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.perflsp]\nselect = ["PFL999"]\n')
    result = perflsp_cli("check", ".", "--no-cache")
    assert result.returncode == 2 and "PFL999" in result.stderr


def test_hot_functions_and_report_cold_config(perflsp_cli, tmp_path):
    (tmp_path / "m.py").write_text("import torch\n\ndef fit_batch(x: torch.Tensor):\n    return x.sum().item()\n")
    assert _json(perflsp_cli("check", "m.py", "--output-format", "json", "--no-cache")) == []
    (tmp_path / "perflsp.toml").write_text('preview = true\nhot-functions = ["fit_batch"]\n')
    [finding] = _json(perflsp_cli("check", "m.py", "--output-format", "json", "--no-cache"))
    assert "fit_batch" in finding["hot"]["message"]
    (tmp_path / "perflsp.toml").write_text("preview = true\nreport-cold = true\n")
    [finding] = _json(perflsp_cli("check", "m.py", "--output-format", "json", "--no-cache"))
    assert finding["hot"] is None and finding["severity"] == "info"


def test_fix_diff_and_unsafe(perflsp_cli, tmp_path):
    target = tmp_path / "log.py"
    target.write_text(LOG)
    (tmp_path / "perflsp.toml").write_text("preview = true\n")  # PFL502 is a preview rule
    result = perflsp_cli("check", "log.py", "--fix", "--no-cache")
    assert result.returncode == 1 and target.read_text() == LOG  # PFL502's fix is unsafe
    result = perflsp_cli("check", "log.py", "--diff", "--unsafe-fixes")
    assert result.returncode == 1
    assert "-    return torch.log(1 + x)" in result.stdout and "+    return torch.log1p(x)" in result.stdout
    assert target.read_text() == LOG
    result = perflsp_cli("check", "log.py", "--fix", "--unsafe-fixes", "--no-cache")
    assert result.returncode == 0, result.stdout
    assert target.read_text() == LOG.replace("torch.log(1 + x)", "torch.log1p(x)")


def test_add_noqa_merges_existing_comments(perflsp_cli, tmp_path):
    target = tmp_path / "loop.py"
    target.write_text(LOOP_ITEM.replace("print(loss.item())", "print(loss.item())  # noqa: E501"))
    result = perflsp_cli("check", "loop.py", "--add-noqa", "--no-cache")
    assert "print(loss.item())  # noqa: E501, PFL101" in target.read_text()
    assert perflsp_cli("check", "loop.py", "--no-cache").returncode == 0, result.stderr


def test_stdin(perflsp_cli, tmp_path):
    (tmp_path / "perflsp.toml").write_text("preview = true\n")  # PFL502 is a preview rule
    result = perflsp_cli("check", "-", "--stdin-filename", "train.py", "--output-format", "json", stdin=LOOP_ITEM)
    [finding] = json.loads(result.stdout)
    assert finding["filename"] == "train.py" and result.returncode == 1
    result = perflsp_cli("check", "-", "--fix", "--unsafe-fixes", stdin=LOG)
    assert result.stdout == LOG.replace("torch.log(1 + x)", "torch.log1p(x)")


def test_notebook_cells_are_one_program(perflsp_cli, tmp_path):
    nb = {
        "cells": [
            {"cell_type": "code", "source": ["import torch\n", "def helper(t):\n", "    return (t * torch.ones((), device=\"cuda\")).item()\n"], "metadata": {}, "outputs": [], "execution_count": None},
            {"cell_type": "markdown", "source": ["# Training\n"], "metadata": {}},
            {"cell_type": "code", "source": ["%matplotlib inline\n", "for b in loader:\n", "    helper(b)\n"], "metadata": {}, "outputs": [], "execution_count": None},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    [finding] = _json(perflsp_cli("check", "nb.ipynb", "--output-format", "json", "--no-cache"))
    assert finding["code"] == "PFL101" and finding["cell"] == 1 and finding["location"]["row"] == 3
    assert finding["hot"]["cell"] == 3 and "called inside a step loop (line 3 of cell 3)" in finding["hot"]["message"]
    concise = perflsp_cli("check", "nb.ipynb", "--output-format", "concise", "--no-cache").stdout
    assert "nb.ipynb:cell_1:3:12: PFL101" in concise


def test_listing_a_cloned_folder_never_runs_its_git_config(perflsp_cli, tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    marker = tmp_path / "PWNED"
    subprocess.run(["git", "config", "core.fsmonitor", f"touch {marker}; false"], cwd=tmp_path, check=True)
    (tmp_path / "mine.py").write_text(LOOP_ITEM)
    assert _json(perflsp_cli("check", ".", "--output-format", "json", "--no-cache"))
    assert not marker.exists()


def test_gitignore_and_exclude(perflsp_cli, tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("generated/\n")
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "mine.py").write_text(LOOP_ITEM)
    (tmp_path / "perflsp.toml").unlink()  # it would shadow pyproject.toml
    (tmp_path / "pyproject.toml").write_text('[tool.perflsp]\npreview = true\nexclude = ["vendor"]\n')
    findings = _json(perflsp_cli("check", ".", "--output-format", "json", "--no-cache"))
    assert [Path(f["filename"]).name for f in findings] == ["mine.py"]
    # an explicit file argument is checked, unless --force-exclude (pre-commit's hook passes it)
    assert _json(perflsp_cli("check", "vendor/loop.py", "--output-format", "json", "--no-cache"))
    assert _json(perflsp_cli("check", "vendor/loop.py", "--force-exclude", "--output-format", "json", "--no-cache")) == []


def test_oversized_and_undecodable_files_are_skipped_with_a_reason(perflsp_cli, tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * 2_000_000)
    (tmp_path / "latin1.py").write_bytes(b"s = '\xe9'\n")
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    result = perflsp_cli("check", ".", "--output-format", "json", "--no-cache")
    assert [f["code"] for f in json.loads(result.stdout)] == ["PFL101"]
    assert "big.py: skipped: 12.0 MB is over perflsp's 5 MiB limit" in result.stderr
    assert "latin1.py: skipped: not UTF-8 text" in result.stderr


def test_missing_path_is_a_usage_error(perflsp_cli):
    result = perflsp_cli("check", "nope/")
    assert result.returncode == 2 and "nope" in result.stderr


def test_exit_zero(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    assert perflsp_cli("check", "loop.py", "--exit-zero", "--no-cache").returncode == 0


def test_rule_command(perflsp_cli):
    page = perflsp_cli("rule", "PFL101")
    assert page.returncode == 0
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
        assert heading in page.stdout
    assert "Tier: stable (on by default) in the body of a training loop" in page.stdout
    assert "Tier: preview" in perflsp_cli("rule", "PFL301").stdout
    listing = perflsp_cli("rule", "--all").stdout.splitlines()
    assert any(line.startswith("PFL503") and " stable " in line for line in listing)
    assert any(line.startswith("PFL101") and " stable in training loops " in line for line in listing)
    assert any(line.startswith("PFL301") and " preview " in line for line in listing)
    assert perflsp_cli("rule", "PFL999").returncode == 2


def test_import_perflsp_is_cheap():
    code = "import sys, perflsp; print(sorted(m for m in ('libcst', 'pygls', 'torch', 'numpy', 'lsprotocol') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_rules_never_import_torch():
    code = (
        "import sys, pkgutil, importlib, perflsp.rules as r\n"
        "for m in pkgutil.iter_modules(r.__path__): importlib.import_module('perflsp.rules.' + m.name)\n"
        "import perflsp.cli\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
