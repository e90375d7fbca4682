"""Make the `.ipynb` that each chapter page offers for download the executed notebook, outputs included.

myst-nb writes every notebook it reads to _build/jupyter_execute/<docname>.ipynb, and sphinx-book-theme
copies that file to _build/html/_sources/ and links it from the page's download button. But when myst-nb
takes a chapter's outputs from the execution cache (every build after the first), it writes the notebook
as read from the source, without its outputs. This extension puts the cached outputs back into that file
as soon as the chapter has been read, before the theme copies it.
"""

from pathlib import Path
from typing import Any

import nbformat
from docutils import nodes
from jupyter_cache import get_cache
from myst_nb.sphinx_ import NbMetadataCollector
from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


def _attach_cached_outputs(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    execution = NbMetadataCollector.get_exec_data(app.env, docname)
    if not execution or execution.get("method") != "cache":
        return  # not a notebook, or executed without the cache
    config = app.env.mystnb_config
    path = Path(config.output_folder, *f"{docname}.ipynb".split("/"))
    notebook = nbformat.read(path, as_version=4)
    try:
        _, executed = get_cache(config.execution_cache_path).merge_match_into_notebook(notebook)
    except KeyError:
        LOGGER.warning(f"no executed version of {docname} in the execution cache", location=docname)
        return
    nbformat.write(executed, path)


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("myst_nb")
    app.connect("doctree-read", _attach_cached_outputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
