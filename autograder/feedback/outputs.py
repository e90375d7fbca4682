"""A student's notebook rebuilt from an allowlist schema, before anyone renders it.

The autograded notebook is shown twice: nbconvert renders it into the feedback page, and nbgrader's
formgrader renders it in the instructor's browser. Everything in it was written by the student or by the
student's code, so nothing is passed through: each cell, output and metadata field is built anew from the
few things a page needs, each checked for its type and size:

- code cells keep their source (the template shows it as text), an ``int`` execution count and outputs:
  ``stream`` (``stdout``/``stderr`` text), ``display_data`` and ``execute_result`` with ``text/plain``,
  ``text/html`` (cleaned, :func:`~autograder.feedback.escape.clean_html`), ``text/markdown`` (rendered and
  cleaned into ``text/html``), ``text/latex`` (MathML, :mod:`autograder.feedback.mathml`, or else plain
  text), ``image/png`` and ``image/jpeg`` (strict base64 of an image of that type), image metadata ``width``
  and ``height`` as positive ``int`` only; and ``error`` with text fields;
- markdown cells become their rendered, cleaned HTML (formulas as MathML) in one HTML block
  (:func:`~autograder.feedback.escape.html_block`), with png and jpeg attachments embedded;
- raw cells keep their cleaned text, which no template shows without a format in their metadata;
- notebook metadata keeps the kernel's and the language's names, and names the lexer code is highlighted with:
  pygments' Python lexer, always (:data:`PYGMENTS_LEXER`), whose time grows with its input only;
- cell metadata keeps nbgrader's fields with their scalar types, and the item each graded cell belongs to as
  the notebook numbers it (``{"autograder": {"item": "4.2"}}``, :func:`autograder.student.progress.item_labels`), which
  the feedback page names it by; notebook metadata keeps the kernel's and language's names.

What the student reads is what the checks said, not the grader's machinery: a test cell (graded, not a
solution) keeps its visible checks but not its hidden tests (the lines from ``### BEGIN HIDDEN TESTS`` to
``### END HIDDEN TESTS``, with the reporter and the run's marker in them), and the reporter's outputs
(:data:`autograder.verdicts.verdict.REPORT_MIME`, read before this rebuild) are dropped without a notice. The
verdict of a failed check stays, as the error output under its cell. A student's own cells keep all they hold.

Anything else (an output type, a MIME type, a value that is not text, a metadata key) is dropped, and an
output left empty says what was removed. At most :data:`MAX_CELLS` cells and :data:`MAX_OUTPUTS` outputs of a
notebook are rebuilt (a notice stands for the rest): each one costs every renderer a step, however small it is. Text is cut at a length, code too (per cell and per notebook: both
renderers highlight it), and HTML is cleaned only within a budget per text and per notebook (:class:`Budget`):
bleach's parser does work that grows faster than its input (with the number of sibling elements), so its input
is bounded instead of timed. Every page made from the rebuilt notebook, the formgrader's included, therefore
renders an input of bounded size.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert.filters.markdown_mistune import InvalidNotebook
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from autograder.feedback.escape import clean_html, html_block, html_text, render_markdown
from autograder.feedback.mathml import latex_output_mathml
from autograder.sandbox.crossing import NBGRADER_METADATA, NBGRADER_TEXT
from autograder.student.progress import item_labels
from autograder.student.sanitize import MAX_CELLS
from autograder.verdicts.verdict import HIDDEN_BEGIN, HIDDEN_END, REPORT_MIME

MAX_TEXT_CHARS = 200_000  # a stream, a text/plain, an evalue, one traceback line
MAX_TRACEBACK_LINES = 200
MAX_IMAGE_BASE64_CHARS = 8_000_000  # 6 MB of image
MAX_IMAGE_SIZE = 100_000  # pixels, for width and height
MAX_MARKDOWN_CHARS = 200_000  # one markdown cell or text/markdown output, before rendering
MAX_HTML_TAGS = 4_000  # one HTML text handed to bleach (counted as its "<")
MAX_NOTEBOOK_HTML_CHARS = 4_000_000  # all the markdown and HTML of one notebook together
MAX_NOTEBOOK_HTML_TAGS = 40_000
MAX_NOTICE_NAMES = 10
# MAX_CELLS (the intake's cap, autograder.student.sanitize): cells of one notebook rebuilt; then one notice.
MAX_OUTPUTS = 5_000  # outputs of one notebook rebuilt, all cells together; the rest become a notice per cell
MAX_SOURCE_CHARS = 200_000  # one code cell's source, shown as text (highlighted) by both renderers
MAX_NOTEBOOK_SOURCE_CHARS = 1_000_000  # the code of all the notebook's cells together

IMAGE_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_BASE64_LAYOUT = re.compile(r"[\n\r ]")
_CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
KERNELSPEC_FIELDS = ("name", "display_name", "language")
LANGUAGE_INFO_FIELDS = ("name", "version", "mimetype", "file_extension")
# The lexer both renderers highlight code with: pygments' Python lexer, whose time grows with its input alone
# (IPython's, the kernel's own choice, takes time that grows with the square of a line's length).
PYGMENTS_LEXER = "python3"
_NAME = re.compile(r"[A-Za-z0-9_.+ /()-]{1,100}")
MAX_ITEM_LABEL = 40  # autograder.sandbox.crossing.MAX_ITEM_LABEL: what the worker accepts
# A hidden-test block of a test cell, to its end marker or, when that is missing, to the end of the cell.
_HIDDEN_TESTS = re.compile(
    rf"^[ \t]*{re.escape(HIDDEN_BEGIN)}.*?(?:^[ \t]*{re.escape(HIDDEN_END)}[^\n]*(?:\n|\Z)|\Z)",
    re.MULTILINE | re.DOTALL,
)


@dataclass
class Budget:
    """What one notebook may still hand to the markdown renderer and bleach: characters and tags."""

    chars: int = MAX_NOTEBOOK_HTML_CHARS
    tags: int = MAX_NOTEBOOK_HTML_TAGS
    source_chars: int = MAX_NOTEBOOK_SOURCE_CHARS
    outputs: int = MAX_OUTPUTS

    def kept_outputs(self, outputs: list) -> list:
        """The first of ``outputs`` within the notebook's :data:`MAX_OUTPUTS`; spends them."""
        kept = outputs[:max(self.outputs, 0)]
        self.outputs -= len(kept)
        return kept

    def take(self, text: str) -> bool:
        """Whether ``text`` fits (then it is spent): at most :data:`MAX_HTML_TAGS` tags, within what is left."""
        tags = text.count("<")
        if tags > MAX_HTML_TAGS or tags > self.tags or len(text) > self.chars:
            return False
        self.chars -= len(text)
        self.tags -= tags
        return True

    def shown_source(self, source: str) -> str:
        """A code cell's source as the pages show it: cut at :data:`MAX_SOURCE_CHARS` (a line says how much was
        cut), and replaced by a notice once the notebook's code passes :data:`MAX_NOTEBOOK_SOURCE_CHARS`."""
        source = capped_text(source, MAX_SOURCE_CHARS)
        if len(source) > self.source_chars:
            self.source_chars = 0
            return notice(f"{len(source)} characters of code; the notebook's code passed "
                          f"{MAX_NOTEBOOK_SOURCE_CHARS} characters, and the notebook holds it")
        self.source_chars -= len(source)
        return source


def notice(what: str) -> str:
    return f"[removed from this page: {what}]"


def _names(names) -> str:
    shown = [name[:100] if isinstance(name, str) else type(name).__name__ for name in sorted(names, key=str)]
    more = len(shown) - MAX_NOTICE_NAMES
    return ", ".join(shown[:MAX_NOTICE_NAMES]) + (f" and {more} more" if more > 0 else "")


def capped_text(value: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``value``, or its first ``limit`` characters and a line that says how many were cut."""
    if len(value) <= limit:
        return value
    return value[:limit] + f"\n[... {len(value) - limit} more characters not shown]"


# ---------------------------------------------------------------------------------------------------------
# Rendered text: HTML, markdown, images
# ---------------------------------------------------------------------------------------------------------


def budgeted_html(text: str, budget: Budget) -> str | None:
    """``text`` cleaned (:func:`clean_html`), or ``None`` when it does not fit in ``budget``."""
    return clean_html(text) if budget.take(text) else None


def budgeted_markdown(source: str, budget: Budget, attachments: dict | None = None) -> str | None:
    """``source`` rendered (formulas as MathML) and cleaned, or ``None`` when it is longer than
    :data:`MAX_MARKDOWN_CHARS` or its HTML does not fit in ``budget``."""
    if len(source) > MAX_MARKDOWN_CHARS or not budget.take(source):
        return None
    rendered = render_markdown(source, _Attachments(attachments))
    return budgeted_html(rendered, budget)


def image_base64(kind: str, value: object) -> str | None:
    """``value`` as the base64 text of an image of type ``kind`` (line breaks removed), or ``None`` when it
    is not strict base64, is over :data:`MAX_IMAGE_BASE64_CHARS` or does not start as such an image does."""
    if not isinstance(value, str) or len(value) > MAX_IMAGE_BASE64_CHARS:
        return None
    text = _BASE64_LAYOUT.sub("", value)
    if len(text) % 4 or not _BASE64.fullmatch(text):
        return None
    try:
        decoded = base64.b64decode(text[:64], validate=True)  # the signature; the whole is checked below
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return text if decoded.startswith(IMAGE_SIGNATURES[kind]) else None


class _Attachments(dict):
    """A markdown cell's attachments as the renderer reads them: png and jpeg images that pass
    :func:`image_base64`; any other name it asks for is an empty png (a broken image, not an error)."""

    def __init__(self, attachments: object) -> None:
        super().__init__()
        for name, bundle in (attachments.items() if isinstance(attachments, dict) else ()):
            kept = {
                kind: text
                for kind in IMAGE_SIGNATURES
                if isinstance(bundle, dict) and (text := image_base64(kind, bundle.get(kind))) is not None
            }
            if isinstance(name, str) and kept:
                self[name] = kept

    def __contains__(self, name: object) -> bool:
        return True

    def __missing__(self, name: str) -> dict[str, str]:
        return {"image/png": ""}


# ---------------------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------------------


def _image_metadata(metadata: object) -> dict[str, int]:
    sizes = metadata if isinstance(metadata, dict) else {}
    return {
        key: value
        for key in ("width", "height")
        if type(value := sizes.get(key)) is int and 0 < value <= MAX_IMAGE_SIZE
    }


def _shown_html(data: dict, budget: Budget) -> str | None:
    """The ``text/html`` of a display: its own HTML cleaned, else its markdown rendered, else its LaTeX as
    MathML; ``None`` when none of them is text that fits in ``budget``."""
    if isinstance(text := data.get("text/html"), str) and (cleaned := budgeted_html(text, budget)) is not None:
        return cleaned
    if isinstance(text := data.get("text/markdown"), str) and (html := budgeted_markdown(text, budget)):
        return html
    latex = data.get("text/latex")
    mathml = latex_output_mathml(latex) if isinstance(latex, str) and len(latex) <= MAX_TEXT_CHARS else None
    return budgeted_html(mathml, budget) if mathml is not None else None


def rebuilt_bundle(data: object, metadata: object, budget: Budget) -> tuple[dict, dict]:
    """The ``data`` and ``metadata`` of a display: only the types of this module's docstring, rebuilt."""
    data = data if isinstance(data, dict) else {}
    metadata = metadata if isinstance(metadata, dict) else {}
    kept: dict[str, str] = {}
    if (html := _shown_html(data, budget)) is not None:
        kept["text/html"] = html
    for kind in ("text/plain", "text/latex"):  # LaTeX that is not shown as MathML is shown as text
        if isinstance(text := data.get(kind), str):
            kept.setdefault("text/plain", capped_text(text))
    kept_metadata: dict[str, dict] = {}
    for kind in IMAGE_SIGNATURES:
        if (image := image_base64(kind, data.get(kind))) is not None:
            kept[kind] = image
            if sizes := _image_metadata(metadata.get(kind)):
                kept_metadata[kind] = sizes
    if not kept:
        kept["text/plain"] = notice(f"an output of type {_names(data) or 'nothing'}")
    return kept, kept_metadata


def execution_count(item: dict) -> int | None:
    """The ``execution_count`` of a cell or result: an ``int`` from 0 on (not a ``bool``), else ``None``."""
    count = item.get("execution_count")
    return count if type(count) is int and count >= 0 else None


def _text_list(value: object) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        return None
    lines = [capped_text(line) for line in value[:MAX_TRACEBACK_LINES]]
    if len(value) > MAX_TRACEBACK_LINES:
        lines.append(f"[... {len(value) - MAX_TRACEBACK_LINES} more lines not shown]")
    return lines


def _notice_output(what: str) -> NotebookNode:
    return new_output("display_data", data={"text/plain": notice(what)}, metadata={})


def is_report_output(output: object) -> bool:
    """Whether ``output`` is display data that carries the grader's reports (:data:`REPORT_MIME`)."""
    data = output.get("data") if isinstance(output, dict) and output.get("output_type") == "display_data" else None
    return isinstance(data, dict) and REPORT_MIME in data


def rebuilt_output(output: object, budget: Budget) -> NotebookNode:
    """One output as this module's docstring allows it, or a notice of what was removed."""
    kind = output.get("output_type") if isinstance(output, dict) else None
    if kind == "stream" and output.get("name") in ("stdout", "stderr") and isinstance(output.get("text"), str):
        return new_output("stream", name=output["name"], text=capped_text(output["text"]))
    if kind in ("display_data", "execute_result"):
        data, metadata = rebuilt_bundle(output.get("data"), output.get("metadata"), budget)
        if kind == "display_data":
            return new_output(kind, data=data, metadata=metadata)
        return new_output(kind, data=data, metadata=metadata, execution_count=execution_count(output))
    if kind == "error":
        traceback = _text_list(output.get("traceback"))
        names = (output.get("ename"), output.get("evalue"))
        if traceback is not None and all(isinstance(name, str) for name in names):
            return new_output(
                "error", ename=capped_text(names[0]), evalue=capped_text(names[1]), traceback=traceback
            )
        return _notice_output("an error whose fields are not text")
    return _notice_output(f"an output of type {_names([kind]) if isinstance(kind, str) else 'unknown'}")


# ---------------------------------------------------------------------------------------------------------
# Cells and the notebook
# ---------------------------------------------------------------------------------------------------------


def rebuilt_cell_metadata(metadata: object, item: str | None = None) -> dict:
    """``{"nbgrader": {...}}`` with nbgrader's fields of their types (``bool`` is not a number here, and a number
    is finite; a text only
    as a plain id, :data:`autograder.sandbox.crossing.NBGRADER_TEXT`: nbgrader's formgrade template writes
    ``grade_id`` into the page unescaped), and
    ``{"autograder": {"item": item}}`` for a graded cell (``item`` cut to :data:`MAX_ITEM_LABEL` characters,
    or else the item the metadata already names); or ``{}``."""
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    if not isinstance(nbgrader, dict):
        return {}
    kept = {}
    for key, types in NBGRADER_METADATA.items():
        value = nbgrader.get(key)
        of_its_type = isinstance(value, types) and (types is bool or not isinstance(value, bool))
        plain = NBGRADER_TEXT.fullmatch(value) if isinstance(value, str) else not isinstance(value, float) or math.isfinite(value)
        if of_its_type and plain:
            kept[key] = value
    rebuilt = {"nbgrader": kept}
    own = metadata.get("autograder")
    item = item if item is not None else own.get("item") if isinstance(own, dict) else None
    if kept.get("grade") is True and isinstance(item, str) and item.strip():
        rebuilt["autograder"] = {"item": item.strip()[:MAX_ITEM_LABEL]}
    return rebuilt


def is_test_cell(cell: object) -> bool:
    """Whether ``cell`` is a code cell that nbgrader grades and the student does not write (a test cell)."""
    nbgrader = cell.get("metadata", {}).get("nbgrader") if isinstance(cell, dict) else None
    return (
        cell.get("cell_type") == "code" and isinstance(nbgrader, dict)
        and nbgrader.get("grade") is True and not nbgrader.get("solution")
    )  # fmt: skip


def without_hidden_tests(source: str) -> str:
    """A test cell's source without its hidden-test blocks (markers included), trailing blank lines removed."""
    return _HIDDEN_TESTS.sub("", source).rstrip()


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return source if isinstance(source, str) else ""


def _markdown_source(cell: dict, budget: Budget) -> str:
    html = budgeted_markdown(_source(cell), budget, cell.get("attachments"))
    if html is None:
        return html_block(html_text(notice("a markdown cell too long to show; the notebook holds it")))
    return html_block(html)


def rebuilt_cell(cell: object, budget: Budget, item: str | None = None) -> NotebookNode:
    """One cell as this module's docstring allows it (an unknown cell type becomes an empty raw cell);
    ``item``: the item a graded cell belongs to, as the notebook numbers it."""
    cell = cell if isinstance(cell, dict) else {}
    metadata = rebuilt_cell_metadata(cell.get("metadata"), item)
    kind = cell.get("cell_type")
    try:
        if kind == "code":
            outputs = cell.get("outputs") if isinstance(cell.get("outputs"), list) else []
            source = budget.shown_source(without_hidden_tests(_source(cell)) if is_test_cell(cell) else _source(cell))
            shown = [output for output in outputs if not is_report_output(output)]
            kept = budget.kept_outputs(shown)
            rebuilt_outputs = [rebuilt_output(output, budget) for output in kept]
            if len(kept) < len(shown):
                rebuilt_outputs.append(new_output("stream", name="stdout", text=notice(
                    f"{len(shown) - len(kept)} outputs past the notebook's {MAX_OUTPUTS}; the notebook holds them")))
            new = new_code_cell(source, metadata=metadata, execution_count=execution_count(cell),
                                outputs=rebuilt_outputs)
        elif kind == "markdown":
            new = new_markdown_cell(_markdown_source(cell, budget), metadata=metadata)
        else:
            new = new_raw_cell(budgeted_html(_source(cell), budget) or "", metadata=metadata)
    except InvalidNotebook:
        new = new_markdown_cell(html_block(html_text(notice("a cell that could not be rendered"))))
    return new


def _names_of(value: object, fields: tuple[str, ...]) -> dict[str, str]:
    value = value if isinstance(value, dict) else {}
    return {field: value[field] for field in fields if isinstance(value.get(field), str) and _NAME.fullmatch(value[field])}


def rebuilt_notebook_metadata(metadata: object) -> dict:
    """The kernel's and the language's names (plain short strings), nothing else (no widget state), and the
    lexer the pages highlight code with, always :data:`PYGMENTS_LEXER`."""
    metadata = metadata if isinstance(metadata, dict) else {}
    kept = {
        "kernelspec": _names_of(metadata.get("kernelspec"), KERNELSPEC_FIELDS),
        "language_info": {"name": "python", **_names_of(metadata.get("language_info"), LANGUAGE_INFO_FIELDS),
                          "pygments_lexer": PYGMENTS_LEXER},  # nbformat requires a name: the course's kernels
    }
    return {key: value for key, value in kept.items() if value}


def sanitize_notebook(notebook: NotebookNode) -> NotebookNode:
    """A new notebook (nbformat 4.5) rebuilt from ``notebook`` as this module's docstring says, ready for a
    feedback page and the formgrader; ``notebook`` is not changed."""
    budget = Budget()
    cells = notebook.get("cells") if isinstance(notebook.get("cells"), list) else []
    dropped, cells = max(len(cells) - MAX_CELLS, 0), cells[:MAX_CELLS]
    labels = item_labels(_plain_cell(cell) for cell in cells)
    rebuilt = [rebuilt_cell(cell, budget, _item_of(cell, labels)) for cell in cells]
    _keep_cell_ids(cells, rebuilt)
    if dropped:
        rebuilt.append(new_markdown_cell(html_block(html_text(notice(
            f"{dropped} cells past the first {MAX_CELLS}; the notebook holds them")))))
    return new_notebook(cells=rebuilt, metadata=rebuilt_notebook_metadata(notebook.get("metadata")))


def _plain_cell(cell: object) -> dict:
    """What :func:`item_labels` reads of a cell, of the types it expects whatever the notebook holds."""
    cell = cell if isinstance(cell, dict) else {}
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    kind = cell.get("cell_type")
    return {
        "cell_type": kind if isinstance(kind, str) else "",
        "metadata": {"nbgrader": nbgrader if isinstance(nbgrader, dict) else {}},
        "source": _source(cell),
    }


def _item_of(cell: object, labels: dict[str, str]) -> str | None:
    """The item of a graded cell by its grade id, when :func:`item_labels` found its number in the notebook
    (it names a cell it found no number for by its grade id: then ``None``)."""
    nbgrader = cell.get("metadata", {}).get("nbgrader") if isinstance(cell, dict) else None
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    label = labels.get(grade_id) if isinstance(grade_id, str) else None
    return label if label != grade_id else None


def _keep_cell_ids(cells: list, rebuilt: list[NotebookNode]) -> None:
    """Each rebuilt cell takes its cell's id where that is a valid id not taken by a cell before it."""
    taken: set[str] = set()
    for cell, new in zip(cells, rebuilt, strict=True):
        wanted = cell.get("id") if isinstance(cell, dict) else None
        if isinstance(wanted, str) and _CELL_ID.fullmatch(wanted) and wanted not in taken:
            new.id = wanted
        taken.add(new.id)


_HTML_BLOCK = re.compile(r"<div>([^\r\n]*)</div>")  # what html_block writes: one line


def cleaned_again(notebook: NotebookNode) -> NotebookNode:
    """``notebook``, an autograded notebook that crossed (:func:`autograder.sandbox.crossing.check_autograded`,
    which checks its shape, not what its HTML says), with the HTML a page shows cleaned once more, in place:
    each markdown cell's (the stage writes one :func:`~autograder.feedback.escape.html_block`; any other source
    is shown as text), each raw cell's and each ``text/html`` output's, within one :class:`Budget` (past it, a
    notice); and the notebook's and each cell's metadata rebuilt as the stage rebuilds them
    (:func:`rebuilt_notebook_metadata`, :func:`rebuilt_cell_metadata`: a ``grade_id`` that is not a plain id
    is dropped). The renderers outside the stage call it under their limits, so that what the stage's cleaning let
    through, or a stage that was not itself, reaches no page but as cleaned HTML."""
    budget = Budget()
    notebook.metadata = rebuilt_notebook_metadata(notebook.get("metadata"))
    for cell in notebook.cells:
        cell.metadata = rebuilt_cell_metadata(cell.get("metadata"))
        if cell.cell_type == "markdown":
            block = _HTML_BLOCK.fullmatch(cell.source)
            inner = block.group(1).replace("&#10;", "\n") if block else html_text(cell.source)  # html_block undone
            cleaned = budgeted_html(inner, budget)
            cell.source = html_block(cleaned if cleaned is not None else html_text(notice("a markdown cell past "
                                                                                          "the page's HTML budget")))
            cell.pop("attachments", None)
        elif cell.cell_type == "raw":
            cell.source = budgeted_html(cell.source, budget) or ""
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if isinstance(data.get("text/html"), str):
                cleaned = budgeted_html(data["text/html"], budget)
                data["text/html"] = cleaned if cleaned is not None else html_text(notice("HTML past the page's budget"))
    return notebook


def cleaned_again_file(path: Path) -> None:
    """Rewrite the notebook in ``path`` as :func:`cleaned_again` leaves it."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.write(cleaned_again(notebook), path)


def sanitize_notebook_file(path: Path) -> None:
    """Rewrite the notebook in ``path`` (nbformat 4) as :func:`sanitize_notebook` rebuilds it."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.write(sanitize_notebook(notebook), path)
