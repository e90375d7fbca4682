"""The exporter of the feedback pages: nbconvert's ``HTMLExporter`` without its last pass over the page.

``HTMLExporter.from_notebook_node`` renders the template, then parses the whole page again with BeautifulSoup,
to give an image without an ``alt`` nbconvert's text for it and a ``tabindex`` to the cells of JupyterLab's
templates, and writes the page out anew: about 0.1 s of every feedback page, in every grading stage (the
parser's and the selectors' first use in a fresh process cost most of it). A feedback page needs neither: its
template is the classic one, which has no JupyterLab cell to focus, and every image on it has its ``alt``
already, from the template's own image blocks (``templates/autograder_feedback``) or from the cleaning of the
student's HTML (:func:`autograder.feedback.escape.clean_html`). So :class:`FeedbackExporter` renders the template
and stops there. It reads the ``HTMLExporter`` settings (:func:`autograder.feedback.template.exporter_config`)
as its parent class does.
"""

from __future__ import annotations

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter


class FeedbackExporter(HTMLExporter):
    """``HTMLExporter`` whose page is the template's output, as rendered (see the module docstring)."""

    def from_notebook_node(self, nb, resources=None, **kw):
        """The filters ``HTMLExporter`` registers (code highlighted with the notebook's lexer, outputs' data
        types), then the template's rendering, returned as it is."""
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        self.register_filter(
            "highlight_code",
            self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)),
        )
        resources = self._init_resources(resources)
        self.register_filter(
            "filter_data_type",
            WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources),
        )
        return TemplateExporter.from_notebook_node(self, nb, resources, **kw)
