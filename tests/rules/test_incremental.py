"""Incremental analysis gives what a whole analysis gives: random edits (insertions, deletions,
pastes, half-typed lines) to real files, and after every version that parses, the tree, the
summary and the findings of the incremental path equal those of a whole parse and summary of the
same text. Hypothesis, derandomized, as in test_fuzz."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import List, Tuple

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perflsp.config import Settings
from perflsp.rules.engine import SYNTAX_ERROR, check_source, not_analysed
from perflsp.rules.project import Project, single_file_facts
from perflsp.rules.reparse import Reparser
from perflsp.rules.summary import summarize, summarize_whole
from perflsp.rules.walk import Walk

ROOT = Path(__file__).resolve().parents[2]
EVERY_RULE_EVERYWHERE = Settings(preview=True, report_cold=("PFL",))


def _real_files() -> List[Path]:
    """PyTorch programs with real bugs, this repository's own classes, and torch's own modules
    when torch is installed (found without importing it)."""
    files = [ROOT / "examples" / "train_loop.py", ROOT / "examples" / "attention.py",
             ROOT / "rules" / "context.py", ROOT / "server" / "documents.py"]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        torch_dir = Path(spec.origin).parent
        files += [p for p in (torch_dir / "optim" / "adamw.py", torch_dir / "nn" / "modules" / "batchnorm.py") if p.is_file()]
    return files


FILES = _real_files()
TEXTS = {str(p): p.read_text(encoding="utf-8") for p in FILES}

# What people type: characters, line breaks with and without indentation, comments, calls that
# findings are made of, half a line (an open bracket), a new statement, an import, line
# continuations (at the end of a row, and alone on a row with or without indentation); and what
# other statements read: module-level names, base classes, torch.compile, decorators, a name that
# shadows a builtin, the default device, collate functions, eval mode, a `backward()` (a training loop).
PIECES = [" ", "x", "(", ")", ":", "\n", "\n    ", "\n        ", "#", "\n# note\n", "        # note\n", ".item()",
          "        y = x.cpu()\n", "    def helper(self):\n        return 1\n", "def f(", "import os\n", "\r\n",
          "        for b in loader:\n            b.item()\n", "torch.zeros(3, device='cuda')", "'", '"""',
          "model = torch.compile(model)\n", "@torch.compile\n", "    @torch.compile\n", "device = 'cpu'\n",
          "(torch.nn.Module)", "float = int\n", "torch.set_default_device('cuda')\n", ", collate_fn=f",
          "model.eval()\n", "        state['step'] = torch.zeros(())\n", "        loss.backward()\n",
          " \\\n", " \\\n        ", "\\\n", "    \\\n", "        \\\n"]
EDIT = st.tuples(st.sampled_from(["insert", "delete", "paste", "line", "end"]), st.integers(0, 10**9),
                 st.integers(0, 10**9), st.sampled_from(PIECES))
FUZZ = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _edited(text: str, edit: Tuple[str, int, int, str]) -> str:
    kind, a, b, piece = edit
    at = a % (len(text) + 1)
    if kind == "insert":
        return text[:at] + piece + text[at:]
    if kind == "delete":
        return text[:at] + text[at + 1 + b % 40:]
    if kind == "paste":  # a copied piece of the file, up to a few lines
        source = b % (len(text) + 1)
        return text[:at] + text[source:source + 1 + a % 200] + text[at:]
    if kind == "end":  # typed at the end of the file, over its last few characters (its last line break too)
        return text[:max(len(text) - b % 4, 0)] + piece
    # a whole line typed (or half of it) at the start of a row
    row_start = text.rfind("\n", 0, at) + 1
    return text[:row_start] + piece + text[row_start:]


def _whole(text: str, path: str):
    """The tree, summary and findings of a whole parse and a whole summary of `text`."""
    module, is_package = "m", False
    summary, _ = summarize_whole(text, module, is_package, path)
    facts = Project([(path, summary)]).facts(module, summary)
    try:
        tree = cst.parse_module(text)
    except (cst.ParserSyntaxError, SyntaxError):
        tree = None
    return tree, summary, check_source(text, path, EVERY_RULE_EVERYWHERE, facts=facts)


def _walked(walk: Walk):
    """What a walk found, in its order (its nodes are those of one tree: compared by identity)."""
    def bindings(found):
        return [(b.name, b.how, id(b.value)) for b in found]

    types = {t for _, part in walk.parts.values() for t in part.by_type}
    return (list(walk.imports.items()), bindings(b for _, part in walk.parts.values() for b in part.bindings),
            {t: [id(n) for n, _ in walk.nodes(t)] for t in types},
            [(f.qualname, id(f.node), {n: bindings(b) for n, b in f.scope.items()}) for f in walk.functions],
            {id(n): id(p) for n, p in walk.parents.items()}, [id(c) for c, _ in walk.module_calls],
            {n: bindings(b) for n, b in walk.module_scope.items()}, walk.names)


def _incremental(text: str, path: str, reparser: Reparser):
    summary = summarize(text, "m", False, path)
    facts = single_file_facts(text, path)  # the same remembered summary
    assert facts["summary"] is summary
    findings = check_source(text, path, EVERY_RULE_EVERYWHERE, facts=facts, reparser=reparser)
    return summary, findings


@pytest.mark.parametrize("path", [str(p) for p in FILES], ids=[p.name for p in FILES])
def test_random_edits_to_real_files_give_what_a_whole_analysis_gives(path):
    # `single_file_facts` names the module after the file: a path with no package above it.
    name = "m.py"

    @FUZZ
    @given(st.lists(EDIT, min_size=1, max_size=6))
    def run(edits):
        text = TEXTS[path]
        reparser = Reparser()
        _incremental(text, name, reparser)
        for edit in edits:
            text = _edited(text, edit)
            tree, summary, findings = _whole(text, name)
            got_summary, got_findings = _incremental(text, name, reparser)
            assert got_summary == summary
            assert got_findings == findings
            if tree is not None and SYNTAX_ERROR not in {f.code for f in findings}:  # the engine analysed it
                assert tree.code == text  # what every position rests on: the tree is the text, row for row
                assert reparser.text == text and reparser.module is not None
                assert reparser.module.deep_equals(tree)
                assert _walked(reparser.walk) == _walked(Walk(reparser.module))

    run()


@pytest.mark.parametrize("old, new", [
    ("        model.step()\n", "        model.step()\n        print(x.item())"),  # a new last row, no line break after it
    ("        model.step()\n", "        model.step()"),  # the last line break deleted
    ("        model.step()\n", "        model.step(x"),  # half a call at the very end
], ids=["typed-after-the-last-line-break", "last-line-break-deleted", "half-a-call-at-the-end"])
def test_an_edit_at_the_end_of_the_file_gives_what_a_whole_analysis_gives(old, new):
    text = "import torch\n\n\ndef train(model, loader):\n    for x in loader:\n        model.step()\n"
    reparser = Reparser()
    _incremental(text, "m.py", reparser)
    edited = text.replace(old, new)
    _, summary, findings = _whole(edited, "m.py")
    assert _incremental(edited, "m.py", reparser) == (summary, findings)


# Rows Python reads (it takes the statement's indentation from the backslash's row, else from its
# own), and one it refuses, where libcst parses the statement alone but not the whole file.
@pytest.mark.parametrize("row, before, python_reads", [
    ("    \\\n", "    optimizer.zero_grad(", True), ("\\\n", "    optimizer.zero_grad(", True),
    ("            \\\n", "            p.grad.data.clamp_(", True), ("    \\\n", "@perflsp.profile(", False)])
def test_a_backslash_alone_on_its_row_before_a_statement_is_one_pfl000_in_both_paths(row, before, python_reads):
    text = TEXTS[str(ROOT / "examples" / "train_loop.py")]
    reparser = Reparser()
    _incremental(text, "m.py", reparser)
    at = text.index(before)
    edited = text[:at] + row + text[at:]
    try:
        ast.parse(edited)
    except SyntaxError:
        assert not python_reads
    else:
        assert python_reads
    line = text.count("\n", 0, at) + 1
    expected = [not_analysed("m.py", line, len(row) - 2, "a backslash alone on its row continues into the next "
                                                          "statement, which perflsp's parser misreads; perflsp "
                                                          "skipped this file")]
    assert _whole(edited, "m.py")[2] == _incremental(edited, "m.py", reparser)[1] == expected


def test_an_edit_inside_a_method_parses_and_summarises_that_method_only():
    path = str(ROOT / "rules" / "context.py")
    text = TEXTS[path]
    reparser = Reparser()
    before = summarize(text, "m", False, "m.py")
    reparser.parse(text)
    row = text.splitlines().index("    def descendants(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:") + 2
    lines = text.splitlines(keepends=True)
    lines[row] = lines[row].replace("stack = ", "stack  = ")
    edited = "".join(lines)
    after = summarize(edited, "m", False, "m.py")
    tree = reparser.parse(edited)
    assert reparser.spliced
    assert tree.deep_equals(cst.parse_module(edited))
    # The other statements' nodes and summary entries are the very same objects.
    assert sum(a is b for a, b in zip(tree.body, reparser.module.body)) == len(tree.body)
    assert after["functions"][0] is before["functions"][0] and after["calls"][-1] is before["calls"][-1]
    assert after == summarize_whole(edited, "m", False, "m.py")[0]


def test_an_edit_that_spans_statements_parses_the_whole_file():
    text = "import torch\n\n\ndef a(x):\n    return x.item()\n\n\ndef b(x):\n    return x\n\n\nc = 1\n"
    reparser = Reparser()
    reparser.parse(text)
    edited = text.replace("return x.item()\n\n\ndef b(x):\n", "return x.item()\n")
    assert reparser.parse(edited).deep_equals(cst.parse_module(edited))
    assert not reparser.spliced


def test_a_text_that_does_not_parse_keeps_the_last_tree():
    text = "import torch\n\n\ndef a(x):\n    return x.item()\n\n\ndef b(x):\n    return x\n\n\nc = 1\n"
    reparser = Reparser()
    reparser.parse(text)
    with pytest.raises(cst.ParserSyntaxError):
        reparser.parse(text.replace("return x\n", "return x(\n"))
    assert reparser.text == text
    fixed = text.replace("return x\n", "return x + 1\n")
    assert reparser.parse(fixed).deep_equals(cst.parse_module(fixed)) and reparser.spliced


@pytest.mark.parametrize("old, new", [
    ("# header\nimport torch\n", "# header\nimport torch, os\n"),  # the first statement, with the module's header
    ("    return x.sum()\n\n# the end\n", "    return x.sum() + 1\n\n# the end\n"),  # the last one, with the footer
    ("    def __init__(self):\n        self.w = 1\n", "    def __init__(self):\n        self.w = 2\n"),  # a class's first
    ("    def forward(self, x):\n        return x\n    # closing\n",
     "    def forward(self, x):\n        return x.item()\n    # closing\n"),  # a class's last, with the body's footer
])
def test_the_first_and_last_statements_of_a_file_and_of_a_class_are_parsed_alone(old, new):
    text = ("# header\nimport torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        self.w = 1\n\n"
            "    def forward(self, x):\n        return x\n    # closing\n\n\ndef step(x):\n    return x.sum()\n\n"
            "# the end\n")
    assert old in text
    reparser = Reparser()
    reparser.parse(text)
    edited = text.replace(old, new)
    assert reparser.parse(edited).deep_equals(cst.parse_module(edited))
    assert reparser.spliced


def test_an_edit_inside_a_method_parses_only_the_statement_of_the_method_it_lies_in():
    text = ("import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
            "    def forward(self, x):\n        y = x * 2\n        z = y.sum()\n        return z.item()\n\n"
            "    def extra(self):\n        return 1\n\n\ndef step(x):\n    a = x + 1\n    return a\n")
    reparser = Reparser()
    before = reparser.parse(text)
    edited = text.replace("z = y.sum()", "z = y.sum(0)")
    after = reparser.parse(edited)
    assert reparser.spliced and after.deep_equals(cst.parse_module(edited))
    forward_before, forward_after = before.body[1].body.body[1], after.body[1].body.body[1]
    assert forward_after is not forward_before
    kept = [(a is b) for a, b in zip(forward_before.body.body, forward_after.body.body)]
    assert kept == [True, False, True]  # `y = ...` and `return ...` are the very same nodes
    assert after.body[1].body.body[2] is before.body[1].body.body[2] and after.body[2] is before.body[2]
    again = edited.replace("a = x + 1", "a = x + 2")  # a statement of a top-level function
    assert reparser.parse(again).deep_equals(cst.parse_module(again)) and reparser.spliced
    assert reparser.module.body[2].body.body[1] is after.body[2].body.body[1]


def test_an_edit_inside_a_long_top_level_value_parses_that_statement_only():
    config = "".join(f"    'layer{i}': dict(width={i}, depth=2, act='gelu'),\n" for i in range(1000))
    text = f"import torch\n\nCONFIGS = {{\n{config}}}\n\n\ndef build(name):\n    return CONFIGS[name]\n"
    reparser = Reparser()
    before = reparser.parse(text)
    summary = summarize(text, "m", False, "m.py")
    edited = text.replace("'layer500': dict(width=500,", "'layer500': dict(width=501,")
    after = reparser.parse(edited)
    assert reparser.spliced and after.deep_equals(cst.parse_module(edited))
    assert after.body[0] is before.body[0] and after.body[2] is before.body[2]
    again = summarize(edited, "m", False, "m.py")
    assert again == summarize_whole(edited, "m", False, "m.py")[0]
    assert again["functions"][0] is summary["functions"][0]  # `build` kept as it was


# Statements that read one another: module-level names, a base class, torch.compile, values stored
# under a key, the loader's collate function, code at the module level that runs across statements.
READ_ACROSS = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader

DEVICE = "cuda"
SCALE = torch.ones(3)
state = {}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.bn(self.conv(x))
        if y.sum() > 0:
            print(y.item())
        return y * SCALE.to(DEVICE)


class Head(Block):
    def forward(self, x):
        return x.float().item()


def make(n):
    m = Head()
    return m.double()


def step(model, loader, opt):
    for x, y in loader:
        loss = model(x.to(DEVICE)).sum()
        loss.backward()
        opt.step()
        state["loss"] = loss.detach()
        print(loss.item())


def report():
    for i in range(10):
        print(state["loss"].item())


def evaluate(model, loader):
    model.eval()
    for x, y in loader:
        out = model(x.cuda())
        total = float(out.sum())


compiled = torch.compile(step)
loader = DataLoader([], batch_size=4)
model = make(1)
model.eval()
for x, y in loader:
    model(x)
a = SCALE.cuda().item()
b = SCALE.cuda().item()
'''


def _on_line(findings, text, marker):
    lines = text.splitlines()
    return [(f.code, f.message) for f in findings if marker in lines[f.start.row - 1]]


@pytest.mark.parametrize("old, new, elsewhere", [
    ('DEVICE = "cuda"', 'DEVICE = "cpu"', "SCALE.to(DEVICE)"),  # a module-level name
    ('SCALE = torch.ones(3)', 'SCALE = torch.ones(3).cuda()', "SCALE.to(DEVICE)"),
    ("class Block(nn.Module):", "class Block(object):", "m.double()"),  # a base class: Head() is no module now
    ("compiled = torch.compile(step)", "compiled = torch.compile(report)", "print(loss.item())"),
    ("    for i in range(10):\n", "    float = int\n    for i in range(10):\n", "float(out.sum())"),  # shadows a builtin
    ("state = {}\n", 'state = {}\ntorch.set_default_device("cuda")\n', "SCALE.to(DEVICE)"),
    ("DataLoader([], batch_size=4)", "DataLoader([], batch_size=4, collate_fn=report)", 'state["loss"].item()'),
    ('state["loss"] = loss.detach()', 'state["loss"] = loss.detach().cpu()', 'state["loss"].item()'),  # a stored value
    ("model.eval()\nfor", "model.train()\nfor", "    model(x)"),  # module-level code, across statements
    ("b = SCALE.cuda().item()", "b = 2", "a = SCALE"),  # syncs back to back at the module level
    ("def evaluate(", "@torch.compile\ndef evaluate(", None),  # a decorator
    ("        y = self.bn(self.conv(x))\n", "        y = self.bn(self.conv(x)) + 1\n", None),  # one method
], ids=["module-name", "module-value", "base-class", "torch-compile", "shadowed-builtin", "default-device",
        "collate-fn", "stored-value", "module-eval", "module-syncs", "decorator", "method"])
def test_an_edit_that_other_statements_read_changes_their_findings_as_a_whole_analysis_does(old, new, elsewhere):
    name = "m.py"
    reparser = Reparser()
    _, before = _incremental(READ_ACROSS, name, reparser)
    assert before == _whole(READ_ACROSS, name)[2]
    assert READ_ACROSS.count(old) == 1
    text = READ_ACROSS.replace(old, new)
    _, after = _incremental(text, name, reparser)
    assert after == _whole(text, name)[2]
    if elsewhere is not None:  # the edit changed what another statement reports
        assert _on_line(before, READ_ACROSS, elsewhere) != _on_line(after, text, elsewhere)
    if reparser.spliced:  # and the statements whose reads still hold kept their candidates
        assert reparser.reuse.reused >= len(reparser.module.body) // 2


def test_an_edit_inside_a_method_checks_its_class_again_and_keeps_the_other_statements_candidates():
    name = "m.py"
    reparser = Reparser()
    _incremental(READ_ACROSS, name, reparser)
    # All but the module-level code that reads `SCALE` (`value_before` reads the top-level statements).
    keepable = len(reparser.reuse.entries)
    assert keepable == len(reparser.module.body) - 2
    text = READ_ACROSS.replace("        return x.float().item()\n", "        return x.float().item() + 1\n")
    _, findings = _incremental(text, name, reparser)
    assert findings == _whole(text, name)[2]
    assert reparser.spliced and reparser.reuse.reused == keepable - 1  # all but `Head`
