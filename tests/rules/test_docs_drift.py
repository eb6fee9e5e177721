"""docs/rules/ is generated from the rules; regenerate with `python -m perflsp.rules.docs docs/rules`."""
from perflsp.rules.docs import pages
from tests.conftest import ROOT


def test_rule_pages_match_the_rules():
    folder = ROOT / "docs" / "rules"
    wanted = pages()
    on_disk = {p.name: p.read_text() for p in folder.glob("*.md")}
    assert sorted(on_disk) == sorted(wanted), "run: python -m perflsp.rules.docs docs/rules"
    for name, text in wanted.items():
        assert on_disk[name] == text, f"docs/rules/{name} is stale; run: python -m perflsp.rules.docs docs/rules"
