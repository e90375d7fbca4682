"""Keep the pages of the book free of anything that would load from another site.

Jupyter Book always loads sphinx-thebe, which writes the address of thebe's script on a public CDN into
every page (and a Binder configuration for live code) and fetches that script when a reader presses a
"live code" button. The book offers no live code: its launch buttons are plain links to Binder and Colab.
So this extension disconnects the two handlers of sphinx-thebe that put thebe on the pages; sphinx-thebe's
stylesheet stays, served from the site.

MathJax, the other remote script a Sphinx site usually loads, is served from the site itself: see
`mathjax_path` in _config.yml and the `mathjax` target of the Makefile.
"""

from typing import Any

from sphinx.application import Sphinx

# sphinx_thebe.init_thebe_core adds the loader script and the CDN address to every page;
# sphinx_thebe.update_thebe_context adds a <script type="text/x-thebe-config"> block to every page.
THEBE_PAGE_HANDLERS = {"init_thebe_core", "update_thebe_context"}


def setup(app: Sphinx) -> dict[str, Any]:
    # Jupyter Book sets sphinx-thebe up before the book's local extensions, so its handlers are there now.
    disconnected = set()
    for listeners in app.events.listeners.values():
        for listener in list(listeners):
            handler = listener.handler
            if handler.__module__ == "sphinx_thebe" and handler.__name__ in THEBE_PAGE_HANDLERS:
                app.disconnect(listener.id)
                disconnected.add(handler.__name__)
    if "sphinx_thebe" in app.extensions and disconnected != THEBE_PAGE_HANDLERS:
        missing = ", ".join(sorted(THEBE_PAGE_HANDLERS - disconnected))
        raise RuntimeError(f"offline_pages: sphinx-thebe no longer has the handlers {missing}; update this extension")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
