"""Correct three pieces of the themes' markup that screen readers (and axe-core) get wrong, in every page.

Once the HTML is written, each page is rewritten with three substitutions:

- The search fields (pydata-sphinx-theme) are buttons that show "Search Ctrl+K" but are named "Search" by
  aria-label; a spoken command ("click Search Ctrl K") must match the name (WCAG 2.5.3, label in name). The
  aria-label goes: the button is named by its text.
- The colour-mode button holds three icons with a ``title`` each ("Light", "Dark", "System Settings"), which
  Font Awesome turns into named images, so the button named "Color mode" shows other names. The titles go
  and the icons are marked aria-hidden; the button keeps its name and its tooltip.
- Each chapter's reference list is a ``role="list"`` (docutils) whose entries have the deprecated role
  ``doc-biblioentry``, which is no list item: a list without items to assistive technology. The entries
  become ``role="listitem"``.

A page that still holds one of these patterns after the rewrite fails the build: the themes changed their
markup and this extension must follow.
"""

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

SEARCH_FIELD_LABEL = re.compile(r'(<button class="btn search-button-field[^>]*?) aria-label="[^"]*"')
MODE_ICON_TITLE = re.compile(r'(<i class="theme-switch [^"]*" data-mode="[a-z]+")\s+title="[^"]*"></i>')
BIBLIOGRAPHY_ENTRY_ROLE = re.compile(r'(<div class="citation" id="[^"]*") role="doc-biblioentry"')

SUBSTITUTIONS = (
    (SEARCH_FIELD_LABEL, r"\1"),
    (MODE_ICON_TITLE, r'\1 aria-hidden="true"></i>'),
    (BIBLIOGRAPHY_ENTRY_ROLE, r'\1 role="listitem"'),
)
# What must be gone after the rewrite, whatever the attributes' order.
LEFT_OVER = {
    "a search field named by aria-label": re.compile(r'<button class="btn search-button-field[^>]*aria-label='),
    "a colour-mode icon with a title": re.compile(r'<i class="theme-switch [^>]*title='),
    "a reference entry with role doc-biblioentry": re.compile(r'role="doc-biblioentry"'),
}


def accessible_markup(page: str) -> str:
    """``page`` (the HTML of one page) with the three corrections of this module's docstring."""
    for pattern, replacement in SUBSTITUTIONS:
        page = pattern.sub(replacement, page)
    return page


def problems_left(page: str) -> list[str]:
    """What ``accessible_markup`` should have corrected in ``page`` but did not."""
    return [name for name, pattern in LEFT_OVER.items() if pattern.search(page)]


def _correct_every_page(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for path in sorted(outdir.rglob("*.html")):
        if path.relative_to(outdir).parts[0] in ("_static", "_sources"):
            continue
        text = path.read_text(encoding="utf-8")
        corrected = accessible_markup(text)
        left = problems_left(corrected)
        if left:
            raise ExtensionError(f"accessible_pages: {path.relative_to(outdir)} still has {', '.join(left)}: "
                                 "the theme's markup changed; update book/_ext/accessible_pages.py")
        if corrected != text:
            path.write_text(corrected, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", _correct_every_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
