"""The formgrader's view of a submission is nbgrader's page, made in a child process under the grading stage's
limits (autograder.formgrader.rendering); a child that is stopped or fails is a RenderFailed with a reason that
quotes nothing of the notebook.

The views served by the formgrader itself, in Chromium, are checked in tests/test_grader_formgrader.py.
"""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader import handlers

from autograder.feedback.outputs import sanitize_notebook
from autograder.formgrader import rendering
from autograder.sandbox.crossing import check_autograded
from autograder.sandbox.launcher import Limits
from autograder.sandbox.stage import STAGE_MEMORY_MB

# nbgrader's formgrader configures its exporter so (FormgradeExtension.build_extra_config).
FORMGRADE = {"template_name": "formgrade", "extra_template_basedirs": [handlers.template_path],
             "exclude_input": False, "exclude_output": False}
RESOURCES = {"assignment_id": "04_relative", "notebook_id": "04_relative", "submission_id": "abc", "index": 0,
             "total": 3, "base_url": "", "student": "ana", "last_name": "Lima", "first_name": "Ana",
             "notebook_path": "autograded/ana/04_relative/04_relative.ipynb"}


def _notebook(path):
    """An autograded notebook as the grading stage writes it (:func:`sanitize_notebook`)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("The bias depends on the *distance* only."),
        nbformat.v4.new_code_cell("offsets = [j - i for i in range(3) for j in range(3)]", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="[0, 1, 2, -1, 0, 1, -2, -1, 0]\n")]),
    ]
    nbformat.write(sanitize_notebook(notebook), path)
    return path


def test_a_view_is_the_page_nbgraders_exporter_makes_in_the_server(tmp_path):
    notebook = _notebook(tmp_path / "04_relative.ipynb")
    expected, _ = HTMLExporter(**FORMGRADE).from_filename(str(notebook), resources=dict(RESOURCES))
    page = rendering.render_view(notebook, RESOURCES, FORMGRADE, Limits())
    assert page == expected
    assert "The bias depends on the" in page and "Lima" in page  # the notebook and the resources both in it


def test_a_view_shows_the_html_of_a_crossed_notebook_only_as_cleaned_html(tmp_path):
    """Round 15: the crossing checks a notebook's shape, not its HTML, and nbgrader's template puts a markdown
    cell's source on the page as it is: a ``<style>`` (which the page's policy allows inline) could hide or
    forge what the instructor grades by, and a copy of a template's script could set its globals. A stage
    that was not itself could send both; the view cleans the notebook again before it renders it."""
    hostile = ('<style>body{display:none}</style><script type="text/javascript">var submission_id = "other";'
               '</script><b onclick="alert(1)">kept</b>')
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell(f"<div>{hostile}</div>"),
        nbformat.v4.new_markdown_cell(f"## written otherwise\n\n{hostile}"),
        nbformat.v4.new_raw_cell(hostile),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={"text/html": hostile})]),
    ]
    check_autograded(nbformat.writes(notebook))  # it crosses
    path = tmp_path / "04_relative.ipynb"
    nbformat.write(notebook, path)
    honest, _ = HTMLExporter(**FORMGRADE).from_filename(str(_notebook(tmp_path / "honest.ipynb")), resources=dict(RESOURCES))
    page = rendering.render_view(path, RESOURCES, FORMGRADE, Limits())
    assert "body{display:none}" in page and "<b>kept</b>" in page  # the text is there, as text
    assert _elements(page) == _elements(honest)  # styles, scripts and handlers: the template's only


def _elements(page: str) -> tuple[list[str], list[str], list[str]]:
    """The page's ``<style>`` texts, ``<script>`` texts and event handlers, as a browser's parser finds them."""
    found: tuple[list[str], list[str], list[str]] = ([], [], [])

    class Parser(HTMLParser):
        inside: str | None = None

        def handle_starttag(self, tag, attrs):
            self.inside = tag if tag in ("style", "script") else None
            found[2].extend(f"{name}={value}" for name, value in attrs if name.startswith("on"))

        def handle_data(self, data):
            if self.inside:
                found[0 if self.inside == "style" else 1].append(data.strip())

    Parser().feed(page)
    return found


def test_the_view_child_holds_the_stage_memory_and_file_size_and_the_views_cpu_time():
    probe = (
        "import resource\n"
        "from autograder.formgrader.rendering import view_limits\n"
        "from autograder.sandbox.launcher import Limits\n"
        "view_limits(Limits(memory_mb=2048, file_size_mb=100))\n"
        "print(*(resource.getrlimit(kind)[0] for kind in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE,"
        " resource.RLIMIT_CPU, resource.RLIMIT_CORE)))\n"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    memory = (2048 + STAGE_MEMORY_MB) * 1024 * 1024  # the kernel's share and the stage's own
    assert shown.split() == [str(memory), str(100 * 1024 * 1024), str(rendering.VIEW_SECONDS), "0"]


def test_a_view_past_its_time_is_stopped_and_named(tmp_path):
    notebook = _notebook(tmp_path / "04_relative.ipynb")
    with pytest.raises(rendering.RenderFailed, match=r"^rendering took longer than 0\.2 seconds in all and was stopped$"):
        rendering.render_view(notebook, RESOURCES, FORMGRADE, Limits(), seconds=0.2)  # the imports take longer


def test_a_notebook_the_renderer_refuses_is_named_by_its_exception_and_nothing_of_it_is_quoted(tmp_path):
    notebook = tmp_path / "04_relative.ipynb"
    notebook.write_text('{"cells": "\x1b]0;owned\x07 <script>alert(1)</script>"', encoding="utf-8")
    with pytest.raises(rendering.RenderFailed) as failure:
        rendering.render_view(notebook, RESOURCES, FORMGRADE, Limits())
    reason = str(failure.value)
    assert reason.startswith("the renderer ended with code 1 (") and reason.endswith("Error)"), reason
    assert "owned" not in reason and "script" not in reason and "\x1b" not in reason


@pytest.mark.parametrize(("last_line", "named"), [
    (b"Traceback...\nnbformat.reader.NotJSONError: Notebook does not appear to be JSON: '{\\x1b]0;t'",
     "nbformat.reader.NotJSONError"),
    (b"MemoryError", "MemoryError"),
    (b"\x1b]0;title\x07: rest", "no exception named"),
    (b"", "no exception named"),
])
def test_only_a_name_of_an_exception_is_kept_from_the_childs_errors(last_line, named):
    assert rendering._exception_name(last_line) == named


def test_the_view_child_gets_no_secret_of_the_servers_environment(tmp_path, monkeypatch):
    from autograder.sandbox import stage

    seen = {}

    def record(request, argv, environment, limits, **options):
        seen.update(environment)
        return stage.StageOutcome(b"<html></html>", b"", 0)

    monkeypatch.setenv("JUPYTER_TOKEN", "the-formgraders-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-cloud-secret")
    monkeypatch.setattr(stage, "run_stage", record)
    assert rendering.render_view(tmp_path / "x.ipynb", RESOURCES, FORMGRADE, Limits()) == "<html></html>"
    assert "the-formgraders-token" not in seen.values() and "a-cloud-secret" not in seen.values()
    assert set(seen) <= {*rendering.PASSED_THROUGH, "PYTHONPATH"} and seen["PYTHONPATH"]
