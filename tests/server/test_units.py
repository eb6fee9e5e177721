"""The server's pure pieces, without a connection: positions, edits, carried findings, settings."""
from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as T

from perflsp.config import Settings
from perflsp.findings import Edit, Finding, Fix, HotContext, Location
from perflsp.server import convert
from perflsp.server.analysis import carry_over
from perflsp.server.settings import EditorSettings, key_line, parse, resolve

from tests.server.conftest import apply_edits


@pytest.mark.parametrize("encoding, expected", [("utf-16", 9), ("utf-32", 8), ("utf-8", 12)])
def test_columns_in_each_encoding(encoding, expected):
    enc = convert.Encoder(encoding)
    lines = ['x = "é😀"; y.item()']  # é: 1 unit in UTF-16, 2 in UTF-8; 😀: 2 in UTF-16, 4 in UTF-8
    assert enc.position(lines, Location(1, 8)) == T.Position(0, expected)
    # and back: the client's column maps to the same code point
    assert enc.location(lines, T.Position(0, expected)) == Location(1, 8)


def test_positions_past_the_text_are_clamped():
    enc = convert.Encoder()
    assert enc.position(["ab", "cd"], Location(9, 0)) == T.Position(1, 2)
    assert enc.position(["ab"], Location(1, 99)) == T.Position(0, 2)


def test_lines_split_where_lsp_splits_not_where_python_does():
    # A form feed is a line break for str.splitlines, not for LSP (nor for the tokenizer).
    assert convert.split_lines("a\fb\r\nc\rd\n") == ["a\fb", "c", "d", ""]


@pytest.mark.parametrize("old, new", [
    ("a\nb\nc\n", "a\nB\nc\n"),
    ("a\nb\nc", "a\nb\nc\nd"),  # appended after a last line without a break
    ("a\nb\n", "b\n"),
    ("x = 1\n", "x = 1\ny = 2\n"),
    ("é😀\nz\n", "é😀\nzz\n"),
])
def test_diff_edits_turn_old_into_new(old, new):
    edits = convert.diff_edits(old, new, convert.Encoder())
    assert apply_edits(old, edits) == new
    assert len(edits) == 1  # only the changed lines move


@pytest.mark.parametrize("text, start, end, expected", [
    ("a\x0cb\nc", (1, 0), (1, 1), "a\x0cb\nX"),  # a form feed is no line break for LSP
    ("a\u2028b\rc", (1, 0), (1, 0), "a\u2028b\rXc"),  # U+2028 neither; a lone \r is one
    ("ab\r\ncd", (0, 1), (1, 1), "aXd"),  # an edit across a \r\n
    ("abc", (0, 7), (0, 9), "abcX"),  # past the end of the last line: its end
    ("a\n", (4, 0), (4, 0), "a\nX"),  # past the last line: the end of the text
    ("😀b", (0, 1), (0, 1), "😀Xb"),  # inside a surrogate pair: rounds up
])
def test_changes_are_applied_with_lsp_lines_and_positions(text, start, end, expected):
    change = T.TextDocumentContentChangePartial(range=T.Range(T.Position(*start), T.Position(*end)), text="X")
    assert convert.apply_change(text, change, convert.Encoder()) == expected


def _finding(row, code="PFL101", hot_row=None, fix=False):
    hot = HotContext("inside `for b in loader` at line 1", Location(hot_row, 0), Location(hot_row, 18)) if hot_row else None
    fix_ = Fix("safe", "fix it", (Edit(Location(row, 4), Location(row, 8), "new"),)) if fix else None
    return Finding(code, "name", "message", "f.py", Location(row, 4), Location(row, 8), hot=hot, fix=fix_)


def test_carry_over_moves_findings_on_unchanged_lines_and_drops_edited_ones():
    old = "for b in loader:\n    a.item()\n    c.item()\n"
    new = "for b in loader:\n    x = (\n    a.item()\n    c.it\n"
    findings = [_finding(2, hot_row=1, fix=True), _finding(3, hot_row=1)]
    [kept] = carry_over(old, findings, new)
    assert (kept.start.row, kept.end.row) == (3, 3)  # moved down by the inserted line
    assert kept.hot.start.row == 1  # the loop header did not move
    assert kept.fix.edits[0].start.row == 3  # the fix moved with it


def test_carry_over_drops_the_hot_context_when_its_line_changed():
    old = "for b in loader:\n    a.item()\n"
    new = "for b in load\n    a.item()\n"
    [kept] = carry_over(old, [_finding(2, hot_row=1)], new)
    assert kept.start.row == 2 and kept.hot is None


def test_editor_settings_split_into_server_keys_and_engine_overrides():
    settings = parse({"perflsp": {"run": "onSave", "debounceMs": 50, "extendSelect": ["PFL1"],
                                  "per-file-ignores": {"tests/*": ["PFL101"]}, "hotFunctions": None}})
    assert settings.run == "onSave" and settings.debounce_ms == 50
    # camelCase and kebab-case both reach the engine as [tool.perflsp] keys; null means unset
    assert settings.overrides_dict() == {"extend-select": ["PFL1"], "per-file-ignores": {"tests/*": ["PFL101"]}}
    bad = parse({"debounceMs": "soon", "logLevel": "loud"})
    assert bad.debounce_ms == 150 and len(bad.problems) == 2


def test_the_editors_preview_setting_reaches_the_engine(tmp_path: Path):
    settings = parse({"perflsp": {"preview": True}})
    assert settings.overrides_dict() == {"preview": True}
    assert resolve(tmp_path / "a.py", settings).settings.preview is True
    bad = resolve(tmp_path / "a.py", parse({"preview": "yes"}))
    assert bad.settings.preview is False and "`preview` must be true or false" in bad.error


def test_resolve_falls_back_to_defaults_on_a_bad_config_file(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.perflsp]\nselect = [\"PFL\"]\nignroe = [\"PFL101\"]\n")
    resolved = resolve(tmp_path / "a.py", EditorSettings())
    assert resolved.settings.ignore == () and resolved.settings.select == Settings().select
    assert "ignroe" in resolved.error and resolved.error_file == str(tmp_path / "pyproject.toml")
    assert key_line((tmp_path / "pyproject.toml").read_text(), resolved.error) == 2


def test_resolve_leaves_out_bad_editor_overrides_but_keeps_the_file(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.perflsp]\nignore = [\"PFL502\"]\n")
    resolved = resolve(tmp_path / "a.py", parse({"select": ["PFL9"]}))
    assert resolved.settings.ignore == ("PFL502",)  # the file's settings stay
    assert resolved.error.startswith("editor settings:") and resolved.error_file is None


def test_resolve_accepts_a_removed_rule_with_a_warning_blamed_on_who_names_it(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.perflsp]\nignore = [\"PFL101\", \"PFL303\"]\n")
    resolved = resolve(tmp_path / "a.py", parse({"extendSelect": ["PFL303"]}))
    assert resolved.error is None  # not the defaults a config error falls back to
    assert resolved.settings.ignore == ("PFL101", "PFL303") and resolved.settings.extend_select == ("PFL303",)
    assert [w.split(" names ")[0] for w in resolved.warnings] == [
        f"{(tmp_path / 'pyproject.toml').resolve()}: `ignore`", "editor settings: `extend-select`"]
    assert resolve(tmp_path / "a.py", EditorSettings()).warnings == resolved.warnings[:1]
