"""The formgrader's view of a submission is nbgrader's page, made in a child process under the grading stage's
limits (autograder.formgrader.rendering); a child that is stopped or fails is a RenderFailed with a reason that
quotes nothing of the notebook.

The views served by the formgrader itself, in Chromium, are checked in tests/test_grader_formgrader.py.
"""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbgrader.server_extensions.formgrader import handlers

from autograder.formgrader import rendering
from autograder.sandbox.launcher import Limits
from autograder.sandbox.stage import STAGE_MEMORY_MB

# nbgrader's formgrader configures its exporter so (FormgradeExtension.build_extra_config).
FORMGRADE = {"template_name": "formgrade", "extra_template_basedirs": [handlers.template_path],
             "exclude_input": False, "exclude_output": False}
RESOURCES = {"assignment_id": "04_relative", "notebook_id": "04_relative", "submission_id": "abc", "index": 0,
             "total": 3, "base_url": "", "student": "ana", "last_name": "Lima", "first_name": "Ana",
             "notebook_path": "autograded/ana/04_relative/04_relative.ipynb"}


def _notebook(path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("The bias depends on the *distance* only."),
        nbformat.v4.new_code_cell("offsets = [j - i for i in range(3) for j in range(3)]", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="[0, 1, 2, -1, 0, 1, -2, -1, 0]\n")]),
    ]
    nbformat.write(notebook, path)
    return path


def test_a_view_is_the_page_nbgraders_exporter_makes_in_the_server(tmp_path):
    notebook = _notebook(tmp_path / "04_relative.ipynb")
    expected, _ = HTMLExporter(**FORMGRADE).from_filename(str(notebook), resources=dict(RESOURCES))
    page = rendering.render_view(notebook, RESOURCES, FORMGRADE, Limits())
    assert page == expected
    assert "The bias depends on the" in page and "Lima" in page  # the notebook and the resources both in it


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
