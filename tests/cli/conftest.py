"""The CLI tests probe with PFL101 (`.item()` in a loop), a preview rule: they test the command's
behaviour (formats, fixes, noqa, caching, bad input), not the tiers, which
tests/rules/test_tiers_and_precedence.py covers. A test that writes its own perflsp.toml says
whether it wants preview."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


@pytest.fixture(autouse=True)
def preview_config(tmp_path):
    (tmp_path / "perflsp.toml").write_text("preview = true\n")


@pytest.fixture(scope="module")
def sarif_schema():
    jsonschema = pytest.importorskip("jsonschema")
    path = DATA / "sarif-schema-2.1.0.json"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SCHEMA_SHA256, "the vendored schema was changed"
    schema = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema).check_schema(schema)
    return schema


def assert_valid_sarif(log, schema):
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    errors = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
