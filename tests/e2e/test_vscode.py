"""The VS Code extension (`editors/vscode`): its unit tests, its settings contract with the server,
and a real VS Code workbench using the built `.vsix` against this repository's server.

The workbench is code-server from the npm registry, driven by Playwright in Debian's Chromium,
everything on loopback (the official test runners download VS Code from Microsoft, unreachable
here; see ../../../shared/notes/vscode-e2e.md). What it needs is installed on first use and cached
in `.e2e-cache/` (about 10 minutes and 1.1 GB the first time, on 2 cores); afterwards the whole
module takes about two minutes (one code-server session for every check). The tests skip, with the reason, only when the machine cannot install
a tool (no npm registry, not root for apt-get); with `PERFLSP_E2E_REQUIRED=1` that is a failure.

Screenshots and logs of the workbench session go to `.e2e-cache/artifacts/vscode/`; the README's
screenshot (`editors/vscode/images/problems.png`) is written when missing, or rewritten with
`PERFLSP_UPDATE_SCREENSHOTS=1`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE / "vscode"))

import vscode_toolchain as toolchain  # noqa: E402
import vscode_workbench as workbench  # noqa: E402

EXTENSION_DIR = ROOT / "editors" / "vscode"
ARTIFACTS = ROOT / ".e2e-cache" / "artifacts" / "vscode"
README_SCREENSHOT = EXTENSION_DIR / "images" / "problems.png"
REQUIRED = os.environ.get("PERFLSP_E2E_REQUIRED") == "1"

# The settings the extension contributes: agreed with the server (server/settings.py reads the
# mapped ones); adding one means deciding whether the server receives it (src/settings.ts).
SETTINGS = {
    "perflsp.path", "perflsp.interpreter", "perflsp.lintOn", "perflsp.workspaceDiagnostics", "perflsp.select",
    "perflsp.ignore", "perflsp.severity", "perflsp.preview", "perflsp.profile.enabled", "perflsp.profile.timeout", "perflsp.logLevel",
    "perflsp.record.command", "perflsp.record.steps",
}
COMMANDS = {
    "perflsp.restart": "Restart server",
    "perflsp.showLogs": "Show logs",
    "perflsp.profile": "Profile this function",
    "perflsp.tryCompile": "Try torch.compile on this function",
    "perflsp.graphBreaks": "Find torch.compile graph breaks",
    "perflsp.record": "Record a run (confirm or refute the findings)",
    "perflsp.fixAll": "Fix all perflsp findings",
    "perflsp.openRuleDocs": "Open rule documentation",
}
IGNORED_IN_WORKSPACE = "PFL202"  # switched off in the workspace settings: must not reach the Problems panel

# A function the runtime can profile: its marker provides the inputs.
PROFILE_TARGET = '''\
import torch

import perflsp


def make_inputs():
    return (torch.randn(256, 256),)


@perflsp.profile(setup=make_inputs, warmup=1, iters=3)
def scaled_matmul(x):
    y = x @ x
    return y * 0.5 + 1.0
'''


# A notebook whose second cell has a host-device sync in a loop (PFL101); `running_loss` is a name
# no example uses, so its Problems row can only come from this notebook.
NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": ["import torch\n"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": [
            "def train(model, loader):\n", "    for x in loader:\n", "        running_loss = model(x).sum()\n",
            "        print(running_loss.item())\n"]},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"PERFLSP_E2E_REQUIRED=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def node_home() -> Path:
    try:
        return toolchain.node_home()
    except toolchain.Unavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="module")
def extension_deps(node_home: Path) -> Path:
    try:
        return workbench.extension_deps(node_home)
    except toolchain.Unavailable as exc:
        unavailable(str(exc))


def manifest() -> Dict[str, Any]:
    return json.loads((EXTENSION_DIR / "package.json").read_text())


# --- the extension's own tests and its contract with the server ----------------------------------------

def test_extension_unit_tests(node_home: Path, extension_deps: Path, tmp_path: Path):
    """vitest: server discovery, settings mapping, the function under the cursor (editors/vscode/test)."""
    out = tmp_path / "vitest.json"
    proc = subprocess.run([str(extension_deps / ".bin" / "vitest"), "run", "--reporter=default", "--reporter=json",
                           f"--outputFile.json={out}"], cwd=EXTENSION_DIR, env=toolchain.npm_env(node_home),
                          capture_output=True, text=True, timeout=300)
    assert out.is_file(), f"vitest wrote no report ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    failed = [f"{t['fullName']}: {' '.join(t['failureMessages'])[:500]}"
              for suite in result["testResults"] for t in suite["assertionResults"] if t["status"] != "passed"]
    assert not failed, "\n".join(failed)
    assert result["numPassedTests"] == result["numTotalTests"] > 0, proc.stdout[-2000:]
    suites = {Path(s["name"]).name for s in result["testResults"]}
    assert {"discovery.test.ts", "settings.test.ts", "profile.test.ts"} <= suites
    assert proc.returncode == 0, proc.stdout[-3000:]


def server_settings(node_home: Path, values: Dict[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
    """What src/settings.ts sends the server when the user set `values` (others at their default).

    Node 24 runs the TypeScript source directly (type stripping): the very mapping the extension
    bundles, without a build.
    """
    defaults = {key.removeprefix("perflsp."): spec.get("default")
                for key, spec in manifest()["contributes"]["configuration"]["properties"].items()}
    script = (
        "const { serverSettings } = await import('./src/settings.ts');"
        f"const defaults = {json.dumps(defaults)}, user = {json.dumps(values)}, context = {json.dumps(context)};"
        "const lookup = (k) => (k in user ? { value: user[k], set: true } : { value: defaults[k], set: false });"
        "console.log(JSON.stringify(serverSettings(lookup, context)));"
    )
    proc = subprocess.run([str(node_home / "bin" / "node"), "--input-type=module", "-e", script], cwd=EXTENSION_DIR,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_settings_reach_the_server_under_the_keys_it_reads(node_home: Path):
    from perflsp.config import Settings
    from perflsp.server.settings import EditorSettings, parse

    # Nothing set: the server keeps its own defaults, and the project's [tool.perflsp] is untouched.
    untouched = parse(server_settings(node_home, {}, {"trusted": True}))
    assert untouched == EditorSettings()
    assert untouched.problems == () and untouched.overrides == ()

    # Everything set: every value arrives, nothing is rejected as an unknown key or a bad value.
    # (`interpreter` is resolved by the extension: the setting, else the Python extension's.)
    sent = server_settings(node_home, {
        "path": ["/x/perflsp"], "interpreter": ["/x/python"], "lintOn": "save", "workspaceDiagnostics": True,
        "select": ["PFL1", "PFL502"], "ignore": ["PFL104"], "severity": {"PFL1": "error"},
        "profile.enabled": False, "profile.timeout": 42, "logLevel": "debug",
    }, {"trusted": True, "interpreter": ["/x/python"]})
    editor = parse(sent)
    assert editor.problems == ()
    assert (editor.run, editor.workspace_diagnostics, editor.log_level) == ("onSave", True, "debug")
    assert (editor.interpreter, editor.profile_enabled, editor.profile_timeout) == (("/x/python",), False, 42.0)
    overrides = editor.overrides_dict()
    assert overrides == {"select": ["PFL1", "PFL502"], "ignore": ["PFL104"], "severity": {"PFL1": "error"}}
    merged = Settings().with_overrides(overrides, "editor settings")  # raises on an unknown key
    assert merged.select == ("PFL1", "PFL502") and merged.ignore == ("PFL104",)

    # An untrusted workspace: the server itself refuses to profile, whatever the setting says.
    assert parse(server_settings(node_home, {"profile.enabled": True}, {"trusted": False})).profile_enabled is False


def test_manifest_contributes_the_agreed_settings_and_commands():
    m = manifest()
    props = m["contributes"]["configuration"]["properties"]
    assert set(props) == SETTINGS
    for key, spec in props.items():
        assert "default" in spec and (spec.get("markdownDescription") or spec.get("description")), key
    # The defaults are the server's and the engine's own, so "not set" and "default" agree.
    from perflsp.config import Settings
    from perflsp.server.settings import EditorSettings

    assert {"type": "onType", "save": "onSave"}[props["perflsp.lintOn"]["default"]] == EditorSettings().run
    assert props["perflsp.logLevel"]["default"] == EditorSettings().log_level
    assert props["perflsp.workspaceDiagnostics"]["default"] == EditorSettings().workspace_diagnostics
    assert props["perflsp.profile.timeout"]["default"] == Settings().profile_timeout
    assert {c["command"]: c["title"] for c in m["contributes"]["commands"]} == COMMANDS
    trust = m["capabilities"]["untrustedWorkspaces"]
    assert trust["supported"] == "limited"
    assert set(trust["restrictedConfigurations"]) == {"perflsp.path", "perflsp.interpreter", "perflsp.profile.enabled"}
    assert {"onLanguage:python", "onNotebook:jupyter-notebook"} <= set(m["activationEvents"])


# --- a real workbench ------------------------------------------------------------------------------------

def findings(path: Path, *args: str) -> List[Dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "perflsp", "check", "--output-format", "json", "--exit-zero",
                           "--no-cache", *args, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def apply_edits(text: str, edits: List[Dict[str, Any]]) -> str:
    """A fix's edits (1-based rows and columns, as `perflsp check` prints them) applied to `text`."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(loc: Dict[str, int]) -> int:
        return starts[loc["row"] - 1] + loc["column"] - 1

    for edit in sorted(edits, key=lambda e: offset(e["location"]), reverse=True):
        text = text[:offset(edit["location"])] + edit["content"] + text[offset(edit["end_location"]):]
    return text


def server_offers_profiling() -> bool:
    from perflsp.server.app import create_server

    return "perflsp.profileFunction" in create_server().protocol.fm.commands


@dataclass
class Session:
    report: Dict[str, Any]
    workspace: Path
    installed: str
    expected: Dict[str, str]  # file name -> the text it must have after the scenario
    scenario: Dict[str, Any]

    def step(self, name: str) -> Dict[str, Any]:
        step = self.report["steps"].get(name)
        assert step is not None, f"the workbench session never reached the step {name!r}"
        assert step["ok"], f"step {name!r} failed (screenshot {step.get('screenshot')}):\n{step['error']}"
        return step


@pytest.fixture(scope="module")
def session(node_home: Path, tmp_path_factory) -> Session:
    try:
        chromium = toolchain.chromium()
        tools = toolchain.tools_home(node_home)
        workbench.extension_deps(node_home)
    except toolchain.Unavailable as exc:
        unavailable(str(exc))
    vsix = workbench.build_vsix(node_home)

    tmp = tmp_path_factory.mktemp("vscode")
    workspace = tmp / "examples"
    shutil.copytree(ROOT / "examples", workspace, ignore=shutil.ignore_patterns(".perflsp_cache", "__pycache__"))
    (workspace / "profile_target.py").write_text(PROFILE_TARGET)
    (workspace / "training.ipynb").write_text(json.dumps(NOTEBOOK, indent=1))
    (workspace / ".vscode").mkdir()
    # The extension runs this repository's server, with settings that show the mapping at work.
    (workspace / ".vscode" / "settings.json").write_text(json.dumps({
        "perflsp.path": [sys.executable, "-m", "perflsp", "serve"],
        "perflsp.workspaceDiagnostics": True,
        "perflsp.ignore": [IGNORED_IN_WORKSPACE],
        "perflsp.preview": True,  # PFL502, whose fix the test applies, is a preview rule
    }, indent=2))

    # Where the findings are, from the CLI (the same engine): the test does not hard-code lines of
    # examples that others edit.
    attention = findings(workspace / "attention.py", "--ignore", IGNORED_IN_WORKSPACE, "--preview")
    pfl502 = next((f for f in attention if f["code"] == "PFL502" and f["fix"]), None)
    pfl101 = next((f for f in attention if f["code"] == "PFL101"), None)
    assert pfl502 and pfl101, "examples/attention.py no longer has a fixable PFL502 and a PFL101, which this test uses"
    original = (workspace / "attention.py").read_text()
    expected = {"attention.py": apply_edits(original, pfl502["fix"]["edits"])}
    fixed = tmp / "fixed" / "train_loop.py"
    fixed.parent.mkdir()
    shutil.copy(workspace / "train_loop.py", fixed)
    subprocess.run([sys.executable, "-m", "perflsp", "check", "--fix", "--exit-zero", "--no-cache", "--preview", "--ignore",
                    IGNORED_IN_WORKSPACE, str(fixed)], capture_output=True, text=True, timeout=120, check=True)
    expected["train_loop.py"] = fixed.read_text()
    assert expected["train_loop.py"] != (workspace / "train_loop.py").read_text(), "train_loop.py has no safe fix left"
    body = PROFILE_TARGET.splitlines().index("    y = x @ x") + 1
    scenario = {
        "problems": {"present": ["PFL101", "PFL502"], "absent": [IGNORED_IN_WORKSPACE]},
        "hover": {"file": "attention.py", "line": pfl502["location"]["row"], "column": pfl502["location"]["column"],
                  "code": "PFL502"},
        "ruleDocs": {"file": "attention.py", "line": pfl101["location"]["row"], "column": pfl101["location"]["column"],
                     "code": "PFL101"},
        "quickfix": {"file": "attention.py", "line": pfl502["location"]["row"],
                     "column": pfl502["location"]["column"], "title": f"PFL502: {pfl502['fix']['message']}"},
        "fixAll": {"file": "train_loop.py"},
        "notebook": {"file": "training.ipynb", "code": "PFL101", "text": "running_loss.item()"},
        "restart": {"brokenPath": str(tmp / "no-such-perflsp")},
        "profile": {"file": "profile_target.py", "line": body, "column": 5, "timeoutMs": 240_000},
    }

    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    server = workbench.CodeServer(tools, node_home, tmp / "code-server", workspace)
    installed = server.install(vsix)
    config = tmp / "drive.json"
    config.write_text(json.dumps({
        "toolsHome": str(tools), "chromium": str(chromium), "profileDir": str(tmp / "chromium-profile"),
        "url": server.url, "workspace": str(workspace), "artifacts": str(ARTIFACTS),
        "report": str(ARTIFACTS / "report.json"), "timeoutMs": 30_000, "scenario": scenario,
    }, indent=2))
    server.start()
    try:
        drive = workbench.run_in_group([str(node_home / "bin" / "node"), str(HERE / "vscode" / "drive.mjs"), str(config)],
                                       env=toolchain.npm_env(node_home), timeout=600)
    finally:
        server.stop()
        (ARTIFACTS / "code-server.log").write_text(server.log())
    (ARTIFACTS / "drive.log").write_text(drive.stdout + drive.stderr)
    report_path = ARTIFACTS / "report.json"
    assert report_path.is_file(), f"the Playwright driver wrote no report ({drive.returncode}):\n{drive.stderr[-4000:]}"
    report = json.loads(report_path.read_text())

    hover_shot = ARTIFACTS / "hover.png"
    if hover_shot.is_file() and (not README_SCREENSHOT.is_file() or os.environ.get("PERFLSP_UPDATE_SCREENSHOTS") == "1"):
        shutil.copy(hover_shot, README_SCREENSHOT)
    return Session(report, workspace, installed, expected, scenario)


def test_vsix_installs_and_the_server_starts(session: Session):
    assert "perflsp.perflsp@" in session.installed
    session.step("workbench")
    status = " ".join(session.step("server")["status"])
    # The status bar names the version and how the server was found (the workspace's perflsp.path).
    assert "is running (found via perflsp.path)" in status and sys.executable in status


def test_problems_panel_lists_perflsp_findings(session: Session):
    step = session.step("problems")
    for code in session.scenario["problems"]["present"]:
        rows = step["rows"][code]
        assert any("perflsp" in row for row in rows), rows  # the source shown beside the code
    # perflsp.ignore from the workspace settings reached the server through workspace/configuration.
    assert step["ignored"][IGNORED_IN_WORKSPACE] == []


def test_hover_shows_the_rule_explanation(session: Session):
    text = session.step("hover")["text"]
    assert "PFL502" in text and "fusable-math" in text
    assert "Why is this bad?" in text  # the rule's page, not only the one-line message
    assert "logsumexp" in text


def test_quick_fix_rewrites_the_file(session: Session):
    step = session.step("quickfix")
    assert any("Ignore PFL502 on this line" in title for title in step["titles"]), step["titles"]
    # Exactly the fix the engine computes, saved to disk, and nothing else changed.
    assert (session.workspace / "attention.py").read_text() == session.expected["attention.py"]


def test_fix_all_applies_the_safe_fixes(session: Session):
    session.step("fixAll")
    assert (session.workspace / "train_loop.py").read_text() == session.expected["train_loop.py"]


def test_open_rule_documentation(session: Session):
    step = session.step("ruleDocs")
    assert any("PFL101" in tab for tab in step["tabs"]), step["tabs"]
    # The page `perflsp rule PFL101` prints, rendered in VS Code's Markdown preview.
    assert "PFL101 item-in-hot-code" in step["text"] and "Use instead" in step["text"], step["text"][:500]


def test_notebook_cells_get_diagnostics(session: Session):
    step = session.step("notebook")
    assert step["squiggles"] > 0
    assert any("perflsp" in row and "PFL101" in row for row in step["rows"]), step["rows"]


def test_profile_this_function(session: Session):
    step = session.step("profile")
    messages = " ".join(step["messages"])
    if server_offers_profiling():
        # The verdict of a CPU profile of the marked function: "perflsp: scaled_matmul: <regime> · ...".
        from perflsp.profile_result import REGIMES

        assert any(f"perflsp: scaled_matmul: {regime}" in messages for regime in REGIMES), messages
        # ... and in the editor: the code lens above the function, the figures on its lines.
        assert any(regime in lens for lens in step["lenses"] for regime in REGIMES), step["lenses"]
        assert step["squiggles"] > 0
    else:
        # Until the server offers perflsp.profileFunction the command says so, with the upgrade command.
        assert "profiling needs a newer perflsp server" in messages
        assert f"{sys.executable} -m pip install -U /path/to/perflsp" in messages  # discovery.ts PIP_PACKAGE


def test_a_changed_server_setting_restarts_the_server(session: Session):
    step = session.step("restart")
    broken = session.scenario["restart"]["brokenPath"]
    # The message names the setting and the command, and why it failed.
    assert f"perflsp.path ({broken} serve) does not work: ENOENT" in step["error"], step["error"]
    assert any("does not work" in label for label in step["failedStatus"])
    assert any("is running (found via perflsp.path)" in label for label in step["status"])
