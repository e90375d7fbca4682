"""The book reads its pages from book/ only: a notebook elsewhere in the checkout is never read nor executed.

An instructor who grades into a folder of the checkout (the `course/` of the exchange loop in
book/guide_instructors.md) leaves there the students' autograded notebooks, in the hidden
`course/.autograder-records/<student>/<assignment>/`. Were the book to read them as pages, `make book` would
run the students' code as the instructor, unsandboxed. These tests plant such
notebooks (and other stray sources) in a copy of the book's sources, never in the checkout itself, and ask
Sphinx, configured as `jupyter-book build` configures it from _config.yml, which documents it finds; then they
build a small book with execution on and check that no planted notebook ran.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
# Paths (from the book's root) of sources that are not pages of the book.
PLANTED = (
    "course/.autograder-records/s1/01_permutation/autograded.ipynb",
    "course/x.md",
    "notebooks_copy/y.ipynb",
    ".hidden/z.ipynb",
    "book/sub/.records/w.ipynb",
    "book/_ext/v.ipynb",
)

# Sphinx, made as jupyter_book.sphinx.build_sphinx makes it, lists the documents it would read (run in a process
# of its own: jupyter-book adds the local extensions' folder to sys.path and Sphinx patches docutils' globals).
FOUND_DOCUMENTS = """
import json, sys
from pathlib import Path
from jupyter_book.config import get_final_config
from sphinx.application import Sphinx
from sphinx.util.docutils import docutils_namespace, patch_docutils

source, overrides = Path(sys.argv[1]), json.loads(sys.argv[2])
# What `jupyter-book build` itself sets (jupyter_book.cli.main), then the test's own overrides.
cli = {"external_toc_path": (source / "_toc.yml").as_posix(), "latex_individualpages": False, **overrides}
config, _ = get_final_config(user_yaml=source / "_config.yml", cli_config=cli, sourcedir=source)
with patch_docutils(None), docutils_namespace():
    app = Sphinx(source, None, source / "_build" / "html", source / "_build" / ".doctrees", "html",
                 confoverrides=config, status=None, warning=sys.stderr)
    app.env.find_files(app.config, app.builder)
    print(json.dumps(sorted(app.env.found_docs)))
"""


def _marker_notebook(marker: Path) -> nbformat.NotebookNode:
    """A notebook whose one code cell writes ``marker``: it exists only if the notebook ran."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A notebook that is not a page"),
        nbformat.v4.new_code_cell(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')"),
    ]
    return notebook


def _plant(book: Path, markers: Path) -> None:
    """Every path of PLANTED under ``book``; each notebook writes a marker of its own into ``markers``."""
    for index, relative in enumerate(PLANTED):
        path = book / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".ipynb":
            nbformat.write(_marker_notebook(markers / f"planted-{index}"), path)
        else:
            path.write_text("# A stray page\n\nNot a page of the book.\n")


def _toc_documents(toc: dict) -> set[str]:
    """The root and every chapter of a jb-book table of contents."""
    documents = {toc["root"]}
    for part in toc.get("parts", []):
        documents.update(chapter["file"] for chapter in part["chapters"])
    return documents


def _found_documents(book: Path, overrides: dict) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-c", FOUND_DOCUMENTS, str(book), json.dumps(overrides)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return set(json.loads(completed.stdout))


@pytest.fixture(scope="module")
def planted_book(tmp_path_factory) -> Path:
    """A copy of the book's sources (configuration, table of contents, book/, the released notebooks that
    graded_items reads) with the stray sources planted in it."""
    book = tmp_path_factory.mktemp("book")
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(ROOT / name, book / name)
    shutil.copytree(ROOT / "book", book / "book")
    shutil.copytree(ROOT / "notebooks", book / "notebooks")
    _plant(book, tmp_path_factory.mktemp("markers"))
    return book


def test_the_root_of_the_table_of_contents_lies_in_book():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert all(document.startswith("book/") for document in _toc_documents(toc)), toc


def test_the_book_finds_exactly_the_pages_of_its_table_of_contents(planted_book):
    toc = yaml.safe_load((planted_book / "_toc.yml").read_text())
    expected = _toc_documents(toc)
    assert len(expected) == 9  # the introduction, six chapters and the two guides
    assert _found_documents(planted_book, {}) == expected


def test_include_patterns_alone_keep_every_source_outside_book_out(planted_book):
    # Without exclude_patterns and without only_build_toc_files, what is found still lies in book/.
    found = _found_documents(planted_book, {"exclude_patterns": [], "external_toc_exclude_missing": False})
    assert "book/intro" in found
    assert sorted(document for document in found if not document.startswith("book/")) == []


def test_every_planted_source_is_found_by_a_book_that_reads_everything(planted_book):
    # The plants are sources Sphinx would read (so that the tests above can fail): each is found once nothing
    # keeps it out.
    everything = {"include_patterns": ["**"], "exclude_patterns": [], "external_toc_exclude_missing": False}
    found = _found_documents(planted_book, everything)
    assert {Path(relative).with_suffix("").as_posix() for relative in PLANTED} <= found


def _write_small_book(book: Path, markers: Path) -> None:
    """The book's configuration and extensions with a one-page table of contents: the page runs one cell."""
    (book / "book").mkdir(parents=True)
    shutil.copy2(ROOT / "_config.yml", book / "_config.yml")
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/intro\n")
    for name in ("_ext", "_static", "references.bib"):
        copy = shutil.copytree if (ROOT / "book" / name).is_dir() else shutil.copy2
        copy(ROOT / "book" / name, book / "book" / name)
    (book / "_build" / "vendor").mkdir(parents=True)  # html_static_path; MathJax is not needed here
    (book / "book" / "intro.md").write_text(
        "---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
        "  display_name: Python 3\n---\n\n# A small book\n\n```{code-cell} ipython3\nfrom pathlib import Path\n"
        f"Path({str(markers / 'page')!r}).write_text('ran')\n```\n"
    )
    _plant(book, markers)


@pytest.mark.slow
def test_building_the_book_runs_no_planted_notebook(tmp_path):
    book, markers = tmp_path / "book", tmp_path / "markers"
    markers.mkdir()
    _write_small_book(book, markers)
    completed = subprocess.run(
        [str(JUPYTER_BOOK), "build", str(book), "--builder", "html", "-W", "-n", "--keep-going"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sorted(path.name for path in markers.glob("planted-*")) == []
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert (markers / "page").read_text() == "ran"  # the build executes notebooks: the page's cell ran
    assert (book / "_build" / "html" / "book" / "intro.html").is_file()
