"""Notebook cells with IPython syntax: every form is opaque, Python around it keeps its rows and columns."""
from __future__ import annotations

from typing import List, Set, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perflsp.config import Settings
from perflsp.rules.notebook import Program, check_cells

# A host copy in a loop is reported at each one (back-to-back `.item()` reads would be one finding).
ONLY_PFL102 = Settings(select=("PFL102",), preview=True)


def findings(*cells: str):
    return [(f.code, f.cell, f.start.row) for f in check_cells(list(cells), "nb.ipynb", ONLY_PFL102)]


@pytest.mark.parametrize("cell", [
    "!pip install torch \\\n    numpy \\\n    tqdm\nimport torch\n",
    "files = !ls -la\n",
    "out = !!echo hi\n",
    "t = %time f(x)\n",
    "t = %timeit -o f(x) \\\n    + g(x)\n",
    "y = x?\n",
    "x??\n",
    "torch.nn.Linear??\n",
    "?x\n",
    "??x\n",
    "%timeit f(x)\n",
    "%time?\n",
    "%%time\nx = 1\n",
    "%%timeit -n 3 setup()\ny = f(x)\n",
    "%%bash\nfor f in *.py; do echo $f; done\n",
    "/print a b\n,print a b\n;print a b\n",
    "for i in range(3):\n    !echo $i \\\n      done\n    %time f(i)\n    i?\n",
    "get_ipython().system('ls')\nget_ipython().run_line_magic('time', 'f(x)')\n",
], ids=lambda cell: cell.split("\n")[0][:24])
def test_valid_ipython_is_no_syntax_error(cell):
    assert findings(cell) == []


@pytest.mark.parametrize("cell", [
    "def f(:\n    pass\n!ls\n",
    "%time f(x)\nx = (\n",
    "foo(a)?\n",  # help needs a name before the `?`: IPython raises SyntaxError too
    "x += !ls\n",  # only a plain `=` takes a command's output
    "%%time\ndef f(:\n",  # the body of %%time is Python
], ids=lambda cell: cell.replace("\n", "|")[:24])
def test_a_real_syntax_error_is_still_reported(cell):
    assert [code for code, _, _ in findings(cell)] == ["PFL000"]


def test_findings_after_ipython_syntax_keep_their_cell_rows():
    cells = [
        "!pip install torch \\\n    numpy\nloader = !ls\n",
        "%%time\nfor b in loader:\n    x?\n    b.tolist()\n",
        "for b in loader:\n    !echo \\\n      more\n    b.tolist()\n",
    ]
    assert findings(*cells) == [("PFL102", 2, 4), ("PFL102", 3, 4)]


@pytest.mark.parametrize("cell", [
    "x = (a\n     % b)\n",  # a line that starts with `%` inside brackets continues an expression
    'doc = """\n!not a command\n?nor help\n%nor a magic\n"""\n',
    "s = 'what?'\nt = \"!x\"  # why?\n",
    "total = 1 + \\\n    2\n",
    "ok = a != b\nsame = a == b\nf(a=1)\nsmaller = lambda x=1: x <= 2\n",
])
def test_python_that_looks_like_ipython_is_left_alone(cell):
    assert Program([cell]).source == cell


# --- generated cells -----------------------------------------------------------------------------
# Hypothesis, derandomized: the same cells on every run, and a failing cell is shrunk to a small one.

PYTHON = [
    "import torch",
    "x = f(a=1, b='!ls')",
    "s = 'what?'  # really?",
    "ok = a != b and c == d",
    "d = {'k': 1, 'v': '%s'}",
    "n = (a\n     % b)",  # inside brackets, a line may start with `%` or `,`
    "values = [1\n          , 2]",
    'doc = """\n!echo inside a string\nwhat?\n"""',
    "total = 1 + \\\n    2",
    "f = lambda x=1: x",
    "print(f'{x!r}?')",
]
ESCAPES = [
    "!pip install torch",
    "!pip install torch \\\n    numpy \\\n    tqdm",
    "!!ls -la",
    "!echo 'unclosed (",
    "files = !ls",
    "out = !!echo \"hi",
    "t = %time f(x)",
    "%timeit f(x)",
    "%matplotlib inline",
    "%load_ext autoreload \\\n    more",
    "%%time",
    "?x",
    "??torch.nn",
    "x?",
    "y = x??",
    "torch.nn.Linear?",
    "/print a b",
    ",print a b",
    ";print a b",
]
LOOP = "for b in loader:"
STEP = "b.tolist()"  # PFL102 in the loop: where the engine reports it shows where rows went

# Lines as (indent, text, is it Python): a line at the top of the cell, or a loop with its body.
python_or_escape = st.one_of(st.sampled_from(PYTHON).map(lambda text: ("", text, True)),
                             st.sampled_from(ESCAPES).map(lambda text: ("", text, False)))
in_loop = st.one_of(st.just(("    ", STEP, True)), st.sampled_from(ESCAPES).map(lambda text: ("    ", text, False)))
block = st.one_of(python_or_escape.map(lambda line: [line]),
                  st.lists(in_loop, min_size=1, max_size=3).map(lambda body: [("", LOOP, True), *body]))
cell_magic = st.sampled_from(["%%time", "%%timeit -n 3 setup()", "%%capture out"]).map(lambda text: [("", text, False)])


@st.composite
def cells(draw) -> Tuple[str, Set[int], Set[int]]:
    """A cell, the rows (1-based) of its Python lines, and the rows of `STEP` inside loops that
    follow no other `STEP` (copies back to back are one finding, at the first)."""
    blocks = draw(st.lists(block, min_size=1, max_size=6))
    lines: List[str] = []
    python: Set[int] = set()
    steps: Set[int] = set()
    for indent, text, is_python in [line for part in [draw(st.just([]) | cell_magic), *blocks] for line in part]:
        for part in text.split("\n"):
            lines.append(indent + part)
            if is_python:
                python.add(len(lines))
        if text == STEP and not (len(lines) > 1 and lines[-2].strip() == STEP):
            steps.add(len(lines))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"])), python, steps


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(cells())
def test_generated_cells_mixing_python_and_ipython(generated):
    cell, python, steps = generated
    found = findings(cell)
    assert [f for f in found if f[0] == "PFL000"] == [], cell
    # Rows are kept: each Python line is still on its row, and findings land on the cell's rows.
    program = Program([cell]).source.split("\n")
    cell_lines = cell.split("\n")
    assert all(program[row - 1] == cell_lines[row - 1] for row in python), cell
    assert {row for code, _, row in found if code == "PFL102"} == steps, cell
