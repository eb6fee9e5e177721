"""Hover markdown from text perflsp does not control, rendered by a real CommonMark + GFM renderer
with bare-URL links on (as editors render hovers): never a link, an image or HTML, and the text
reads back as it was."""
from __future__ import annotations

import html
import re

from hypothesis import assume, given, settings, strategies as st
from markdown_it import MarkdownIt

from perflsp.server import markdown as md

RENDERER = MarkdownIt("gfm-like")
ALLOWED_TAGS = {"p", "code", "pre", "table", "thead", "tbody", "tr", "th", "td"}
# Markdown's own characters, link and HTML openers, URLs, unicode, whitespace.
HOSTILE = st.lists(st.sampled_from(list("`[]()<>!*_#|\\~&:/.-+= \nabxyzé\u2028")
                                   + ["https://e.vil", "www.e.vil", "<img src=x>", "](", "&amp;", "e.vil/x", "example.com",
                                      "me@e.vil", "1.", "mailto:", "&#x61;"]),
                   max_size=30).map("".join)


def _render(markdown: str) -> str:
    out = RENDERER.render(markdown)
    tags = set(re.findall(r"</?([a-zA-Z0-9]+)", out))
    assert tags <= ALLOWED_TAGS, (markdown, out)
    return out


def _visible(rendered: str, drop: str = "") -> str:
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    return _plain(text.replace(drop, "") if drop else text)


def _plain(value: str) -> str:
    return " ".join(value.split())


@settings(max_examples=600, deadline=None)
@given(HOSTILE)
def test_text_renders_as_itself_and_nothing_else(value):
    assert _visible(_render(md.text(value))) == _plain(value)


@settings(max_examples=600, deadline=None)
@given(HOSTILE)
def test_code_is_one_code_span_holding_the_value(value):
    assume(value)
    rendered = _render("x " + md.code(value))
    [inner] = re.findall(r"<code>(.*?)</code>", rendered, flags=re.S)
    assert html.unescape(inner) == re.sub(r"\r\n?|\n", " ", value)


@settings(max_examples=600, deadline=None)
@given(HOSTILE)
def test_code_in_a_table_cell_stays_in_its_cell(value):
    rendered = _render(f"| a | b |\n| --- | --- |\n| {md.code(value, in_table=True)} | end |")
    cells = re.findall(r"<td>(.*?)</td>", rendered, flags=re.S)
    assert len(cells) == 2 and cells[1] == "end", rendered


@settings(max_examples=600, deadline=None)
@given(st.lists(HOSTILE, max_size=4))
def test_prose_never_makes_markup_whatever_the_backticks(parts):
    message = "`".join(parts)
    rendered = _render(md.prose(message))
    assert _visible(rendered, drop="`") == _plain(message.replace("`", ""))


def test_a_quoted_link_in_code_stays_text():
    message = '`loss["`[Fix](https://e.vil/x)`"].item()` waits for the GPU'
    rendered = _render(md.prose(message))
    assert "e.vil" in rendered and "<a" not in rendered
    assert rendered.startswith('<p><code>loss[&quot;</code>')


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_a_block_holds_everything_up_to_its_end(value):
    rendered = _render(md.block(value) + "\n\nafter")
    assert rendered.count("<pre>") == 1 and rendered.rstrip().endswith("<p>after</p>")
