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

# C0 controls (newline, CR, tab, ESC...), DEL, C1 controls, the Arabic letter mark and the bidirectional
# marks, embeddings, overrides and isolates (they reorder what a line shows), the line and paragraph
# separators, and lone surrogates (a folder name that is not UTF-8; they cannot be encoded).
INVISIBLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(match: re.Match[str]) -> str:
    """A character as Python writes it in a string literal: ``\\n``, ``\\x1b``, ``\\u2028``."""
    character = match.group()
    if character in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[character]
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(value: object) -> str:
    """``value`` as text for one line: control, bidirectional and separator characters and lone surrogates
    become visible escapes (``\\n``, ``\\x1b``, ``\\u202e``, ``\\u2028``, ``\\ud800``).

    The result never holds a line break of any kind (``str.splitlines`` finds one line) and always encodes as
    UTF-8. Other text, accents and scripts included, is unchanged.
    """
    return INVISIBLE.sub(visible, str(value))
