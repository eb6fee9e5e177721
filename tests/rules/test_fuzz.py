"""Property-based fuzzing (hypothesis, derandomized so CI is deterministic): the engine never
raises on any text, and `--fix` / `--add-noqa` never break a file or leave a finding they claim to
silence."""
from __future__ import annotations

import ast
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perflsp.config import Settings
from perflsp.rules.engine import SYNTAX_ERROR, check_source
from perflsp.rules.fixes import add_noqa, fix_source
from perflsp.rules.registry import all_rules

EVERY_RULE_EVERYWHERE = Settings(preview=True, report_cold=("PFL",))
CODES = {rule.code for rule in all_rules()} | {SYNTAX_ERROR}
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Pieces of Python, PyTorch and of what breaks tokenizers: brackets, strings of every kind, line
# breaks of every kind, indentation, line continuations (a backslash alone on a row too), comments
# and suppressions, IPython-looking text.
FRAGMENTS = [
    "import torch", "import numpy as np", "for b in loader:", "while x:", "def step(x):", "class M(nn.Module):",
    "with torch.no_grad():", "async def f():", "lambda a, b: ", "return ", "yield ", "await ", "if ", "else:",
    "x", "b", " = ", " + ", " * ", " @ ", ".item()", ".cpu()", ".to('cuda')", ".contiguous()", ".view(2, 3)",
    "torch.cuda.FloatTensor(3)", "torch.zeros(4, device='cuda')", "torch.cuda.synchronize()", "float(x)",
    "np.float64(1)", "(", ")", "[", "]", "{", "}", ",", ":", ";", ".", "\\", "'", '"', "'''", '"""', "f'{x}'",
    'f"{b.item()!r:>{w}}"', "rb'\\x00'", "# noqa", "# noqa: PFL101", "# perflsp: hot", "# perflsp: ignore[PFL1]",
    "\n", "\r\n", "\r", "\n    ", "\n        ", "\t", " ", "\x0c", "\u2028", "\x85", "\x00", "é", "😀",
    " \\\n", "\n    \\\n", "\n\\\n",
    "%time ", "!ls",
]
python_ish = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)


@FUZZ
@given(st.one_of(st.text(max_size=200), python_ish))
def test_any_text_gives_findings_or_pfl000_never_an_exception(text):
    findings = check_source(text, "fuzz.py", EVERY_RULE_EVERYWHERE)
    assert {f.code for f in findings} <= CODES
    assert all(f.code != SYNTAX_ERROR for f in findings) or len(findings) == 1


# --- fixes and noqa comments on small programs with findings ---------------------------------------

# Statements inside a step loop, each with at least one finding; some with safe or unsafe fixes,
# some where a `# noqa` cannot go on the finding's own row.
STATEMENTS = [
    "x = b.item()",
    "y = b.cpu()",
    "z = torch.cuda.FloatTensor(3, 4)",
    "w = torch.log(1 + b)",
    "h = b.to('cuda')",
    "print(b.sum().item(), '''\ntext # noqa\n''')",
    "t = b.mean().item() + \\\n    1",
    "s = '\x0c'; p = b.item()",
    "u = '\u2028'; q = b.max().item()",
    "n = '# noqa: E501'; v = b.min().item()",
    "r = b.item()  # noqa: E501",
    "m = f'''{b.item()}\n'''",
    "if b.sum():\n    pass",
]


@st.composite
def programs(draw):
    """A small training loop with one kind of line break, maybe blank rows or comments between statements."""
    statements = draw(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=6))
    spacer = draw(st.sampled_from(["", "\n", "# a comment\n"]))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    body = "".join(spacer + statement + "\n" for statement in statements)
    loop = "".join(" " * 8 + line + "\n" for line in body.split("\n")[:-1])
    return f"import torch\n\n\ndef train(loader):\n    for b in loader:\n{loop}".replace("\n", newline)


def _breaks(text):
    return set(re.findall(r"\r\n|\r|\n", text))


@FUZZ
@given(programs(), st.booleans())
def test_fixes_keep_a_program_parsing_and_its_line_breaks(source, unsafe):
    ast.parse(source)
    fixed, _, _ = fix_source(source, "train.py", EVERY_RULE_EVERYWHERE, unsafe=unsafe)
    ast.parse(fixed)
    assert _breaks(fixed) == _breaks(source)


@FUZZ
@given(programs())
def test_add_noqa_silences_every_finding_and_changes_no_code(source):
    findings = check_source(source, "train.py", EVERY_RULE_EVERYWHERE)
    assert findings and SYNTAX_ERROR not in {f.code for f in findings}
    silenced, added = add_noqa(source, findings)
    assert ast.dump(ast.parse(silenced)) == ast.dump(ast.parse(source))
    assert check_source(silenced, "train.py", EVERY_RULE_EVERYWHERE) == []
    assert 0 < added <= len(findings) and _breaks(silenced) == _breaks(source)
    assert add_noqa(silenced, findings) == (silenced, 0)
