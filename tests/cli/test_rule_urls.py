"""Where findings say a rule's page is: nowhere by default (perflsp has no published site; `perflsp
rule CODE` prints the page), or at the absolute address `rule-docs-url` gives. SARIF stays valid
either way: `helpUri` and `informationUri` are absolute URIs when present."""
from __future__ import annotations

import json
import urllib.parse

import pytest

from tests.cli.conftest import assert_valid_sarif

LOOP_ITEM = "import torch\n\ndef train(model, loader):\n    for x, y in loader:\n        loss = model(x).sum()\n        print(loss.item())\n"
TEMPLATE = "https://docs.example.org/perflsp/rules/{code}.html"


def _sarif(perflsp_cli, schema):
    result = perflsp_cli("check", ".", "--no-cache", "--output-format", "sarif")
    assert result.returncode == 1, result.stderr
    log = json.loads(result.stdout)
    assert_valid_sarif(log, schema)
    driver = log["runs"][0]["tool"]["driver"]
    for uri in [driver.get("informationUri"), *(rule.get("helpUri") for rule in driver["rules"])]:
        assert uri is None or urllib.parse.urlsplit(uri).scheme in ("https", "file"), uri
    return driver


def test_by_default_a_finding_names_no_address(perflsp_cli, tmp_path, sarif_schema):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    [finding] = json.loads(perflsp_cli("check", ".", "--no-cache", "--output-format", "json").stdout)
    assert finding["code"] == "PFL101" and finding["url"] is None
    driver = _sarif(perflsp_cli, sarif_schema)
    [rule] = driver["rules"]
    assert "informationUri" not in driver and "helpUri" not in rule
    assert "`perflsp rule PFL101` prints this rule's page" in rule["help"]["text"]
    page = perflsp_cli("rule", "PFL101")
    assert page.returncode == 0 and page.stdout.startswith("# PFL101 item-in-hot-code\n")


def test_rule_docs_url_names_where_the_pages_are_published(perflsp_cli, tmp_path, sarif_schema):
    (tmp_path / "perflsp.toml").write_text(f'preview = true\nrule-docs-url = "{TEMPLATE}"\n')
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    [finding] = json.loads(perflsp_cli("check", ".", "--no-cache", "--output-format", "json").stdout)
    assert finding["url"] == "https://docs.example.org/perflsp/rules/PFL101.html"
    [rule] = _sarif(perflsp_cli, sarif_schema)["rules"]
    assert rule["helpUri"] == "https://docs.example.org/perflsp/rules/PFL101.html"


@pytest.mark.parametrize("value, problem", [
    ("docs/rules/{code}.md", "must be an absolute URL"),
    ("https://docs.example.org/perflsp/rules/", "must be a string with `{code}`"),
    ("https://docs.example.org/{version}/{code}.html", "may hold no braces but `{code}`"),
])
def test_an_address_findings_cannot_link_to_is_a_config_error(perflsp_cli, tmp_path, value, problem):
    (tmp_path / "perflsp.toml").write_text(f'rule-docs-url = "{value}"\n')
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    result = perflsp_cli("check", ".", "--no-cache")
    assert result.returncode == 2
    assert "`rule-docs-url`" in result.stderr and problem in result.stderr, result.stderr
