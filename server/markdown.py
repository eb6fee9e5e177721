"""Markdown for hovers built from text perflsp does not control: the code a message quotes, or a
profile result a cloned repository committed. Nothing in such text may become a link, an image
or HTML in the editor, or break out of its code span (`loss["`[Fix](https://e.vil)`"]`).
"""
from __future__ import annotations

import re

# What can start markup inline: emphasis, code, links and images, HTML and entities, table cells,
# strikethrough; and bare URLs, addresses and domain names (`e.vil/x.com`), which renderers turn
# into links. Other punctuation stays as it is: some editors show a hover's backslashes.
_INLINE = re.compile(r"[\\`*_\[\]<>!&|~@]|:(?=//)|\.(?=[^\W\d_])")
_BLOCK_START = re.compile(r"^()([#>+\-])|^(\d{1,9})([.)])(?=\s|$)")  # a heading, quote, list or rule at the start
_BACKTICKS = re.compile(r"`+")
_LINE_BREAK = re.compile(r"\r\n?|\n")  # markdown's line endings, which would end a paragraph or a table row


def _one_line(value: object) -> str:
    return _LINE_BREAK.sub(" ", str(value))


def text(value: object) -> str:
    """`value` shown as it is, markup characters escaped, line breaks as spaces."""
    return _leading(_inline(value))


def _inline(value: object) -> str:
    return _INLINE.sub(lambda match: "\\" + match.group(0), _one_line(value))


def _leading(markdown: str) -> str:
    """No block construct at the start: indentation (a code block) dropped, a heading, quote or
    list marker escaped."""
    return _BLOCK_START.sub(lambda match: "\\".join(part for part in match.groups() if part is not None),
                            markdown.lstrip())


def code(value: object, in_table: bool = False) -> str:
    """`value` as one inline code span, fenced with more backticks than it holds (nothing when empty)."""
    body = _one_line(value)
    if not body:
        return ""
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(body)), default=0) + 1)
    if body.startswith("`") or body.endswith("`") or (body.startswith(" ") and body.endswith(" ") and body.strip(" ")):
        body = f" {body} "  # the one space each side that a code span strips
    if in_table:
        body = body.replace("|", "\\|")  # GFM splits cells at a pipe even inside a code span
    return f"{fence}{body}{fence}"


def prose(value: object) -> str:
    """A message with its code between single backticks (`x.item()` waits for ...): the quoted code
    as code spans, the rest as text. Code holding backticks pairs them up wrongly; then some code
    shows as text or the reverse, but nothing becomes markup."""
    parts = str(value).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: shown as one
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return _leading("".join(code(part) if index % 2 else _inline(part) for index, part in enumerate(parts)))


def block(value: object) -> str:
    """`value` as a fenced code block, fenced with more backticks than any run inside it."""
    body = str(value).rstrip()
    fence = "`" * max(3, max((len(run) for run in _BACKTICKS.findall(body)), default=0) + 1)
    return f"{fence}\n{body}\n{fence}"
