"""Untrusted text made safe where the grader shows it: CSV cells, lines of a report, HTML pages.

Student names (folder names), assignment names, failure messages and everything a notebook holds are
written by students. Each place they reach has its own rule:

- a CSV cell (``items.csv``, ``grades.csv``) that a spreadsheet would read as a formula, one that starts
  with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, gets a leading ``'``, as OWASP's advice on
  CSV injection says; numbers that the grader computed are written as they are;
- a line of ``report.txt`` shows every character that could end the line, move the cursor, reorder the text
  or fail to encode as UTF-8 as a visible escape (``\\n``, ``\\x1b``, ``\\u2028``, ``\\ud800``): one value
  stays on one line;
- a feedback page renders a notebook whose HTML is cleaned with bleach (the sanitizer of nbconvert's
  ``SanitizeHTML``) against a short allowlist, whose active outputs (JavaScript, SVG, widgets, any type
  not on a list) are removed, and whose markdown is rendered first and cleaned after; and the page carries
  a Content-Security-Policy that runs no script and loads nothing from elsewhere, in case anything slipped
  through.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from pathlib import Path

import bleach
import nbformat
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbformat import NotebookNode

# ---------------------------------------------------------------------------------------------------------
# Text: CSV cells and report lines
# ---------------------------------------------------------------------------------------------------------

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# C0 controls (newline, CR, tab, ESC...), DEL, C1 controls, the Arabic letter mark and the bidirectional
# marks, embeddings, overrides and isolates (they reorder what a line shows), the line and paragraph
# separators, and lone surrogates (a folder name that is not UTF-8; they cannot be encoded).
_INVISIBLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    """A character as Python writes it in a string literal: ``\\n``, ``\\x1b``, ``\\u2028``."""
    character = match.group()
    if character in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[character]
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def report_text(value: object) -> str:
    """``value`` as text for one line of a report: control, bidirectional and separator characters and lone
    surrogates become visible escapes (``\\n``, ``\\x1b``, ``\\u202e``, ``\\u2028``, ``\\ud800``).

    The result never holds a line break of any kind (``str.splitlines`` finds one line) and always encodes
    as UTF-8. Other text, accents and scripts included, is unchanged.
    """
    return _INVISIBLE.sub(_visible, str(value))


def csv_cell(value: object) -> str:
    """``value`` as a CSV cell that no spreadsheet runs as a formula.

    Text that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``
    (OWASP, CSV injection); lone surrogates become visible escapes, so the file encodes as UTF-8. An
    ``int`` or ``float`` is a number the grader computed and is written as ``str`` gives it (``-1.0``
    stays a number); the ``csv`` module quotes commas, quotes and newlines.
    """
    if isinstance(value, int | float):
        return str(value)
    text = _SURROGATE.sub(_visible, str(value))
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def csv_row(values: Iterable[object]) -> list[str]:
    """Every value of a row as :func:`csv_cell` writes it."""
    return [csv_cell(value) for value in values]


def html_text(value: object) -> str:
    """``value`` as HTML text: ``html.escape`` (quotes too), and lone surrogates as visible escapes."""
    return html.escape(_SURROGATE.sub(_visible, str(value)))


# ---------------------------------------------------------------------------------------------------------
# Feedback pages: the policy of the page, and the notebook it is rendered from
# ---------------------------------------------------------------------------------------------------------

# No script, plugin, frame, form, base URL or fetch; styles inline (the page's own CSS) and images and
# fonts from data: URLs only (nbconvert embeds plots as data: URLs). MathJax, which the feedback template
# loads from a CDN, is blocked too: math shows as its TeX source.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; base-uri 'none'; "
    "form-action 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"
)
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
_HEAD = re.compile(r"<head(?:\s[^>]*)?>", re.IGNORECASE)
_DOCTYPE = re.compile(r"\s*<!DOCTYPE[^>]*>", re.IGNORECASE)


def with_content_security_policy(page: str) -> str:
    """``page`` with :data:`CSP_META` first in its ``<head>`` (before any script it would stop), or, in a
    page without a head, right after the doctype (browsers put it in the implied head)."""
    match = _HEAD.search(page) or _DOCTYPE.match(page)
    at = match.end() if match else 0
    return page[:at] + CSP_META + page[at:]


HTML_TAGS = frozenset(
    {
        "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "div", "dl", "dt", "em",
        "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "q", "s",
        "samp", "small", "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
        "tr", "u", "ul",
    }
)  # fmt: skip
# No class, id or style: the page's own CSS classes (Bootstrap's fixed navbar...) and positions would let a
# notebook draw over the grader's notes and scores.
_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "img": {"src", "alt", "title", "width", "height"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan"},
}
_LINK_SCHEMES = ("http:", "https:", "mailto:", "#")
# bleach checks the scheme of every URL attribute after _allowed_attribute: data: must pass there for images.
_PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
# Output types a feedback page shows as they are: the template escapes text and puts images in data: URLs.
SAFE_OUTPUT_TYPES = frozenset({"text/plain", "text/latex", "image/png", "image/jpeg"})
_IMAGE_METADATA = ("width", "height", "alt")


def _allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: links to the web or the page, images from ``data:image/`` URLs only."""
    if name not in _ATTRIBUTES.get(tag, ()):
        return False
    if tag == "a" and name == "href":
        return value.strip().lower().startswith(_LINK_SCHEMES)
    if tag == "img" and name == "src":
        return value.strip().lower().startswith("data:image/")
    return True


def clean_html(text: str) -> str:
    """``text`` with only :data:`HTML_TAGS` and their allowed attributes; other tags are dropped (their
    text stays, as text), and so are comments, event handlers, ``javascript:`` URLs and remote images."""
    return bleach.clean(
        text,
        tags=HTML_TAGS,
        attributes=_allowed_attribute,
        protocols=_PROTOCOLS,
        strip=True,
        strip_comments=True,
    )


def markdown_html(source: str, attachments: dict | None = None) -> str:
    """Markdown rendered as nbconvert renders a markdown cell (math kept as TeX, attachments as data: URLs),
    then cleaned (:func:`clean_html`)."""
    renderer = IPythonRenderer(escape=False, attachments=attachments or {}, exclude_anchor_links=True)
    return clean_html(MarkdownWithMath(renderer=renderer).render(source))


def html_block(text: str) -> str:
    """HTML that a markdown renderer passes through as it is: one line that opens with ``<div>`` (an HTML
    block of CommonMark, which ends only at a blank line). Line breaks become ``&#10;``, the same
    character once the browser reads it, so the text inside is never read as markdown again."""
    return "<div>" + re.sub(r"\r\n?|\n", "&#10;", text) + "</div>"


class FeedbackSanitizer(SanitizeHTML):
    """nbconvert's ``SanitizeHTML`` with the allowlists above, for a feedback page.

    - code cells: ``text/html`` is cleaned; ``text/markdown`` is rendered and cleaned into ``text/html``
      (when there is none); every type not in :data:`SAFE_OUTPUT_TYPES` is removed (JavaScript, SVG,
      widget views, JSON, PDF...), and so is any value that is not text, so ``text/plain`` is what remains
      of them; an output left with nothing says what was removed; output metadata keeps image sizes and
      alt texts only (not ``isolated``, which would put HTML in a frame, nor ``filenames``);
    - markdown cells: rendered, cleaned, and kept as an HTML block (:func:`html_block`), since nbgrader's
      feedback template renders markdown cells without nbconvert's ``sanitize_html``;
    - raw cells: cleaned.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(
            tags=sorted(HTML_TAGS),
            attributes=_allowed_attribute,
            strip=True,
            safe_output_keys=set(SAFE_OUTPUT_TYPES),
            sanitized_output_types={"text/html"},
            **kwargs,
        )

    def sanitize_html_tags(self, html_str: str) -> str:
        return clean_html(html_str)

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "markdown":
            cell.source = html_block(markdown_html(cell.source, cell.get("attachments")))
            return cell, resources
        if cell.cell_type == "code":
            for output in cell.outputs:
                if output.output_type in ("display_data", "execute_result"):
                    self._sanitize_output(output)
            return cell, resources
        return super().preprocess_cell(cell, resources, cell_index)

    def _sanitize_output(self, output: NotebookNode) -> None:
        data = output.data
        received = sorted(data)
        for kind in [kind for kind, value in data.items() if not isinstance(value, str)]:
            del data[kind]  # a kernel may send any JSON: bleach and the template expect text
        if "text/markdown" in data and "text/html" not in data:
            data["text/html"] = markdown_html(data["text/markdown"])
        self.sanitize_code_outputs([output])
        if not data:
            data["text/plain"] = f"[removed from this page: an output of type {', '.join(received)}]"
        output.metadata = {
            kind: {key: value for key, value in output.metadata[kind].items() if key in _IMAGE_METADATA}
            for kind in ("image/png", "image/jpeg")
            if kind in data and isinstance(output.metadata.get(kind), dict)
        }


def sanitize_notebook(notebook: NotebookNode) -> NotebookNode:
    """``notebook``, changed in place, ready for a feedback page (:class:`FeedbackSanitizer`); the state of
    its widgets (notebook metadata) is dropped too."""
    notebook.metadata.pop("widgets", None)
    FeedbackSanitizer().preprocess(notebook, {})
    return notebook


def sanitize_notebook_file(path: Path) -> None:
    """Rewrite the notebook in ``path`` (nbformat 4) as :func:`sanitize_notebook` makes it."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.write(sanitize_notebook(notebook), path)
