"""Text a notebook wrote, made safe for one line of a terminal or a report.

A student's file names, grade ids, error messages and printed output may hold characters a terminal acts on:
an escape sequence sets the window's title or writes the clipboard (OSC 52), a carriage return or an erase-line
hides what came before, a bidirectional override reorders what a line shows, a line separator starts a line
that was never printed. :func:`terminal_text` shows every such character as a visible escape, as Python writes
it in a string literal, so one value stays on one line and does nothing but show itself. It is on the student's
side because ``python -m autograder check`` prints with it; the grader's reports use the same rule
(:func:`autograder.feedback.escape.report_text`).
"""

from __future__ import annotations

import re

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(character: str) -> str:
    """A character as Python writes it in a string literal: ``\\n``, ``\\x1b``, ``\\u2028``, ``\\U000e0041``."""
    if character in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[character]
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(match: re.Match[str]) -> str:
    """:func:`escaped` of a regular expression's match of one character."""
    return escaped(match.group())


def terminal_text(value: object) -> str:
    """``value`` as text for one line: every character Python does not call printable (``str.isprintable``:
    Unicode's categories Other and Separator, but the ASCII space) becomes a visible escape (``\\n``, ``\\x1b``,
    ``\\u202e``, ``\\u2028``, ``\\u200b``, ``\\ud800``).

    By category, not by a list: controls (C0, DEL, C1), format characters (bidirectional marks, embeddings,
    overrides and isolates, which reorder what a line shows; zero-width spaces and joiners, the soft hyphen,
    the byte-order mark and tag characters, which hide text or make two names look alike), line and
    paragraph separators, lone surrogates (a folder name that is not UTF-8; they cannot be encoded), private-use
    and unassigned code points, and every space but the ASCII one. The result never holds a line break of any
    kind (``str.splitlines`` finds one line) and always encodes as UTF-8. Other text, accents, scripts and emoji
    included, is unchanged.
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(character if character.isprintable() else escaped(character) for character in text)
