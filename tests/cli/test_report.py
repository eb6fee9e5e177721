"""The CLI renderers (perflsp/report.py): every output format on a few handcrafted findings."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET
from dataclasses import replace

import jsonschema
import pytest

from perflsp import __version__
from perflsp.findings import Edit, Finding, Fix, HotContext, Location
from perflsp.report import FORMATS, render
from tests.cli.conftest import assert_valid_sarif

TRAIN = (
    "import torch\n"
    "\n"
    "def train(loader, model):\n"
    "    for batch in loader:\n"
    "        loss = model(batch)\n"
    "        total = loss.item()\n"
    "        x = torch.tensor(\n"
    "            [1, 2],\n"
    "        )\n"
    "    return total\n"
)
NOTEBOOK = json.dumps({
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": ["for b in dl:\n", "    y = b.cpu()\n"]},
    ],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
})
HOT = HotContext("inside `for batch in loader` at line 4", Location(4, 4), Location(4, 24))

# An unsafe fix, in hot code.
ITEM = Finding(
    code="PFL101", name="item-in-hot-code",
    message="`.item()` syncs the host with the device inside `for batch in loader` at line 4",
    filename="src/train.py", start=Location(6, 16), end=Location(6, 27), severity="warning", hot=HOT,
    fix=Fix("unsafe", "Keep the value on the device", (Edit(Location(6, 16), Location(6, 27), "loss.detach()"),)),
    url="https://docs.example.org/perflsp/rules/PFL101.html",
)
# A safe fix over three rows.
TENSOR = Finding(
    code="PFL401", name="tensor-in-loop", message="`torch.tensor` builds a host tensor on every step",
    filename="src/train.py", start=Location(7, 12), end=Location(9, 9), severity="error", hot=HOT,
    fix=Fix("safe", "Hoist the tensor out of the loop", (Edit(Location(7, 12), Location(9, 9), "CONST"),)),
    url="https://docs.example.org/perflsp/rules/PFL401.html",
)
# A notebook cell (cell 2; rows relative to the cell), message with %, `,` and a line break.
CELL = Finding(
    code="PFL102", name="cpu-in-hot-code", message="`.cpu()` waits for 100% of queued work, then copies\nto host",
    filename="nb.ipynb", start=Location(2, 8), end=Location(2, 15), severity="info",
    hot=HotContext("inside `for b in dl` at line 1 of cell 2", Location(1, 0), Location(1, 12), 2),
    cell=2, url="https://docs.example.org/perflsp/rules/PFL102.html",
)
# No fix, no hot context, no url (like PFL000).
SYNTAX = Finding(
    code="PFL000", name="syntax-error", message="SyntaxError: '(' was never closed", filename="broken.py",
    start=Location(1, 3), end=Location(1, 4), severity="error",
)
ALL = [ITEM, TENSOR, CELL, SYNTAX]
SOURCES = {"src/train.py": TRAIN, "nb.ipynb": NOTEBOOK, "broken.py": "x = (\n"}


def test_formats_are_ruffs_names():
    assert FORMATS == ("text", "concise", "json", "json-lines", "sarif", "github", "junit")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_findings_and_a_clean_run(fmt):
    assert isinstance(render(ALL, fmt, sources=SOURCES), str)
    assert isinstance(render([], fmt), str)


def test_unknown_format_is_an_error_and_full_is_text():
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        render(ALL, "xml")
    assert render(ALL, "full", sources=SOURCES) == render(ALL, "text", sources=SOURCES)


def test_report_imports_only_the_standard_library():
    code = ("import sys, perflsp.report; heavy = {'libcst', 'pygls', 'lsprotocol', 'torch', 'numpy'}; "
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------------------------
# concise


def test_concise_is_one_line_per_finding_then_the_summary():
    out = render(ALL, "concise", unsafe_hidden=1)
    assert out == (
        "broken.py:1:4: PFL000 SyntaxError: '(' was never closed\n"
        "nb.ipynb:cell_2:2:9: PFL102 `.cpu()` waits for 100% of queued work, then copies to host\n"
        "src/train.py:6:17: PFL101 `.item()` syncs the host with the device inside `for batch in loader` at line 4\n"
        "src/train.py:7:13: PFL401 [*] `torch.tensor` builds a host tensor on every step\n"
        "Found 4 errors.\n"
        "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    )


def test_unsafe_fixes_get_the_marker_when_enabled():
    out = render([ITEM, TENSOR], "concise")  # unsafe_hidden=0: unsafe fixes are on
    assert "PFL101 [*] `.item()`" in out
    assert out.endswith("Found 2 errors.\n[*] 2 fixable with the `--fix` option.\n")
    explicit = render([ITEM], "concise", unsafe_fixes=False)
    assert "PFL101 [*]" not in explicit and "fixable" not in explicit


@pytest.mark.parametrize("kwargs, findings, tail", [
    ({}, [], "All checks passed!\n"),
    ({"fixed_count": 2}, [], "Found 2 errors (2 fixed, 0 remaining).\n"),
    ({"fixed_count": 1}, [SYNTAX], "Found 2 errors (1 fixed, 1 remaining).\n"),
    ({}, [SYNTAX], "Found 1 error.\n"),
    ({"unsafe_hidden": 1}, [ITEM],
     "Found 1 error.\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"),
    ({"unsafe_hidden": 2}, [ITEM, replace(ITEM, start=Location(6, 17))],
     "Found 2 errors.\nNo fixes available (2 hidden fixes can be enabled with the `--unsafe-fixes` option).\n"),
    ({"unsafe_hidden": 1}, [ITEM, TENSOR],
     "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"),
])
def test_summary_lines_follow_ruff(kwargs, findings, tail):
    for fmt in ("concise", "text"):
        assert render(findings, fmt, **kwargs).endswith(tail)


# --------------------------------------------------------------------------------------------
# text (Ruff's full format)


def test_text_underlines_the_range_and_adds_note_and_help():
    out = render([ITEM], "text", sources=SOURCES, unsafe_hidden=1)
    assert out == (
        "src/train.py:6:17: PFL101 `.item()` syncs the host with the device inside `for batch in loader` at line 4\n"
        "  |\n"
        "4 |     for batch in loader:\n"
        "5 |         loss = model(batch)\n"
        "6 |         total = loss.item()\n"
        "  |                 ^^^^^^^^^^^ PFL101\n"
        "7 |         x = torch.tensor(\n"
        "8 |             [1, 2],\n"
        "  |\n"
        "  = note: inside `for batch in loader` at line 4\n"
        "  = help: Keep the value on the device\n"
        "\n"
        "Found 1 error.\n"
        "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    )


def test_text_marks_a_multiline_range():
    out = render([TENSOR], "text", sources=SOURCES)
    assert (
        "src/train.py:7:13: PFL401 [*] `torch.tensor` builds a host tensor on every step\n"
        "   |\n"
        " 5 |           loss = model(batch)\n"
        " 6 |           total = loss.item()\n"
        " 7 |           x = torch.tensor(\n"
        "   |  _____________^\n"
        " 8 | |             [1, 2],\n"
        " 9 | |         )\n"
        "   | |_________^ PFL401\n"
        "10 |       return total\n"
        "   |\n"
        "   = note: inside `for batch in loader` at line 4\n"
        "   = help: Hoist the tensor out of the loop\n"
        "\n"
    ) in out
    lines = out.splitlines()
    caret_line = next(line for line in lines if line.endswith("^"))
    source_line = next(line for line in lines if "x = torch.tensor(" in line)
    assert caret_line.index("^") == source_line.index("torch")  # points at column 13 (1-based)


def test_text_shows_a_notebook_cells_own_lines():
    out = render([CELL], "text", sources=SOURCES)
    assert out.startswith(
        "nb.ipynb:cell_2:2:9: PFL102 `.cpu()` waits for 100% of queued work, then copies to host\n"
        "  |\n"
        "1 | for b in dl:\n"
        "2 |     y = b.cpu()\n"
        "  |         ^^^^^^^ PFL102\n"
        "  |\n"
        "  = note: inside `for b in dl` at line 1 of cell 2\n"
    )


def test_text_without_sources_still_gives_position_note_and_help():
    out = render([ITEM], "text")
    assert out.splitlines()[:3] == [
        "src/train.py:6:17: PFL101 [*] `.item()` syncs the host with the device inside `for batch in loader` at line 4",
        "  = note: inside `for batch in loader` at line 4",
        "  = help: Keep the value on the device",
    ]
    assert "|" not in out


def test_text_counts_columns_in_code_points_and_expands_tabs():
    source = "s = 'ü漢'\tif t.item(): pass\n"
    col = source.index("t.item()")  # 12 code points in
    finding = replace(SYNTAX, code="PFL103", filename="u.py", start=Location(1, col), end=Location(1, col + 8))
    lines = render([finding], "text", sources={"u.py": source}).splitlines()
    assert lines[0].startswith(f"u.py:1:{col + 1}: PFL103")
    src_line, caret_line = lines[2], lines[3]
    assert src_line == "1 | s = 'ü漢'   if t.item(): pass"  # the tab goes to the next stop of 4 (12)
    # '漢' takes two terminal columns: the carets sit under `t.item()` as a terminal shows it.
    assert caret_line.index("^") == _width(src_line[:src_line.index("t.item()")])
    assert caret_line.endswith("^" * 8 + " PFL103")


def _width(text):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_text_show_fixes_prints_the_diff_and_the_fixed_listing():
    out = render([TENSOR], "text", sources=SOURCES, show_fixes=True, fixed=[ITEM], fixed_count=1)
    assert (
        "ℹ Safe fix\n"
        " 5  5 |         loss = model(batch)\n"
        " 6  6 |         total = loss.item()\n"
        " 7    |-        x = torch.tensor(\n"
        " 8    |-            [1, 2],\n"
        " 9    |-        )\n"
        "    7 |+        x = CONST\n"
        "10  8 |     return total\n"
    ) in out
    assert out.endswith(
        "Fixed 1 error:\n"
        "- src/train.py:\n"
        "    1 × PFL101 (item-in-hot-code)\n"
        "\n"
        "Found 2 errors (1 fixed, 1 remaining).\n"
        "[*] 1 fixable with the `--fix` option.\n"
    )


def test_color_only_when_asked():
    plain = render(ALL, "text", sources=SOURCES)
    colored = render(ALL, "text", sources=SOURCES, color=True)
    assert "\x1b[" not in plain
    assert "\x1b[31;1mPFL101\x1b[0m" in colored
    assert "\x1b[" not in render(ALL, "json", color=True)


# --------------------------------------------------------------------------------------------
# json, json-lines

RUFF_FIELDS = {"code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row", "cell"}
PERFLSP_FIELDS = {"name", "severity", "hot"}


def _back_to_finding(obj):
    """A Finding from the rendered JSON: columns back to 0-based."""
    def loc(d):
        return {"row": d["row"], "column": d["column"] - 1}

    d = dict(obj, location=loc(obj["location"]), end_location=loc(obj["end_location"]))
    if obj["fix"]:
        d["fix"] = dict(obj["fix"], edits=[dict(e, location=loc(e["location"]), end_location=loc(e["end_location"]))
                                            for e in obj["fix"]["edits"]])
    if obj["hot"]:
        d["hot"] = dict(obj["hot"], location=loc(obj["hot"]["location"]), end_location=loc(obj["hot"]["end_location"]))
    return Finding.from_dict(d)


def test_json_uses_ruffs_field_names_and_round_trips():
    data = json.loads(render(ALL, "json"))
    assert isinstance(data, list) and len(data) == 4
    for obj in data:
        assert set(obj) == RUFF_FIELDS | PERFLSP_FIELDS
        assert set(obj["location"]) == {"row", "column"}
    by_code = {obj["code"]: obj for obj in data}
    item = by_code["PFL101"]
    assert item["filename"] == "src/train.py"
    assert item["location"] == {"row": 6, "column": 17} and item["end_location"] == {"row": 6, "column": 28}
    assert item["noqa_row"] == 6
    assert item["fix"] == {
        "applicability": "unsafe", "message": "Keep the value on the device",
        "edits": [{"content": "loss.detach()", "location": {"row": 6, "column": 17},
                   "end_location": {"row": 6, "column": 28}}],
    }
    assert item["hot"] == {"message": HOT.message, "location": {"row": 4, "column": 5},
                           "end_location": {"row": 4, "column": 25}, "cell": None, "context": None}
    assert item["url"] == ITEM.url and item["severity"] == "warning" and item["cell"] is None
    cell = by_code["PFL102"]
    assert cell["filename"] == "nb.ipynb" and cell["cell"] == 2 and cell["location"] == {"row": 2, "column": 9}
    assert cell["hot"]["cell"] == 2
    assert by_code["PFL000"]["fix"] is None and by_code["PFL000"]["hot"] is None and by_code["PFL000"]["url"] is None
    assert sorted((_back_to_finding(o) for o in data), key=Finding.sort_key) == sorted(ALL, key=Finding.sort_key)
    assert render([], "json") == "[]\n"


def test_json_lines_is_one_object_per_line():
    out = render(ALL, "json-lines")
    lines = out.splitlines()
    assert len(lines) == 4 and out.endswith("\n")
    assert [json.loads(line) for line in lines] == json.loads(render(ALL, "json"))
    assert render([], "json-lines") == ""


# --------------------------------------------------------------------------------------------
# SARIF


def test_sarif_is_valid_against_the_official_schema(sarif_schema):
    log = json.loads(render(ALL, "sarif"))
    assert_valid_sarif(log, sarif_schema)
    assert_valid_sarif(json.loads(render([], "sarif")), sarif_schema)


def test_a_broken_log_fails_the_schema(sarif_schema):
    log = json.loads(render(ALL, "sarif"))
    log["runs"][0]["results"][0]["level"] = "fatal"
    cls = jsonschema.validators.validator_for(sarif_schema)
    assert list(cls(sarif_schema).iter_errors(log))


def test_sarif_contents(sarif_schema):
    absolute = replace(ITEM, filename=os.path.join(os.getcwd(), "pkg", "my model.py"))
    log = json.loads(render(ALL + [absolute], "sarif"))
    assert_valid_sarif(log, sarif_schema)
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "perflsp" and driver["version"] == __version__
    rules = driver["rules"]
    assert [r["id"] for r in rules] == ["PFL000", "PFL101", "PFL102", "PFL401"]
    for rule in rules:
        assert rule["name"] and rule["shortDescription"]["text"]
    assert rules[1]["helpUri"] == ITEM.url and "helpUri" not in rules[0]

    results = run["results"]
    assert len(results) == 5
    by_code = {r["ruleId"]: r for r in results}
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    assert {r["ruleId"]: r["level"] for r in results} == {
        "PFL000": "error", "PFL101": "warning", "PFL102": "note", "PFL401": "error"}

    item = next(r for r in results if r["ruleId"] == "PFL101"
                and r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/train.py")
    assert item["ruleId"] == "PFL101" and item["message"]["text"] == ITEM.message
    loc = item["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "src/train.py"
    assert loc["region"] == {"startLine": 6, "startColumn": 17, "endLine": 6, "endColumn": 28}
    related = item["relatedLocations"][0]
    assert related["message"]["text"] == HOT.message
    assert related["physicalLocation"]["region"] == {"startLine": 4, "startColumn": 5, "endLine": 4, "endColumn": 25}
    fix = item["fixes"][0]
    assert fix["description"]["text"] == "Keep the value on the device"
    assert fix["properties"]["applicability"] == "unsafe"
    assert fix["artifactChanges"][0]["replacements"] == [{
        "deletedRegion": {"startLine": 6, "startColumn": 17, "endLine": 6, "endColumn": 28},
        "insertedContent": {"text": "loss.detach()"}}]

    assert "fixes" not in by_code["PFL000"] and "relatedLocations" not in by_code["PFL000"]
    assert by_code["PFL102"]["properties"]["cell"] == 2
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results]
    assert "pkg/my%20model.py" in uris  # relative, forward slashes, a URI reference
    assert all("\\" not in u and not u.startswith("/") for u in uris)


def test_sarif_uses_given_rule_summaries():
    log = json.loads(render([ITEM], "sarif", rule_summaries={"PFL101": "`.item()` in hot code"}))
    assert log["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"]["text"] == "`.item()` in hot code"


# --------------------------------------------------------------------------------------------
# GitHub Actions


def test_github_workflow_commands():
    lines = render(ALL, "github").splitlines()
    assert lines == [
        "::error title=perflsp (PFL000),file=broken.py,line=1,col=4,endLine=1,endColumn=5::"
        "PFL000 SyntaxError: '(' was never closed",
        "::notice title=perflsp (PFL102),file=nb.ipynb::"
        "nb.ipynb:cell_2:2:9: PFL102 `.cpu()` waits for 100%25 of queued work, then copies%0Ato host",
        "::warning title=perflsp (PFL101),file=src/train.py,line=6,col=17,endLine=6,endColumn=28::"
        "PFL101 `.item()` syncs the host with the device inside `for batch in loader` at line 4",
        "::error title=perflsp (PFL401),file=src/train.py,line=7,col=13,endLine=9,endColumn=10::"
        "PFL401 `torch.tensor` builds a host tensor on every step",
    ]
    assert render([], "github") == ""


def test_github_escapes_data_and_properties():
    odd = replace(SYNTAX, filename="a,b/c:d.py", message="50% done\r\nnext, then: more")
    line = render([odd], "github").rstrip("\n")
    assert "\n" not in line and "\r" not in line
    props, data = line[len("::error "):].split("::", 1)
    assert props.split(",")[1] == "file=a%2Cb/c%3Ad.py"
    assert data == "PFL000 50%25 done%0D%0Anext, then: more"


# --------------------------------------------------------------------------------------------
# JUnit


def test_junit_has_a_suite_per_file_and_a_failing_case_per_finding():
    root = ET.fromstring(render(ALL, "junit"))
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "4"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"broken.py", "nb.ipynb", "src/train.py"}
    train = suites["src/train.py"]
    assert train.get("tests") == "2" and train.get("failures") == "2"
    cases = train.findall("testcase")
    assert [c.get("name") for c in cases] == ["org.perflsp.PFL101", "org.perflsp.PFL401"]
    assert cases[0].get("classname") == "src/train"
    assert (cases[0].get("line"), cases[0].get("column")) == ("6", "17")
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message") == ITEM.message
    assert failure.text == f"line 6, col 17, {ITEM.message}"
    nb_case = suites["nb.ipynb"].find("testcase")
    assert nb_case.get("cell") == "2"
    assert nb_case.find("failure").get("message") == CELL.message  # the line break survives escaping


def test_junit_clean_run_is_one_passing_case():
    out = render([], "junit")
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(out)
    suites = root.findall("testsuite")
    assert len(suites) == 1 and suites[0].get("failures") == "0" and suites[0].get("tests") == "1"
    cases = suites[0].findall("testcase")
    assert len(cases) == 1 and cases[0].find("failure") is None


# --------------------------------------------------------------------------------------------
# --statistics


def test_statistics_table_sorted_by_count():
    findings = ALL + [replace(ITEM, start=Location(6, 17)), replace(ITEM, start=Location(6, 18))]
    out = render(findings, "text", statistics=True, unsafe_hidden=3)
    assert out == (
        "3\tPFL101\t[ ] item-in-hot-code\n"
        "1\tPFL000\t[ ] syntax-error\n"
        "1\tPFL102\t[ ] cpu-in-hot-code\n"
        "1\tPFL401\t[*] tensor-in-loop\n"
    )
    assert render([SYNTAX], "concise", statistics=True) == "1\tPFL000\tsyntax-error\n"  # no fixes: no column
    assert render([], "text", statistics=True) == ""


def test_statistics_as_json():
    rows = json.loads(render(ALL + [replace(ITEM, start=Location(6, 17))], "json", statistics=True))
    assert rows[0] == {"code": "PFL101", "name": "item-in-hot-code", "count": 2, "fixable": True}
    assert [r["code"] for r in rows] == ["PFL101", "PFL000", "PFL102", "PFL401"]
