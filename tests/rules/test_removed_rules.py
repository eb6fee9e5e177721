"""Removed rules (`perflsp.rules.removed`): settings and comments that still name one keep working."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from perflsp.config import ConfigError, Settings, load_file
from perflsp.rules import registry, removed
from perflsp.rules.docs import pages, render_index
from perflsp.rules.engine import check_source

# PFL101 is stable in the body of a training loop.
TRAIN = textwrap.dedent(
    """\
    import torch

    def train(model, loader, opt):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            print(loss.item())
    """
)


def test_every_key_that_names_codes_accepts_a_removed_rule_with_a_warning(tmp_path):
    config = tmp_path / "perflsp.toml"
    config.write_text(textwrap.dedent(
        """\
        select = ["PFL1", "PFL303"]
        extend-select = ["PFL303"]
        ignore = ["PFL303"]
        report-cold = ["PFL303"]

        [per-file-ignores]
        "tests/*" = ["PFL303"]

        [severity]
        PFL303 = "error"

        [rules.PFL303]
        some-option = 1
        """))
    settings = load_file(config)
    registry.validate(settings)  # no ConfigError
    warnings = removed.removed_warnings(settings)
    keys = ["select", "extend-select", "ignore", "report-cold", "per-file-ignores.tests/*", "severity", "rules.PFL303"]
    assert [w.split(" names ")[0] for w in warnings] == [f"{config}: `{key}`" for key in keys]
    [pfl303] = removed.REMOVED
    for warning in warnings:
        assert f"names PFL303 (contiguous-then-view), which was removed in {pfl303.removed_in} because {pfl303.why}" in warning
        assert warning.endswith("Naming it has no effect: remove it")
    # The settings work: the rules they name that exist run as configured.
    [finding] = check_source(TRAIN, "m.py", settings)
    assert finding.code == "PFL101"


def test_a_code_that_never_was_a_rule_is_still_an_error():
    for settings, message in [(Settings(ignore=("PFL304",)), "`ignore` names 'PFL304', which matches no rule"),
                              (Settings(rule_options=(("PFL304", ()),)), "`rules.PFL304`: no such rule")]:
        with pytest.raises(ConfigError, match=message):
            registry.validate(settings)
    assert removed.removed_warnings(Settings(select=("PFL3",), ignore=("PFL30",))) == []  # prefixes of live rules


def test_a_noqa_naming_a_removed_rule_does_no_harm():
    line = "print(loss.item())"
    for comment, codes in [("# noqa: PFL303", ["PFL101"]), ("# perflsp: ignore[PFL303]", ["PFL101"]),
                           ("# noqa: PFL101, PFL303", []), ("# noqa: PFL303, PFL101", [])]:
        source = TRAIN.replace(line, f"{line}  {comment}")
        assert comment in source
        assert [f.code for f in check_source(source, "m.py", Settings())] == codes, comment


def test_the_table_lists_removed_rules_only_and_the_index_shows_it():
    live = {rule.code for rule in registry.all_rules()}
    for rule in removed.REMOVED:
        assert rule.code not in live and rule.name and rule.why and rule.removed_in
        assert removed.removed_rule(rule.code.lower()) == rule
        assert f"{rule.code}.md" not in pages()
        assert f"| {rule.code} | {rule.name} | {rule.removed_in} |" in render_index()
    assert removed.removed_rule("PFL101") is None


def test_the_table_loads_without_the_engine():
    # `perflsp check` warns about removed codes before any rule (or libcst) is needed.
    code = "import sys, perflsp.rules.removed; print('libcst' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
