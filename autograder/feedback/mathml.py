"""TeX math as MathML, made at grading time: a feedback page shows formulas without running a script.

A feedback page forbids every script (:data:`autograder.feedback.escape.CONTENT_SECURITY_POLICY`), so MathJax
cannot typeset the ``$x^2$`` of a markdown cell or the ``text/latex`` of an output there. The formulas are
converted instead, by `latex2mathml <https://pypi.org/project/latex2mathml/>`_ (pure Python), into MathML
that browsers draw themselves. What it writes is still cleaned afterwards against :data:`MATHML_TAGS` and
:data:`MATHML_ATTRIBUTES`, the elements and attributes it produces (no ``href``, no ``style``, no handler).

A formula longer than :data:`MAX_FORMULA_CHARS`, or one the converter rejects, is shown as its TeX source,
escaped: the page stays readable and the converter's work stays bounded.

latex2mathml copies the text of ``\\text{...}`` and ``\\texttt{...}`` as it is written, TeX's escapes included
(``\\texttt{max\\_exact}`` would show ``max\\_exact``): :func:`tex_to_mathml` turns the escaped characters of
such text back into the characters they stand for (:func:`unescaped_text`).

MathML does not break a long formula across lines: each converted formula comes in a box of its own
(:data:`FORMULA_CLASSES`), which the feedback page's CSS lets scroll sideways (a phone's screen shows a part of a
wide formula, not a page wider than the screen), and which the keyboard can reach (``tabindex="0"``) to scroll
it. The cleaning lets exactly these classes and that ``tabindex`` through, on ``span`` only.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

MAX_FORMULA_CHARS = 2000
# The classes of the box around an inline and a display formula (the page's CSS: autograder/feedback/templates).
FORMULA_CLASSES = {False: "formula", True: "formula formula-block"}
MATHML_NAMESPACE = "http://www.w3.org/1998/Math/MathML"

# Every element that latex2mathml 3.81 writes (latex2mathml/converter.py and commands.py).
MATHML_TAGS = frozenset(
    {
        "math", "menclose", "merror", "mfrac", "mi", "mn", "mo", "mover", "mpadded", "mphantom", "mroot",
        "mrow", "ms", "mspace", "msqrt", "mstyle", "msub", "msubsup", "msup", "mtable", "mtd", "mtext", "mtr",
        "munder", "munderover",
    }
)  # fmt: skip
# Its presentation attributes, each with the shape of value it writes: keywords, lengths, numbers, colours.
_KEYWORD = re.compile(r"[a-z]{1,16}( [a-z]{1,16}){0,15}")
_LENGTH = re.compile(r"[-+]?[0-9]{0,4}(\.[0-9]{1,4})?(em|ex|px|pt|mu|%)?( [-+]?[0-9]{0,4}(\.[0-9]{1,4})?(em|ex))*")
_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}|[a-zA-Z]{1,20}")
MATHML_ATTRIBUTES = {
    "accent": _KEYWORD, "columnalign": _KEYWORD, "columnlines": _KEYWORD, "display": _KEYWORD,
    "displaystyle": _KEYWORD, "fence": _KEYWORD, "form": _KEYWORD, "linebreak": _KEYWORD,
    "mathvariant": _KEYWORD, "movablelimits": _KEYWORD, "notation": _KEYWORD, "rowlines": _KEYWORD,
    "separator": _KEYWORD, "stretchy": _KEYWORD, "symmetric": _KEYWORD,
    "columnspacing": _LENGTH, "depth": _LENGTH, "height": _LENGTH, "linethickness": _LENGTH,
    "lspace": _LENGTH, "mathsize": _LENGTH, "maxsize": _LENGTH, "minsize": _LENGTH, "rowspacing": _LENGTH,
    "rspace": _LENGTH, "scriptlevel": _LENGTH, "voffset": _LENGTH, "width": _LENGTH,
    "mathcolor": _COLOUR,
}  # fmt: skip
# No background: a formula is drawn where its box is, and a box that is painted could hide what lies beside it
# on a page whose template does not clip a cell (nbgrader's formgrade page). Lengths are bounded for the same
# reason: a formula may reach a few lines beyond its place, not over the page. The course's own formulas write
# at most 2em (\qquad).
_LENGTH_NUMBER = re.compile(r"([-+]?[0-9]{0,4}(?:\.[0-9]{1,4})?)(em|ex|px|pt|mu|%)?")
MAX_LENGTH = {"em": 10.0, "ex": 20.0, "mu": 180.0, "px": 160.0, "pt": 120.0, "%": 400.0, None: 10.0}


def _bounded_lengths(value: str) -> bool:
    for number, unit in _LENGTH_NUMBER.findall(value):
        if number.strip("+-") and abs(float(number)) > MAX_LENGTH[unit or None]:
            return False
    return True


def allowed_mathml_attribute(name: str, value: str) -> bool:
    """Whether ``name="value"`` is a presentation attribute latex2mathml writes, with a value of its shape
    (``xmlns`` only as the MathML namespace), lengths within :data:`MAX_LENGTH`, and no background colour."""
    if name == "xmlns":
        return value == MATHML_NAMESPACE
    pattern = MATHML_ATTRIBUTES.get(name)
    if pattern is None or pattern.fullmatch(value) is None:
        return False
    return pattern is not _LENGTH or _bounded_lengths(value)


# TeX's escaped characters in text mode as they stand in latex2mathml's <mtext>, where a space is already the
# entity of a no-break space ("\\ " is "\\&#x000A0;"); "&" is written as HTML escapes it.
_TEXT_ESCAPE = re.compile(r"\\(&#x000A0;|[_%#$&{}])")
_TEXT_ESCAPED = {"&": "&amp;"}
_MTEXT = re.compile(r"(<mtext(?:\s[^>]*)?>)([^<]*)(</mtext>)")


def unescaped_text(mathml: str) -> str:
    """``mathml`` with TeX's escapes in the text of its ``<mtext>`` elements (``max\\_exact``) replaced by
    the characters they stand for (``max_exact``)."""

    def unescape(match: re.Match[str]) -> str:
        character = match.group(1)
        return _TEXT_ESCAPED.get(character, character)

    return _MTEXT.sub(lambda text: text.group(1) + _TEXT_ESCAPE.sub(unescape, text.group(2)) + text.group(3), mathml)


def tex_source(tex: str, display: bool) -> str:
    """The formula as escaped TeX text between its delimiters: what a page shows when it cannot convert."""
    delimiter = "$$" if display else "$"
    return html.escape(f"{delimiter}{tex}{delimiter}")


def formula_box(mathml: str, display: bool) -> str:
    """``mathml`` in the box that scrolls it (:data:`FORMULA_CLASSES`)."""
    return f'<span class="{FORMULA_CLASSES[display]}" tabindex="0">{mathml}</span>'


def tex_to_mathml(tex: str, display: bool = False) -> str:
    """``tex`` (a formula without its ``$`` delimiters) as a ``<math>`` element, inline or as a block, in its
    box (:func:`formula_box`).

    Falls back to :func:`tex_source` when ``tex`` is longer than :data:`MAX_FORMULA_CHARS` or the converter
    fails on it (any exception: it is third-party code reading student text). The result is to be cleaned
    (:func:`autograder.feedback.escape.clean_html`) before it is shown.
    """
    if len(tex) > MAX_FORMULA_CHARS or not tex.strip():
        return tex_source(tex, display)
    try:
        return formula_box(unescaped_text(convert(tex, display="block" if display else "inline")), display)
    except Exception:  # noqa: BLE001 (a formula it cannot read is shown as text)
        return tex_source(tex, display)


_DELIMITED = (
    (re.compile(r"\$\$([^$]*)\$\$"), True),
    (re.compile(r"\\\[(.*)\\\]", re.DOTALL), True),
    (re.compile(r"\$([^$]*)\$"), False),
    (re.compile(r"\\\((.*)\\\)", re.DOTALL), False),
)


def latex_output_mathml(latex: str) -> str | None:
    """The ``text/latex`` of an output (``$x^2$``, ``$$...$$``, ``\\[...\\]``, ``\\(...\\)``) as MathML;
    ``None`` when it is not one delimited formula or cannot be converted (the output then keeps its text)."""
    text = latex.strip()
    for pattern, display in _DELIMITED:
        if match := pattern.fullmatch(text):
            converted = tex_to_mathml(match.group(1), display)
            return converted if converted.startswith(formula_box("", display)[:-len("</span>")]) else None
    return None
