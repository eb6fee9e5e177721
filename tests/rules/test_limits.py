"""The parser's limits (`perflsp.rules.limits`): code as deep as real code gets is analysed, code
past the limits is one PFL000 where it goes past, measured without parsing."""
from __future__ import annotations

import pytest

from perflsp.config import Settings
from perflsp.rules.engine import check_source
from perflsp.rules.limits import MAX_BRACKETS, MAX_CHAIN, MAX_ELIFS, MAX_TOKENS, excess
from perflsp.rules.summary import summarize, summarize_whole

LOOP = "import torch\nfor b in loader:\n    x = {}\n"


def _codes(expression):
    return [f.code for f in check_source(LOOP.format(expression), "m.py", Settings(preview=True))]


@pytest.mark.parametrize("expression", [
    "(" * (MAX_BRACKETS - 2) + "b.item()" + ")" * (MAX_BRACKETS - 2),  # the call's own bracket makes MAX_BRACKETS
    "[" * (MAX_BRACKETS - 1) + "b.item()" + "]" * (MAX_BRACKETS - 1),
    " + ".join(["b.item()"] * (MAX_CHAIN - 1)),  # a call in each term is a level on that term only
    "b" + ".t" * (MAX_CHAIN - 2) + ".item()",
    "-" * (MAX_CHAIN - 2) + "b.item()",
    'f"{' + " + ".join(["a"] * (MAX_CHAIN // 2)) + '}" + str(b.item())',
], ids=["parentheses", "lists", "sum", "attributes", "unary", "f-string"])
def test_code_at_the_limits_is_analysed(expression):
    assert "PFL101" in _codes(expression) and "PFL000" not in _codes(expression)


@pytest.mark.parametrize("expression, row, column", [
    ("(" * (MAX_BRACKETS + 1) + "1" + ")" * (MAX_BRACKETS + 1), 3, 8 + MAX_BRACKETS),
    ("f(" * 3000, 3, 8 + 2 * MAX_BRACKETS + 1),  # never closed: measured up to where the tokenizer stops
    (" + ".join(["a"] * (MAX_CHAIN + 2)), 3, 8 + 4 * MAX_CHAIN + 2),
    ("lambda a, b: " * (MAX_CHAIN + 1) + "1", 3, 8 + 13 * MAX_CHAIN),  # a lambda's commas do not end the chain
    ('f"{' + "(" * (MAX_BRACKETS + 1) + '1}"', 3, 8),  # fields are code, counted inside the string's token
], ids=["parentheses", "unclosed", "sum", "lambdas", "f-string"])
def test_code_past_the_limits_is_one_pfl000_where_it_goes_past(expression, row, column):
    [finding] = check_source(LOOP.format(expression), "m.py", Settings(preview=True))
    assert finding.code == "PFL000" and (finding.start.row, finding.start.column) == (row, column)
    assert "perflsp skipped this file" in finding.message


def test_text_that_only_looks_deep_is_not_measured():
    quoted = '"' + "(" * 500 + '"'
    escaped = 'f"' + "{{" * 500 + "(" * 500 + '"'
    commented = "# " + "(" * 500
    separated = ", ".join(["a.b + c"] * 5000)  # long, but flat: elements are siblings
    assert excess("\n".join(["x = " + quoted, "y = " + escaped, commented, "z = [" + separated + "]"])) is None


@pytest.mark.parametrize("prefix", ["t", "T", "rt", "rT", "Rt", "RT", "tr", "tR", "Tr", "TR"])
def test_the_fields_of_t_strings_are_measured_as_code(prefix):
    # Before Python 3.14 the tokenizer reads `t"..."` as the name `t` and a plain string.
    [finding] = check_source(LOOP.format(prefix + '"{' + "(" * (MAX_BRACKETS + 1) + '1}"'), "m.py", Settings())
    assert (finding.code, finding.start.row, finding.start.column) == ("PFL000", 3, 8)
    assert finding.message.startswith(f"too deeply nested to analyse: more than {MAX_BRACKETS} brackets")
    assert excess(LOOP.format(prefix + '"{' + "(" * (MAX_BRACKETS - 1) + '1}"')) is None
    assert excess(LOOP.format(prefix + ' "{' + "(" * (MAX_BRACKETS + 1) + '1}"')) is None  # a name, then a string


def _elif_chain(branches, indent=""):
    return "".join([f"{indent}if a:\n{indent}    pass\n",
                    *(f"{indent}elif a == {i}:\n{indent}    pass\n" for i in range(branches))])


def test_an_if_statement_with_as_many_elifs_as_the_parser_takes_is_analysed():
    source = "import torch\nfor b in loader:\n" + _elif_chain(MAX_ELIFS, "    ") + "    print(b.item())\n"
    assert [f.code for f in check_source(source, "m.py", Settings(preview=True))] == ["PFL101"]


def test_each_if_statement_counts_its_own_elifs():
    chains = [_elif_chain(MAX_ELIFS), _elif_chain(MAX_ELIFS),  # one after the other
              "for b in c:\n" + _elif_chain(MAX_ELIFS, "    ") + "    x = 1\n" + _elif_chain(MAX_ELIFS, "    "),
              "if a:\n" + _elif_chain(MAX_ELIFS, "    ") + _elif_chain(MAX_ELIFS - 1)[len("if a:\n    pass\n"):]]
    assert excess("".join(chains)) is None


def test_an_if_statement_with_more_elifs_is_one_pfl000_at_the_first_elif_past_the_limit():
    source = "x = 1\n" + _elif_chain(2 * MAX_ELIFS)
    [finding] = check_source(source, "m.py", Settings(preview=True))
    assert (finding.code, finding.start.row, finding.start.column) == ("PFL000", 2 + 2 * (MAX_ELIFS + 1), 0)
    assert finding.message == (f"`if` statement too long to analyse: more than {MAX_ELIFS} `elif` branches (the "
                               "parser nests each one in the one before); perflsp skipped this file")


def test_a_file_with_more_tokens_than_the_parser_takes_is_one_pfl000():
    elements = MAX_TOKENS // 2  # `x = [` and `]` make it two tokens more than the limit
    source = "x = [" + "1, " * elements + "]\n"
    [finding] = check_source(source, "m.py", Settings(preview=True))
    # the token past the limit: the comma after element `elements - 2`
    assert (finding.code, finding.start.row, finding.start.column) == ("PFL000", 1, len("x = [1") + 3 * (elements - 2))
    assert finding.message == (f"file too large to analyse: more than {MAX_TOKENS:,} tokens (the parser holds 2 to "
                               "4 KiB of memory for each); perflsp skipped this file")


def test_a_text_that_grows_past_the_token_limit_one_statement_at_a_time_gets_the_summary_of_a_whole_one():
    long = 's = "' + "a" * MAX_TOKENS + '"\n'  # counted (longer than the limit), and one token
    assert summarize(long + "x = [1]\n", "grows")["depth"] == 2  # remembered, the next text summarised from it
    grown = long + "x = [" + "1, " * (MAX_TOKENS // 2) + "]\n"
    summary = summarize(grown, "grows")
    assert summary["depth"] is None and summary == summarize_whole(grown, "grows")[0]
