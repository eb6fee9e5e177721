"""What the parser can take, measured with the tokenizer before libcst ever sees the text.

libcst's native parser recurses on the thread's stack once per nesting level and, past what the
stack holds, kills the whole process (SIGSEGV, no exception): about 1,270 nested brackets with 8 MiB
of stack, 310 with 2 MiB (Windows' default), fewer nested calls, the same inside the replacement
fields of f-strings and t-strings; unary operators and operator chains (`a + a + ...`, `a.b.b...`,
`x[0][0]...`) cost less stack per level but crash too, and their parse time grows with the square
of their length (`a + a + ...`: 2,000 terms 0.4 s, 4,000 terms 2 s, 20,000 terms minutes). Each
`elif` nests in the one before: about 8,200 of them crash it with 8 MiB of stack, 2,000 with 2 MiB
(1,650 with 100 brackets open in the last branch, 1,050 under 40 levels of indentation). The
engine's own walk of the tree is Python recursion, which gives out between 150 and 200 nested
brackets, between 300 and 500 chained operators and at about 480 `elif`s (libcst's code
generation, for positions); the summary's `ast` gives out at 2,985 `elif`s (Python 3.11).
The parser also holds 2 to 4 KiB of memory per token and takes 3 to 9 s of CPU per 100,000: a
list literal of 900,000 numbers in a 2.7 MB file took 3.4 GB and a minute (its `ast`, 0.9 GB).
A token is at least one character: only a text longer than `MAX_TOKENS` characters is counted.

Real code is nowhere near: over the 11,586 Python files of 28 PyTorch projects, measured by this
module, the most brackets open at once is 10 and the deepest chain 50 (kornia's unrolled 3x3
non-maximum suppression, `(ct > x[...]) & (ct > x[...]) & ...`); over the 8,565 files of torch,
numpy, sympy, matplotlib and the standard library, the longest `if`/`elif` chain has 80 branches
(torch._dynamo's `VariableBuilder`) and the largest file 196,000 tokens (torch's
`common_methods_invocations.py`: 760 MB and 18 s in libcst). A file past the limits below is not
parsed: the engine reports PFL000 where it goes past.
"""
from __future__ import annotations

import keyword
import tokenize
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

from perflsp.rules.lines import tokens

MAX_BRACKETS = 100  # open at once: ten times real code, half of what CPython itself accepts
MAX_CHAIN = 200  # levels of operators, attributes, calls and subscripts in one expression: four times real code
MAX_ELIFS = 300  # `elif` branches of one `if` statement: almost four times real code
MAX_TOKENS = 250_000  # in one file: a quarter more than the largest real file measured

# Tokens that end an operand: a bracket opened right after one calls or indexes it (a chain link).
_OPERAND_TYPES = frozenset({tokenize.NAME, tokenize.NUMBER, tokenize.STRING})
_KEYWORD_OPERATORS = frozenset({"not", "and", "or", "if", "else", "lambda", "await", "in", "is"})
# Operator tokens that separate or assign rather than nest.
_NOT_CHAINING = frozenset({",", ";", ":", "=", "->", ":=", "...", "!", "+=", "-=", "*=", "/=", "//=", "%=",
                           "@=", "&=", "|=", "^=", ">>=", "<<=", "**="})
_OPEN, _CLOSE = "([{", ")]}"
_SKIPPED = frozenset({tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT})
_NOT_NODES = _SKIPPED | {tokenize.NEWLINE, tokenize.ENDMARKER}  # tokens not counted against `MAX_TOKENS`
# String prefixes whose replacement fields are code: f-strings and t-strings, raw or not.
_FIELD_PREFIXES = frozenset("ft")
_TEMPLATE_PREFIXES = frozenset({"t", "rt", "tr"})  # any case


@dataclass(frozen=True)
class Excess:
    """Where a statement goes past a limit, and what to tell the user."""

    row: int
    column: int
    message: str


def excess(source: str) -> Optional[Excess]:
    """The first place `source` goes past `MAX_BRACKETS`, `MAX_CHAIN`, `MAX_ELIFS` or `MAX_TOKENS`, if any.

    Text the tokenizer cannot follow is measured up to that point: the parser stops there too."""
    scan = _Scan()
    try:
        for token in _templates_joined(tokens(source)):
            found = scan.feed(token)
            if found is not None:
                return found
    except (tokenize.TokenError, SyntaxError):
        pass
    return None


def count_tokens(text: str) -> int:
    """The tokens of `text` that the parser makes nodes of, counted up to one past `MAX_TOKENS`
    (text the tokenizer cannot follow, up to there)."""
    count = 0
    try:
        for token in _templates_joined(tokens(text)):
            count += token.type not in _NOT_NODES
            if count > MAX_TOKENS:
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    return count


def tokens_in(text: str) -> Optional[int]:
    """`count_tokens(text)`, or None for a text of `MAX_TOKENS` characters or fewer: a token is at
    least one character, so such a text cannot have too many, and most texts are never counted."""
    return count_tokens(text) if len(text) > MAX_TOKENS else None


class _Frame:
    """One open bracket (or the statement itself): the chain outside it when it opened, and the
    lambdas inside whose parameters are still being read (their commas do not end a chain)."""

    __slots__ = ("operators", "postfix", "lambdas")

    def __init__(self, operators: int, postfix: int):
        self.operators = operators
        self.postfix = postfix
        self.lambdas = 0


class _Scan:
    """How deep the parser will nest, token by token: each operator (binary, unary, `not`, `lambda`,
    ...) on the path from the statement down to a token is one level, and so is each attribute,
    call or subscript applied to the operand being read (`a.b(c)[d]`); brackets nest a new count
    that starts from the depth where they open. An upper bound: precedence only makes trees flatter.
    It counts the tokens of the file, and the `elif`s of each `if` statement, as it goes."""

    def __init__(self) -> None:
        self.tokens = 0  # read so far, of the kinds the parser makes nodes of
        self.elifs = [0]  # for each open indented block, the `elif`s of the `if` statement last begun there
        self._start_statement()

    def _start_statement(self) -> None:
        self.frames: List[_Frame] = [_Frame(0, 0)]
        self.operators = 0  # operators on the path, the enclosing brackets' included
        self.postfix = 0  # attributes, calls and subscripts applied to the current operand
        self.previous: Optional[Tuple[int, str]] = None  # the last significant token's type and text

    def feed(self, token: tokenize.TokenInfo) -> Optional[Excess]:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            self._start_statement()  # brackets never stay open across the end of a statement
            return None
        if token.type == tokenize.INDENT:
            self.elifs.append(0)
        elif token.type == tokenize.DEDENT:
            self.elifs.pop()
        if token.type in _SKIPPED:
            return None
        found = self._count(token)
        if found is None and self.previous is None:
            found = self._begin_statement(token)
        if found is not None:
            return found
        for kind, text in _parts(token):
            self._step(kind, text)
            self.previous = (kind, text)
            found = self._check(token)  # inside an f-string, nesting peaks before the token ends
            if found is not None:
                return found
        return None

    def _count(self, token: tokenize.TokenInfo) -> Optional[Excess]:
        self.tokens += 1
        if self.tokens > MAX_TOKENS:
            return Excess(*token.start, f"file too large to analyse: more than {MAX_TOKENS:,} tokens (the parser "
                                        "holds 2 to 4 KiB of memory for each); perflsp skipped this file")
        return None

    def _begin_statement(self, token: tokenize.TokenInfo) -> Optional[Excess]:
        self.elifs[-1] = self.elifs[-1] + 1 if token.string == "elif" else 0
        if self.elifs[-1] > MAX_ELIFS:
            return Excess(*token.start, f"`if` statement too long to analyse: more than {MAX_ELIFS} `elif` branches "
                                        "(the parser nests each one in the one before); perflsp skipped this file")
        return None

    def _step(self, kind: int, text: str) -> None:
        frame = self.frames[-1]
        if kind == tokenize.OP and text in _OPEN:
            self.postfix += self._after_operand()  # `f(...)`, `x[...]`: one more level on the operand
            self.frames.append(_Frame(self.operators, self.postfix))
            self.operators, self.postfix = self.operators + self.postfix, 0
        elif kind == tokenize.OP and text in _CLOSE:
            if len(self.frames) > 1:
                closed = self.frames.pop()
                self.operators, self.postfix = closed.operators, closed.postfix
        elif kind == tokenize.OP and text == ",":
            if not frame.lambdas:  # the next element starts where the bracket opened
                self.operators, self.postfix = frame.operators + frame.postfix, 0
        elif kind == tokenize.OP and text == ":":
            frame.lambdas = max(frame.lambdas - 1, 0)  # a lambda's body nests in it: the chain goes on
        elif kind == tokenize.OP and text == ".":
            self.postfix += 1
        elif _is_operator(kind, text):
            self.operators, self.postfix = self.operators + 1, 0
            frame.lambdas += text == "lambda"

    def _after_operand(self) -> bool:
        if self.previous is None:
            return False
        kind, text = self.previous
        if kind == tokenize.OP:
            return text in _CLOSE
        return kind in _OPERAND_TYPES and not keyword.iskeyword(text)

    def _check(self, token: tokenize.TokenInfo) -> Optional[Excess]:
        row, column = token.start
        if len(self.frames) - 1 > MAX_BRACKETS:
            return Excess(row, column, f"too deeply nested to analyse: more than {MAX_BRACKETS} brackets open "
                                       "at once here; perflsp skipped this file")
        if self.operators + self.postfix > MAX_CHAIN:
            return Excess(row, column, f"expression too long to analyse: more than {MAX_CHAIN} operators, "
                                       "attributes, calls or subscripts chained here (the parser's time grows "
                                       "with the square of a chain); perflsp skipped this file")
        return None


def _is_operator(kind: int, text: str) -> bool:
    if kind == tokenize.OP:
        return text not in _NOT_CHAINING
    return kind == tokenize.NAME and text in _KEYWORD_OPERATORS


def _templates_joined(stream: Iterator[tokenize.TokenInfo]) -> Iterator[tokenize.TokenInfo]:
    """The tokens, with each t-string (PEP 750) as one string token. The tokenizer of Python 3.13
    and before does not know them: `t"{x}"` comes as the name `t` and a plain string right after
    it, whose fields libcst parses as code."""
    held: Optional[tokenize.TokenInfo] = None  # a name that may prefix the string after it
    for token in stream:
        if held is not None:
            if token.type == tokenize.STRING and token.start == held.end:
                token = token._replace(string=held.string + token.string, start=held.start)
            else:
                yield held
            held = None
        if token.type == tokenize.NAME and token.string.lower() in _TEMPLATE_PREFIXES:
            held = token
        else:
            yield token
    if held is not None:
        yield held


def _parts(token: tokenize.TokenInfo) -> Iterator[Tuple[int, str]]:
    """The token, or for an f-string or a t-string (one token before Python 3.12, which gives an
    f-string's parts as tokens, and 3.14, a t-string's) the brackets and operators of its
    replacement fields, character by character: the parser reads those fields as code. Counting
    characters overestimates, and real f-strings stay far below."""
    if token.type != tokenize.STRING or not _FIELD_PREFIXES.intersection(_prefix(token.string)):
        yield token.type, token.string
        return
    text, at, fields = token.string, 0, 0  # `fields`: braces open inside replacement fields
    while at < len(text):
        char = text[at]
        if fields == 0 and text.startswith(("{{", "}}"), at):
            at += 2  # an escaped brace is literal text
            continue
        if char in _OPEN and (fields or char == "{"):
            fields += 1
            yield tokenize.OP, char
        elif char in _CLOSE and fields:
            fields -= 1
            yield tokenize.OP, char
        elif fields and char in "+-*/%@&|^~<>.":
            yield tokenize.OP, char
        at += 1


def _prefix(literal: str) -> str:
    return literal[:len(literal) - len(literal.lstrip("rRbBuUfFtT"))].lower()
