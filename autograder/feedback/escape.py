"""Untrusted text made safe where the grader shows it: CSV cells, lines of a report, HTML pages.

Student names (folder names), assignment names, failure messages and everything a notebook holds are
written by students. Each place they reach has its own rule:

- a CSV cell (``items.csv``, ``grades.csv``) that a spreadsheet would read as a formula, one that starts
  with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, gets a leading ``'``, as OWASP's advice on
  CSV injection says, and shows every character a terminal would act on as an escape, like a line of
  ``report.txt`` (only a newline and a tab stay, quoted by the ``csv`` module); numbers that the grader
  computed are written as they are;
- a line of ``report.txt`` shows every character that could end the line, move the cursor, reorder the text
  or fail to encode as UTF-8 as a visible escape (``\\n``, ``\\x1b``, ``\\u2028``, ``\\ud800``): one value
  stays on one line;
- HTML on a feedback page (an output's, a rendered markdown cell's) is cleaned with bleach against a short
  allowlist of tags and attributes (:func:`clean_html`); markdown is rendered first, its formulas as MathML
  (:mod:`autograder.feedback.mathml`), and cleaned after (:func:`markdown_html`); the notebook itself is
  rebuilt from an allowlist (:mod:`autograder.feedback.outputs`); and the page carries a
  Content-Security-Policy that runs no script and loads nothing from elsewhere, in case anything slipped
  through.
"""

from __future__ import annotations

import csv
import html
import re
from collections.abc import Iterable

import bleach
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

from autograder.feedback.mathml import (
    FORMULA_CLASSES,
    MATHML_TAGS,
    allowed_mathml_attribute,
    tex_source,
    tex_to_mathml,
)
from autograder.student.terminal import terminal_text, visible

# ---------------------------------------------------------------------------------------------------------
# Text: CSV cells and report lines
# ---------------------------------------------------------------------------------------------------------

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# What a CSV cell shows as an escape: the same as a report line, but newlines, which the csv module quotes and
# a terminal shows as layout only. A tab is shown (``\t``): a spreadsheet's import that splits on tabs would
# start a new cell there.
_CSV_INVISIBLE = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
# A semicolon, the list separator of spreadsheets in most European locales, before a formula's first character.
_FORMULA_AFTER_SEMICOLON = re.compile(r";(\s*)(?=[=+\-@])")


def report_text(value: object) -> str:
    """``value`` as text for one line of a report: control, bidirectional and separator characters and lone
    surrogates become visible escapes (``\\n``, ``\\x1b``, ``\\u202e``, ``\\u2028``, ``\\ud800``).

    The result never holds a line break of any kind (``str.splitlines`` finds one line) and always encodes
    as UTF-8. Other text, accents and scripts included, is unchanged. The rule is
    :func:`autograder.student.terminal.terminal_text`'s, by which the student's ``check`` prints too.
    """
    return terminal_text(value)


def csv_cell(value: object) -> str:
    """``value`` as a CSV cell that no spreadsheet runs as a formula and no terminal acts on.

    Text that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``
    (OWASP, CSV injection), and so does what follows a semicolon and starts so (for an import that splits on
    semicolons); control, bidirectional and separator characters other than a newline, tabs included, and lone
    surrogates, become visible escapes as in :func:`report_text` (``\\x1b``, ``\\r``, ``\\t``), so that
    ``cat items.csv`` runs no escape sequence and the file encodes as UTF-8. An ``int`` or ``float`` is a
    number the grader computed and is written as ``str`` gives it (``-1.0`` stays a number); :func:`csv_writer`
    quotes commas, quotes and newlines.
    """
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    formula = text.startswith(FORMULA_PREFIXES)
    text = _CSV_INVISIBLE.sub(visible, text)
    text = _FORMULA_AFTER_SEMICOLON.sub(r";\1'", text)
    return "'" + text if formula else text


def csv_writer(handle):
    """A ``csv.writer`` as nbgrader's export writes: a cell is quoted when it holds a comma, a quote or a line
    break. A spreadsheet that splits on a semicolon or a tab instead sees no tab (:func:`csv_cell` shows them)
    and no formula after a semicolon."""
    return csv.writer(handle, lineterminator="\n")


def csv_row(values: Iterable[object]) -> list[str]:
    """Every value of a row as :func:`csv_cell` writes it."""
    return [csv_cell(value) for value in values]


def html_text(value: object) -> str:
    """``value`` as HTML text: ``html.escape`` (quotes too), and lone surrogates as visible escapes."""
    return html.escape(_SURROGATE.sub(visible, str(value)))


# ---------------------------------------------------------------------------------------------------------
# Feedback pages: the policy of the page, and the HTML on it
# ---------------------------------------------------------------------------------------------------------

# No script, plugin, frame, form, base URL or fetch; styles inline (the page's own CSS) and images and
# fonts from data: URLs only (nbconvert embeds plots as data: URLs). MathJax, which the feedback template
# loads from a CDN, is blocked too: formulas are MathML already (autograder.feedback.mathml).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; base-uri 'none'; "
    "form-action 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"
)
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'


HTML_TAGS = frozenset(
    {
        "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "div", "dl", "dt", "em",
        "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "q", "s",
        "samp", "small", "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
        "tr", "u", "ul",
    }
) | MATHML_TAGS  # fmt: skip
# No class, id or style: the page's own CSS classes (Bootstrap's fixed navbar...) and positions would let a
# notebook draw over the grader's notes and scores. bleach writes every value it keeps between double quotes
# with its quotes escaped; sizes are digits all the same, so no template can read more into them. The one class a
# span may have is a formula's box (autograder.feedback.mathml.FORMULA_CLASSES), with tabindex 0: a box that
# scrolls a formula and takes the keyboard's focus, nothing more.
_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "img": {"src", "alt", "title", "width", "height"},
    "span": {"class", "tabindex"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan"},
}
_SPAN_VALUES = {"class": frozenset(FORMULA_CLASSES.values()), "tabindex": frozenset({"0"})}
_DIGITS = re.compile(r"[0-9]{1,5}")
_SIZE_ATTRIBUTES = frozenset({"width", "height", "colspan", "rowspan"})
_LINK_SCHEMES = ("http:", "https:", "mailto:", "#")
# bleach checks the scheme of every URL attribute after _allowed_attribute: data: must pass there for images.
_PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
MAX_FORMULAS = 500  # per markdown text: converted formulas cost time and grow the HTML tenfold


def _allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: links to the web or the page, images from ``data:image/png`` or
    ``data:image/jpeg`` URLs only, sizes as digits, a formula's box on a span, MathML's presentation attributes on
    MathML elements."""
    if tag in MATHML_TAGS:
        return allowed_mathml_attribute(name, value)
    if name not in _ATTRIBUTES.get(tag, ()):
        return False
    if name in _SIZE_ATTRIBUTES:
        return _DIGITS.fullmatch(value) is not None
    if tag == "a" and name == "href":
        return value.strip().lower().startswith(_LINK_SCHEMES)
    if tag == "span":
        return value in _SPAN_VALUES[name]
    if tag == "img" and name == "src":
        return value.strip().lower().startswith(("data:image/png;", "data:image/jpeg;"))
    return True


IMAGE_WITHOUT_ALT = "An image without a description"


class _ImageAlternativeText(bleach.html5lib_shim.Filter):
    """An ``img`` that has no ``alt`` is given :data:`IMAGE_WITHOUT_ALT`, so that a screen reader names it as an
    image (the feedback page's template does the same for image outputs)."""

    def __iter__(self):
        for token in super().__iter__():
            if token["type"] in ("StartTag", "EmptyTag") and token["name"] == "img":
                token["data"].setdefault((None, "alt"), IMAGE_WITHOUT_ALT)
            yield token


def clean_html(text: str) -> str:
    """``text`` with only :data:`HTML_TAGS` and their allowed attributes; other tags are dropped (their
    text stays, as text), and so are comments, event handlers, ``javascript:`` URLs, remote images and
    sizes that are not digits. MathML elements keep the attributes latex2mathml writes
    (:func:`autograder.feedback.mathml.allowed_mathml_attribute`). An image without an ``alt`` is given one
    (:data:`IMAGE_WITHOUT_ALT`). A cleaner of its own per call, as ``bleach.clean`` makes: one is not safe to share
    between threads."""
    cleaner = bleach.Cleaner(
        tags=HTML_TAGS,
        attributes=_allowed_attribute,
        protocols=_PROTOCOLS,
        strip=True,
        strip_comments=True,
        filters=[_ImageAlternativeText],
    )
    return cleaner.clean(text)


class _MathRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with its first :data:`MAX_FORMULAS` formulas as MathML
    (:func:`tex_to_mathml`) and any further ones as TeX text, instead of TeX left for MathJax."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.formulas = 0

    def _formula(self, tex: str, display: bool) -> str:
        self.formulas += 1
        return tex_to_mathml(tex, display) if self.formulas <= MAX_FORMULAS else tex_source(tex, display)

    def inline_math(self, body: str) -> str:
        return self._formula(body, display=False)

    def block_math(self, body: str) -> str:
        return self._formula(body, display=True)

    def latex_environment(self, name: str, body: str) -> str:
        return self._formula(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

    def block_code(self, code: str, info: str | None = None) -> str:
        """A fenced code block as escaped text, never highlighted: the language after the fence would choose
        any of pygments' lexers, some of which take time that grows faster than their input."""
        return f"<pre><code>{html.escape(code, quote=False)}</code></pre>\n"


def render_markdown(source: str, attachments: dict | None = None) -> str:
    """Markdown rendered as nbconvert renders a markdown cell (attachments as data: URLs), with its formulas
    as MathML: HTML still to be cleaned.

    Raises:
        nbconvert.filters.markdown_mistune.InvalidNotebook: an image names an attachment the cell lacks.
    """
    attachments = attachments if attachments is not None else {}
    renderer = _MathRenderer(escape=False, attachments=attachments, exclude_anchor_links=True)
    return MarkdownWithMath(renderer=renderer).render(source)


def markdown_html(source: str, attachments: dict | None = None) -> str:
    """:func:`render_markdown`, then cleaned (:func:`clean_html`)."""
    return clean_html(render_markdown(source, attachments))


def html_block(text: str) -> str:
    """HTML that a markdown renderer passes through as it is: one line that opens with ``<div>`` (an HTML
    block of CommonMark, which ends only at a blank line). Line breaks become ``&#10;``, the same
    character once the browser reads it, so the text inside is never read as markdown again."""
    return "<div>" + re.sub(r"\r\n?|\n", "&#10;", text) + "</div>"
