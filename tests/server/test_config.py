"""Configuration end to end: editor settings, pyproject changes, bad config, multi-root workspaces."""
from __future__ import annotations

import asyncio
import os

import pytest
from lsprotocol import types as T

from tests.server.conftest import NEOVIM, TRAIN, VSCODE

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")


def codes(diagnostics):
    return sorted(d.code for d in diagnostics)


async def test_neovim_pushes_settings_in_did_change_configuration(start):
    session = await start(NEOVIM)  # Neovim 0.7 has no workspace/configuration: it pushes
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    session.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"perflsp": {"ignore": ["PFL101"], "severity": {"PFL502": "error"}}}))
    diagnostics = await session.diagnostics(uri, where=lambda ds: "PFL101" not in codes(ds))
    assert codes(diagnostics) == ["PFL106", "PFL502"]
    assert next(d for d in diagnostics if d.code == "PFL502").severity == T.DiagnosticSeverity.Error


async def test_vscode_settings_are_pulled_and_pulled_again_on_change(start):
    # VS Code answers workspace/configuration, and sends `settings: null` on change.
    session = await start(VSCODE, settings={"perFileIgnores": {"train.py": ["PFL106"]}})
    uri = session.open("train.py", TRAIN)
    diagnostics = await session.diagnostics(uri, version=1)
    assert codes(diagnostics) == ["PFL101", "PFL502"]  # camelCase keys map to [tool.perflsp]'s
    session.client.set_configuration({"perflsp": {}})
    session.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=None))
    diagnostics = await session.diagnostics(uri, where=lambda ds: len(ds) == 3)
    assert codes(diagnostics) == ["PFL101", "PFL106", "PFL502"]


@pytest.mark.parametrize("spec", [NEOVIM, VSCODE])
async def test_a_pyproject_change_relints_open_files(start, spec):
    session = await start(spec)
    session.write("pyproject.toml", "[project]\nname = 'demo'\n\n[tool.perflsp]\n")
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    pyproject = session.write("pyproject.toml", "[project]\nname = 'demo'\n\n[tool.perflsp]\nignore = [\"PFL502\"]\n")
    os.utime(pyproject, ns=(1, 1))  # a different mtime even on coarse file systems
    if spec == VSCODE:
        # VS Code watches the files the server registered for and reports the change.
        watchers = [w["globPattern"] for r in session.client.registrations
                    if r.method == T.WORKSPACE_DID_CHANGE_WATCHED_FILES for w in r.register_options["watchers"]]
        assert "**/pyproject.toml" in watchers
        session.client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(
            changes=[T.FileEvent(uri=pyproject.as_uri(), type=T.FileChangeType.Changed)]))
    # Neovim 0.7 cannot watch files: the server notices the change itself.
    diagnostics = await session.diagnostics(uri, where=lambda ds: "PFL502" not in codes(ds))
    assert codes(diagnostics) == ["PFL101", "PFL106"]


async def test_a_bad_config_is_shown_once_and_linting_goes_on_with_defaults(start):
    session = await start(VSCODE)
    session.write("pyproject.toml", "[tool.perflsp]\nselect = [\"PFL\"]\nhot-functionz = [\"step\"]\n")
    first = session.open("train.py", TRAIN)
    second = session.open("other.py", TRAIN)
    # Both files are still checked, with the default settings.
    assert codes(await session.diagnostics(first, version=1)) == ["PFL101", "PFL106", "PFL502"]
    assert codes(await session.diagnostics(second, version=1)) == ["PFL101", "PFL106", "PFL502"]
    await asyncio.sleep(0.2)
    messages = [m for m in session.client.messages if "hot-functionz" in m.message]
    assert len(messages) == 1  # once, not once per file or per keystroke
    assert messages[0].type == T.MessageType.Error
    assert "did you mean `hot-functions`" in messages[0].message
    # One diagnostic on the config file itself, on the offending key's line.
    [config] = await session.diagnostics(session.uri("pyproject.toml"), where=lambda ds: len(ds) == 1)
    assert config.range.start.line == 2 and config.severity == T.DiagnosticSeverity.Error
    # Fixing the file clears it.
    session.write("pyproject.toml", "[tool.perflsp]\nselect = [\"PFL\"]\nhot-functions = [\"step\"]\n")
    session.client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(
        changes=[T.FileEvent(uri=session.uri("pyproject.toml"), type=T.FileChangeType.Changed)]))
    assert await session.diagnostics(session.uri("pyproject.toml"), where=lambda ds: not ds) == []


async def test_a_removed_rule_named_in_the_settings_is_a_warning_and_they_apply(start):
    # PFL303 was removed: a project's config and editor settings that still name it keep working.
    session = await start(VSCODE, settings={"severity": {"PFL303": "error"}})
    pyproject = session.write("pyproject.toml", "[tool.perflsp]\nignore = [\"PFL101\", \"PFL303\"]\n")
    first = session.open("train.py", TRAIN)
    second = session.open("other.py", TRAIN)
    # The file's settings apply, not the defaults a config error falls back to: PFL101 stays ignored.
    assert codes(await session.diagnostics(first, version=1)) == ["PFL106", "PFL502"]
    assert codes(await session.diagnostics(second, version=1)) == ["PFL106", "PFL502"]
    await asyncio.sleep(0.2)
    warnings = [m for m in session.client.messages if "PFL303" in m.message]
    # Once each (not once per file), blamed on who names it, as warnings that say why it went.
    assert sorted(m.message.split(" names ")[0] for m in warnings) == sorted([
        "perflsp: editor settings: `severity`", f"perflsp: {pyproject.resolve()}: `ignore`"])
    for message in warnings:
        assert message.type == T.MessageType.Warning
        assert "PFL303 (contiguous-then-view), which was removed in" in message.message
        assert "`.reshape()` must copy too" in message.message and "Naming it has no effect" in message.message
    assert not [m for m in session.client.messages if m.type == T.MessageType.Error]
    assert session.published(session.uri("pyproject.toml")) == []  # no error diagnostic on the file


async def test_bad_editor_settings_are_reported_and_left_out(start):
    session = await start(NEOVIM, init_options={"settings": {"ignore": ["PFL999"], "run": "sometimes"}})
    clip = "        for p in model.parameters():\n            p.grad.mul_(0.5)\n"  # PFL503, a stable rule
    uri = session.open("train.py", TRAIN + clip)
    # The bad overrides are left out as a whole (the pinned `select` and `preview` with them):
    # all stable rules run, and only they (PFL101, PFL106 and PFL502 are in preview).
    assert codes(await session.diagnostics(uri, version=1)) == ["PFL503"]
    await asyncio.sleep(0.2)
    text = "\n".join(m.message for m in session.client.messages)
    assert "`run` must be one of onType, onSave" in text
    assert "editor settings: `ignore` names 'PFL999'" in text


async def test_each_root_of_a_multi_root_workspace_has_its_own_config(start):
    session = await start(VSCODE, folders=["app", "lib"])
    session.write("app/pyproject.toml", "[tool.perflsp]\nignore = [\"PFL101\"]\n")
    session.write("lib/pyproject.toml", "[tool.perflsp]\nignore = [\"PFL502\"]\n")
    app = session.open("app/train.py", TRAIN)
    lib = session.open("lib/train.py", TRAIN)
    assert codes(await session.diagnostics(app, version=1)) == ["PFL106", "PFL502"]
    assert codes(await session.diagnostics(lib, version=1)) == ["PFL101", "PFL106"]
    # Editor settings per folder too: VS Code answers workspace/configuration for each folder.
    session.client.set_configuration({"perflsp": {"ignore": ["PFL106"]}}, scope_uri=session.uri("lib"))
    session.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=None))
    # In lib the editor's `ignore` replaces the project's (as `--ignore` does on the command line).
    assert codes(await session.diagnostics(lib, where=lambda ds: "PFL106" not in codes(ds))) == ["PFL101", "PFL502"]
    assert codes(session.published(app)[-1].diagnostics) == ["PFL106", "PFL502"]  # app: no editor setting


@pytest.mark.parametrize("where", ["initializationOptions", "didChangeConfiguration"])
async def test_a_setting_of_the_wrong_type_is_reported_and_its_default_used(start, where):
    # `[] in LOG_LEVELS` raised TypeError (unhashable): initialize failed with a traceback.
    init = {"settings": {"logLevel": []}} if where == "initializationOptions" else None
    session = await start(NEOVIM, init_options=init)
    if where == "didChangeConfiguration":
        session.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
            settings={"perflsp": {"logLevel": []}}))
    problem = "perflsp: editor settings: `logLevel` must be one of off, error, warning, info, debug, got []"
    deadline = asyncio.get_running_loop().time() + 10
    while problem + " (its default is used)" not in [m.message for m in session.client.messages]:
        assert asyncio.get_running_loop().time() < deadline, [m.message for m in session.client.messages]
        await asyncio.sleep(0.02)
    uri = session.open("train.py", TRAIN)
    assert codes(await session.diagnostics(uri, version=1)) == ["PFL101", "PFL106", "PFL502"]
    assert "Traceback" not in session.log_text() and "TypeError" not in session.log_text()
