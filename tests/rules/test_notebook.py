"""Notebook cells with IPython syntax: every form is opaque, Python around it keeps its rows and columns."""
from __future__ import annotations

import random
from typing import List, Set, Tuple

import pytest

from perflsp.config import Settings
from perflsp.rules.notebook import Program, check_cells

ONLY_PFL101 = Settings(select=("PFL101",))


def findings(*cells: str):
    return [(f.code, f.cell, f.start.row) for f in check_cells(list(cells), "nb.ipynb", ONLY_PFL101)]


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
        "%%time\nfor b in loader:\n    x?\n    b.item()\n",
        "for b in loader:\n    !echo \\\n      more\n    b.item()\n",
    ]
    assert findings(*cells) == [("PFL101", 2, 4), ("PFL101", 3, 4)]


@pytest.mark.parametrize("cell", [
    "x = (a\n     % b)\n",  # a line that starts with `%` inside brackets continues an expression
    'doc = """\n!not a command\n?nor help\n%nor a magic\n"""\n',
    "s = 'what?'\nt = \"!x\"  # why?\n",
    "total = 1 + \\\n    2\n",
    "ok = a != b\nsame = a == b\nf(a=1)\nsmaller = lambda x=1: x <= 2\n",
])
def test_python_that_looks_like_ipython_is_left_alone(cell):
    assert Program([cell]).source == cell


# --- random cells --------------------------------------------------------------------------------
# Fixed seeds, so a failing cell is reproduced by its seed alone.

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
STEP = "b.item()"  # PFL101 in the loop: where the engine reports it shows where rows went


def random_cell(rng: random.Random) -> Tuple[str, Set[int], Set[int]]:
    """A cell, the rows (1-based) of its Python lines, and the rows of `STEP` inside loops."""
    lines: List[str] = []
    python: Set[int] = set()
    steps: Set[int] = set()

    def add(text: str, indent: str, is_python: bool) -> None:
        for part in text.split("\n"):
            lines.append(indent + part)
            if is_python:
                python.add(len(lines))

    if rng.random() < 0.2:
        add(rng.choice(["%%time", "%%timeit -n 3 setup()", "%%capture out"]), "", False)
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.3:
            add(LOOP, "", True)
            for _ in range(rng.randint(1, 3)):
                is_python = rng.random() < 0.5
                add(STEP if is_python else rng.choice(ESCAPES), "    ", is_python)
                if is_python:
                    steps.add(len(lines))
        else:
            is_python = rng.random() < 0.5
            add(rng.choice(PYTHON if is_python else ESCAPES), "", is_python)
    return "\n".join(lines) + rng.choice(["", "\n"]), python, steps


@pytest.mark.parametrize("seed", range(300))
def test_random_cells_mixing_python_and_ipython(seed):
    cell, python, steps = random_cell(random.Random(seed))
    found = findings(cell)
    assert [f for f in found if f[0] == "PFL000"] == [], cell
    # Rows are kept: each Python line is still on its row, and findings land on the cell's rows.
    program = Program([cell]).source.split("\n")
    cell_lines = cell.split("\n")
    assert all(program[row - 1] == cell_lines[row - 1] for row in python), cell
    assert {row for code, _, row in found if code == "PFL101"} == steps, cell
