"""The preview tier (Ruff's preview mode) and one finding per cost (`perflsp.rules.precedence`)."""
from __future__ import annotations

import textwrap

import pytest

from perflsp.config import ConfigError, Settings, load_file
from perflsp.rules import precedence, registry
from perflsp.rules.docs import render_index, render_rule
from perflsp.rules.engine import check_source

# PFL301 is a preview rule: the matmul would take the transposed matrix as it is.
SCORES = textwrap.dedent(
    """\
    import torch

    def project(batches, w):
        for x in batches:
            wt = w.t().contiguous()
            yield x @ wt
    """
)
# PFL403 (an invariant copy in a loop) outranks PFL106 (a blocking copy) on `weights.to(device)`;
# `x.to(device)` is PFL106's alone.
TRANSFERS = textwrap.dedent(
    """\
    import torch

    def train(model, loader, weights, device):
        for x in loader:
            model(x.to(device), weights.to(device))
    """
)


def _codes(source, **settings):
    # The rules of the table are preview rules: these tests are about precedence, not tiers.
    return sorted((f.code, f.start.row) for f in check_source(source, "m.py", Settings(**{"preview": True, **settings})))


def test_preview_rules_run_only_in_preview_mode():
    assert _codes(SCORES, preview=False) == []
    assert _codes(SCORES, preview=True) == [("PFL301", 5)]


def test_a_preview_rule_selected_by_its_code_still_needs_preview_and_says_so():
    settings = Settings(select=("PFL301",))
    assert _codes(SCORES, select=("PFL301",), preview=False) == []
    [warning] = registry.preview_warnings(settings)
    assert warning.startswith("Selection `PFL301` has no effect because preview is not enabled")
    # A prefix that also names stable rules is no mistake; in preview mode nothing is.
    assert registry.preview_warnings(Settings(select=("PFL5",))) == []
    assert registry.preview_warnings(Settings()) == []  # `check` skips the catch-all `PFL` without asking
    assert registry.preview_warnings(Settings(select=("PFL301",), preview=True)) == []
    assert _codes(SCORES, select=("PFL3",), preview=True) == [("PFL301", 5)]


def test_preview_is_a_validated_config_key_and_part_of_the_cache_key(tmp_path):
    (tmp_path / "perflsp.toml").write_text("preview = true\n")
    assert load_file(tmp_path / "perflsp.toml").preview is True
    (tmp_path / "perflsp.toml").write_text('preview = "yes"\n')
    with pytest.raises(ConfigError, match="`preview` must be true or false"):
        load_file(tmp_path / "perflsp.toml")
    assert Settings().fingerprint() != Settings(preview=True).fingerprint()


def test_every_page_states_the_tier_and_a_preview_rule_says_why():
    pfl301, pfl503 = registry.rule_by_code("PFL301"), registry.rule_by_code("PFL503")
    assert f"Tier: preview. {pfl301.tier_reason}" in render_rule(pfl301)
    assert f"Tier: stable (on by default). {pfl503.tier_reason}" in render_rule(pfl503)
    assert "| [PFL301](PFL301.md) | layout-copy | preview |" in render_index()
    for rule in registry.all_rules():
        assert rule.tier_reason, f"{rule.code} does not say why it is in its tier"


def test_the_winner_reports_and_silencing_it_does_not_bring_the_loser_back():
    assert _codes(TRANSFERS) == [("PFL106", 5), ("PFL403", 5)]  # PFL106 on `x.to(device)` only
    [finding] = [f for f in check_source(TRANSFERS, "m.py", Settings(preview=True)) if f.code == "PFL106"]
    assert finding.start.column == 14  # `x.to(device)`, not `weights.to(device)`
    assert _codes(TRANSFERS, ignore=("PFL403",)) == [("PFL106", 5)]
    assert _codes(TRANSFERS, select=("PFL106",)) == [("PFL106", 5)]
    noqa = TRANSFERS.replace("weights.to(device))", "weights.to(device))  # noqa: PFL403")
    assert [(f.code, f.start.column) for f in check_source(noqa, "m.py", Settings(preview=True))] == [("PFL106", 14)]


@pytest.mark.parametrize("winner, loser, source", [
    ("PFL402", "PFL106", "import torch\n\ndef f(loader, device):\n    for x in loader:\n"
                         "        yield x + torch.zeros(3).to(device)\n"),
    ("PFL107", "PFL401", "import torch\n\ndef f(loader, device):\n    for x in loader:\n"
                         "        yield x * torch.tensor([0.5, 2.0], device=device)\n"),
    ("PFL701", "PFL101", "import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                         "        return x / x.abs().max().item()\n\nmodel = torch.compile(Net())\n"),
    ("PFL702", "PFL103", "import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                         "        if x.sum() > 0:\n            x = x.tanh()\n        return x\n\n"
                         "model = torch.compile(Net())\n"),
])
def test_each_pair_of_the_table_reports_once(winner, loser, source, monkeypatch):
    codes = [code for code, _ in _codes(source)]
    assert winner in codes and loser not in codes
    assert loser not in [code for code, _ in _codes(source, ignore=(winner,))]
    monkeypatch.setattr(precedence, "OUTRANKS", ())
    registry.outranking_rules.cache_clear()
    try:
        assert {winner, loser} <= {code for code, _ in _codes(source)}  # both fire without the table
    finally:
        monkeypatch.undo()
        registry.outranking_rules.cache_clear()


def test_the_table_names_real_rules_and_has_no_cycles():
    codes = {rule.code for rule in registry.all_rules()}
    for entry in precedence.OUTRANKS:
        assert {entry.winner, entry.loser} <= codes and entry.why and entry.example
        assert (entry.loser, entry.winner) not in {(e.winner, e.loser) for e in precedence.OUTRANKS}


# PFL101 is stable in the body of a training loop and preview elsewhere in per-step code.
LOOPS = textwrap.dedent(
    """\
    import torch

    def train(model, loader, opt):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            print(loss.item())

    def evaluate(model, loader):
        for x, y in loader:
            print(model(x).max().item())

    class Net(torch.nn.Module):
        def forward(self, x):
            return x / x.abs().max().item()
    """
)


def test_pfl101_reports_training_loops_by_default_and_the_rest_of_per_step_code_in_preview():
    stable = check_source(LOOPS, "m.py", Settings(select=("PFL101",)))
    assert [(f.start.row, f.hot.message) for f in stable] == [(8, "inside the training loop `for x, y in loader` at line 4")]
    preview = check_source(LOOPS, "m.py", Settings(select=("PFL101",), preview=True))
    assert [f.start.row for f in preview] == [8, 12, 16]
    assert preview[1].hot.message == "inside the step loop `for x, y in loader` at line 11"


def test_a_backward_in_a_closure_does_not_make_its_loop_a_training_loop():
    source = textwrap.dedent(
        """\
        import torch

        def fit(model, loader, opt):
            for x, y in loader:
                def closure():
                    loss = model(x).sum()
                    loss.backward()
                    return loss
                print(opt.step(closure).item())
        """
    )
    assert check_source(source, "m.py", Settings(select=("PFL101",))) == []
    assert [f.start.row for f in check_source(source, "m.py", Settings(select=("PFL101",), preview=True))] == [9]
