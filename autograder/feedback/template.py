"""The template of the feedback pages: nbgrader's, made for a student to read under the page's policy.

nbgrader's ``feedback`` template (of its formgrader) loads MathJax from a CDN, inlines Bootstrap's CSS with its
Glyphicons fonts (files next to the page), names every test cell "Test cell", shows instructors' comments as
markdown with its HTML, and is laid out for a wide screen. The page's Content-Security-Policy
(:data:`autograder.feedback.escape.CONTENT_SECURITY_POLICY`) blocks the script and the fonts, which the browser
reports as errors. ``templates/autograder_feedback`` extends it:

- no script and no ``@font-face`` (:func:`without_font_faces`): formulas are MathML already
  (:mod:`autograder.feedback.mathml`), and the browser draws them;
- items named as the notebook numbers them ("4.2", "Quiz 1"), from the metadata the rebuild writes
  (:mod:`autograder.feedback.outputs`), or else by their grade id;
- an instructor's comment as text (HTML-escaped, line breaks kept): ``<b>`` shows as ``<b>``;
- a layout that fits a phone: code, tables and formulas scroll inside their own box, not the page.

Every value the template writes that a notebook or a gradebook holds is escaped (``| e``), or is HTML that the
rebuild cleaned already (a markdown cell, an output).
"""

from __future__ import annotations

import re
from pathlib import Path

import markupsafe

TEMPLATE_NAME = "autograder_feedback"
TEMPLATES = Path(__file__).parent / "templates"
_FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}")


def without_font_faces(css: str) -> markupsafe.Markup:
    """``css`` without its ``@font-face`` rules (the fonts they name would load from files the policy
    blocks); the text that uses such a font falls back to another one."""
    return markupsafe.Markup(_FONT_FACE.sub("", str(css)))  # the CSS of nbconvert and nbgrader, no student text


def nbgrader_templates() -> Path:
    """The folder of nbgrader's formgrader templates, where its ``feedback`` template lies."""
    import nbgrader

    return Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"


def exporter_config() -> dict[str, object]:
    """The ``HTMLExporter`` settings that render a feedback page with this template (for nbgrader's
    ``GenerateFeedback``, which keeps the settings it is given)."""
    return {
        "template_name": TEMPLATE_NAME,
        "extra_template_basedirs": [str(TEMPLATES), str(nbgrader_templates())],
        "filters": {"without_font_faces": without_font_faces},
    }


def generate_feedback_config() -> dict[str, object]:
    """The ``GenerateFeedback`` settings that go with :func:`exporter_config`: the page rendered by
    :class:`autograder.feedback.exporter.FeedbackExporter`."""
    from autograder.feedback.exporter import FeedbackExporter

    return {"exporter_class": FeedbackExporter}
