"""Text from a user's model (output, node and file names, metadata, messages that quote them) made safe for where it
is written: a terminal, XML, Markdown. HTML uses ``html.escape``; every writer here shares these functions."""
from __future__ import annotations

import re

# C0 and C1 controls, DEL, line and paragraph separators, and the marks that reorder text (bidi overrides)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")  # outside XML 1.0's Char
_MARKDOWN = str.maketrans({"\\": "\\\\", "`": "\\`", "[": "\\[", "#": "\\#", "|": "\\|", "&": "&amp;",
                           "<": "&lt;"})  # ">" without "<" opens no tag


def printable(text) -> str:
    """``text`` with each control character written out as its escape (``\\x1b``, ``\\n``, ``\\u202e``): a name's
    ANSI sequence, bell or line break cannot act on a terminal or start a line of its own."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], str(text))


def console_markup(text) -> str:
    """``printable(text)`` as rich markup: ``[bold]`` in a name is shown, not applied."""
    from rich.markup import escape

    return escape(printable(text))


def xml_safe(text) -> str:
    """Text XML 1.0 can hold: each character outside its ``Char`` (control characters, lone surrogates, U+FFFE and
    U+FFFF) replaced with U+FFFD. ElementTree escapes markup but writes these as they are, which no parser reads."""
    return _NOT_XML.sub("\ufffd", str(text))


def md_code(name) -> str:
    """A name as a Markdown code span: control characters written out (one line), pipes escaped (a table cell),
    fenced by more backticks than it holds (it cannot close the span). Markup inside a code span is inert."""
    text = printable(name).replace("|", "\\|")
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(text) -> str:
    """Free text (a reason, an error quoting a name) for a Markdown table cell or list item: one line (whitespace
    folded, other control characters written out), no raw HTML or entities, no code span, link, heading or cell
    break of its own."""
    return printable(" ".join(str(text).split())).translate(_MARKDOWN)
