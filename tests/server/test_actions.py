"""Code actions and hover end to end: quick fixes (safe and unsafe), resolve, noqa, fix-all."""
from __future__ import annotations

import pytest
from lsprotocol import types as T

from tests.server.conftest import EMACS, NEOVIM, TRAIN, VSCODE, apply_edits, text_edits

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")


def titled(actions, start):
    found = [a for a in actions if a.title.startswith(start)]
    assert len(found) == 1, f"expected one action titled {start!r}, got {[a.title for a in actions]}"
    return found[0]


# Neovim 0.7 and VS Code resolve edits lazily (dataSupport + resolveSupport "edit"); eglot cannot.
@pytest.mark.parametrize("spec, lazy", [(NEOVIM, True), (VSCODE, True), (EMACS, False)])
async def test_quick_fixes_safe_preferred_unsafe_labelled(shared, spec, lazy):
    session = await shared(spec)
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)

    safe = titled(await session.actions(uri, 8), "PFL106")
    assert safe.kind == T.CodeActionKind.QuickFix and safe.is_preferred
    assert (safe.edit is None) == lazy  # deferred to codeAction/resolve only where the client can
    assert [d.code for d in safe.diagnostics] == ["PFL106"]
    edit = await session.edit_of(safe)
    fixed = apply_edits(TRAIN, text_edits(edit, uri))
    assert "        w = x.pin_memory().cuda(non_blocking=True)\n" in fixed
    assert fixed.replace("x.pin_memory().cuda(non_blocking=True)", "x.pin_memory().cuda()") == TRAIN  # nothing else touched
    if spec != NEOVIM:  # documentChanges clients get a versioned edit, refused if the text moved on
        assert edit.document_changes[0].text_document.version == 1

    unsafe = titled(await session.actions(uri, 7), "PFL502")
    assert "unsafe" in unsafe.title and not unsafe.is_preferred
    fixed = apply_edits(TRAIN, text_edits(await session.edit_of(unsafe), uri))
    assert "        z = torch.log1p(x)\n" in fixed


async def test_ignore_action_appends_or_merges_noqa(shared):
    session = await shared(VSCODE)
    text = TRAIN.replace("print(loss.item())", "print(loss.item())  # log it") \
                .replace("z = torch.log(1 + x)", "z = torch.log(1 + x)  # noqa: PFL106")
    uri = session.open("train.py", text)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)

    ignore = titled(await session.actions(uri, 6), "Ignore PFL101 on this line")
    fixed = apply_edits(text, text_edits(await session.edit_of(ignore), uri))
    assert "        print(loss.item())  # log it  # noqa: PFL101\n" in fixed  # the user's comment stays
    ignore = titled(await session.actions(uri, 7), "Ignore PFL502 on this line")
    fixed = apply_edits(text, text_edits(await session.edit_of(ignore), uri))
    assert "z = torch.log(1 + x)  # noqa: PFL106, PFL502\n" in fixed  # merged, not doubled
    # Applied, the suppression silences exactly that finding.
    version = session.replace(uri, fixed)
    diagnostics = await session.diagnostics(uri, version=version)
    assert sorted(d.code for d in diagnostics) == ["PFL101", "PFL106"]


@pytest.mark.parametrize("spec", [NEOVIM, EMACS])
async def test_fix_all_applies_safe_fixes_only(shared, spec):
    session = await shared(spec)
    text = TRAIN + "        v = y.pin_memory().cuda()\n"
    uri = session.open("train.py", text)
    # The two transfers back to back are one finding, whose fix covers both.
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    [fix_all] = await session.actions(uri, 0, only=["source.fixAll"])  # as VS Code's codeActionsOnSave asks
    assert fix_all.kind == "source.fixAll.perflsp"
    fixed = apply_edits(text, text_edits(await session.edit_of(fix_all), uri))
    assert fixed == text.replace("x.pin_memory().cuda()", "x.pin_memory().cuda(non_blocking=True)").replace("y.pin_memory().cuda()", "y.pin_memory().cuda(non_blocking=True)")
    assert "torch.log(1 + x)" in fixed  # the unsafe fix is not part of fix-all
    # Asked for quick fixes only, fix-all stays out; asked for source actions, quick fixes stay out.
    assert all(a.kind == T.CodeActionKind.QuickFix for a in await session.actions(uri, 8, only=["quickfix"]))
    assert [a.kind for a in await session.actions(uri, 8, only=["source"])] == ["source.fixAll.perflsp"]


async def test_resolve_after_the_text_changed_gives_no_stale_edit(shared):
    session = await shared(NEOVIM)
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1)
    safe = titled(await session.actions(uri, 8), "PFL106")
    # The user deletes the `.cuda()` line before picking the action.
    version = session.edit(uri, (8, 0), (9, 0), "")
    await session.diagnostics(uri, version=version)
    resolved = await session.client.code_action_resolve_async(safe)
    assert resolved.edit is None  # nothing to apply any more, rather than an edit at the wrong place


async def test_hover_explains_the_rule_on_the_flagged_expression(shared):
    session = await shared(NEOVIM)
    uri = session.open("train.py", TRAIN)
    await session.diagnostics(uri, version=1, where=lambda ds: len(ds) == 3)
    hover = await session.client.text_document_hover_async(
        T.HoverParams(T.TextDocumentIdentifier(uri=uri), T.Position(6, 20)))  # on `item`
    assert hover.contents.kind == T.MarkupKind.Markdown
    text = hover.contents.value
    assert text.startswith("**PFL101 item-in-hot-code**")
    assert "Hot because it runs inside the step loop `for x, y in loader`" in text
    assert "Why is this bad?" in text and "copies one value from the device to the host" in text
    assert "Use instead" in text
    assert "documentation](" not in text  # no published rule pages unless `ruleDocsUrl` names them
    assert hover.range == T.Range(T.Position(6, 14), T.Position(6, 25))
    # Clean code has nothing to say.
    nothing = await session.client.text_document_hover_async(
        T.HoverParams(T.TextDocumentIdentifier(uri=uri), T.Position(5, 10)))
    assert nothing is None
