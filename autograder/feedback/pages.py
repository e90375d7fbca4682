"""Feedback pages: nbgrader's, with the grader's notes on top, and a page for what could not be graded.

Both carry the Content-Security-Policy of :mod:`autograder.feedback.escape` (no script runs, nothing loads from
elsewhere); every text of ours that a student chose (names, reasons, notes) is escaped. A page is also a file
that an instructor may ``cat`` or ``grep`` in a terminal: :func:`file_text` shows every character a terminal
acts on (escape sequences, C1 controls) as a visible escape, wherever on the page it came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from autograder.feedback.escape import CSP_META, html_text
from autograder.student.terminal import visible
from autograder.types import Item

# What a terminal acts on, but a page needs nowhere: C0 controls other than tab, newline and carriage return,
# DEL and the C1 controls (U+0080..U+009F, which some terminals read as ESC + a letter).
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def file_text(page: str) -> str:
    """``page`` as it is written to a file: every character of :data:`_TERMINAL_CONTROLS` shown as a visible
    escape (``\\x1b``), so that ``cat`` or ``grep`` on the file runs no escape sequence."""
    return _TERMINAL_CONTROLS.sub(visible, page)

_STYLE = (
    "border:2px solid #b45309;background:#fffbeb;color:#1f2937;padding:0.75em 1.25em;margin:1em auto;"
    "max-width:60em;font-family:sans-serif"
)


def notes_block(notes: Sequence[str], title: str = "Notes from the grader") -> str:
    """An HTML block listing ``notes`` (an ``aside``, a landmark of its own that a screen reader lists beside the
    page's ``main``); empty when there are none."""
    if not notes:
        return ""
    items = "".join(f"<li>{html_text(note)}</li>" for note in notes)
    return f'<aside class="autograder-notes" style="{_STYLE}"><h2>{html_text(title)}</h2><ul>{items}</ul></aside>'


# Put in front of a page that the grading stage rendered, whatever it holds: a doctype (standards mode), the
# encoding, and the policy, which the browser applies to everything that follows it.
PAGE_PREFIX = f'<!DOCTYPE html>\n<meta charset="utf-8">{CSP_META}\n'


# The opening body tag, its attributes bounded: each try reads at most that far, so the search takes time linear
# in the page (an unbounded ``[^>]*`` read to the page's end from every "<body " that has no ">").
_BODY_TAG = re.compile(r"<body(?:\s[^<>]{0,2000})?>")


def add_notes(page: str, notes: Sequence[str]) -> str:
    """An nbgrader feedback page behind :data:`PAGE_PREFIX` (the Content-Security-Policy before any byte of
    the page), with the notes (if any) right after its opening ``<body>`` tag."""
    page = PAGE_PREFIX + page
    block = notes_block(notes)
    if not block:
        return page
    match = _BODY_TAG.search(page)
    if match is None:
        return block + page
    return page[: match.end()] + block + page[match.end() :]


def _score(value: float) -> str:
    return f"{value:g}"


def ungraded_page(
    student: str, assignment: str, reason: str, items: Sequence[Item], notes: Sequence[str]
) -> str:
    """A feedback page for a submission that could not be graded: the reason, and a zero for every item."""
    rows = "".join(
        f"<tr><td>{html_text(item.grade_id)}</td>"
        f"<td>{_score(item.score)} / {_score(item.max_score)}</td></tr>"
        for item in items
    )
    total = sum(item.max_score for item in items)
    return (
        f'<!DOCTYPE html>\n<html><head>{CSP_META}<meta charset="utf-8">'
        f"<title>{html_text(assignment)}: feedback for {html_text(student)}</title></head>"
        f'<body style="font-family:sans-serif;max-width:60em;margin:2em auto">'
        f"<h1>{html_text(assignment)}: feedback for {html_text(student)}</h1>"
        f"<p><strong>Score: 0 / {_score(total)}.</strong> This submission could not be graded: "
        f"{html_text(reason)}.</p>"
        f"{notes_block(notes)}"
        "<p>Submit the notebook file itself (<code>.ipynb</code>), as saved by Jupyter, and check it first "
        "with "
        "<code>python -m autograder check NOTEBOOK</code>.</p>"
        f'<table border="1" cellpadding="4"><tr><th>item</th><th>points</th></tr>{rows}</table>'
        "</body></html>\n"
    )
