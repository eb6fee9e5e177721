"""The CLI tests probe with PFL101 (`.item()` in a loop), a preview rule: they test the command's
behaviour (formats, fixes, noqa, caching, bad input), not the tiers, which
tests/rules/test_tiers_and_precedence.py covers. A test that writes its own perflsp.toml says
whether it wants preview."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def preview_config(tmp_path):
    (tmp_path / "perflsp.toml").write_text("preview = true\n")
