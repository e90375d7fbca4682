"""The formgrader's view of a submission, rendered in a process of its own under the grading stage's limits.

nbgrader's formgrader renders a submission's autograded notebook (``/formgrader/submissions/ID/``, the page on
which the instructor grades by hand) with nbconvert's HTML exporter inside the server's own process, on every
view. That notebook was rebuilt by the grading stage (an allowlist of cells and outputs, every text and the
number of cells and outputs capped), but the work of rendering it is still decided by what a student wrote,
and the server serves the whole grading session. So this server extension (``jpserver_extensions``, enabled by
:mod:`autograder.formgrader.server`) takes that route before nbgrader's handler sees it and renders the same
page in a child process under the grading stage's limits (:mod:`autograder.formgrader.rendering`), on a
thread of the server, so that the other pages and the grades' API answer meanwhile.

The page is nbgrader's: the same exporter settings (template ``formgrade``), the same resources (the student,
the assignment, the submission's place among the others). A page that could not be made is answered ``500``
with the reason, which names limits and never a student's bytes.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from jupyter_server.utils import url_path_join
from nbgrader.api import MissingEntry
from nbgrader.server_extensions.formgrader.base import check_notebook_dir, check_xsrf
from nbgrader.server_extensions.formgrader.handlers import SubmissionHandler
from tornado import web
from tornado.ioloop import IOLoop

from autograder.formgrader.rendering import VIEW_SECONDS, RenderFailed, render_view

ROUTE = r"/formgrader/submissions/([^/]+)/?"  # nbgrader's SubmissionHandler (handlers.default_handlers)
EXPORTER_SETTINGS = ("template_name", "extra_template_basedirs", "exclude_input", "exclude_output")


class LimitedSubmissionHandler(SubmissionHandler):
    """nbgrader's view of one submission, with the page made by :func:`render_view`."""

    @web.authenticated
    @check_xsrf
    @check_notebook_dir
    async def get(self, submission_id: str) -> None:
        try:
            submission = self.gradebook.find_submission_notebook_by_id(submission_id)
        except MissingEntry:
            raise web.HTTPError(404, f"Invalid submission: {submission_id}") from None
        if not self.request.path.endswith("/"):  # nbgrader's relative links need the slash
            query = f"?{self.request.query}" if self.request.query else ""
            return self.redirect(f"{self.request.path}/{query}", permanent=True)
        assignment = submission.assignment.assignment.name
        notebook_name = submission.notebook.name
        student = submission.student.id
        folder = self.coursedir.format_path(self.coursedir.autograded_directory, student, assignment)
        notebook = Path(os.path.abspath(folder)) / f"{notebook_name}.ipynb"
        places = self.api.get_notebook_submission_indices(assignment, notebook_name)
        resources = {
            "assignment_id": assignment, "notebook_id": notebook_name, "submission_id": submission.id,
            "index": places.get(submission.id, -2), "total": len(places), "base_url": self.base_url,
            "student": student, "last_name": submission.student.last_name,
            "first_name": submission.student.first_name,
            "notebook_path": f"{self.url_prefix}/{os.path.relpath(notebook, self.coursedir.root)}",
        }
        if not notebook.exists():
            resources["filename"] = str(notebook)
            self.clear()
            self.set_status(404)
            return self.write(self.render("formgrade_404.tpl", resources=resources))
        from autograder.grade import configured_limits

        settings = {name: getattr(self.exporter, name) for name in EXPORTER_SETTINGS}
        try:
            page = await IOLoop.current().run_in_executor(
                None, render_view, notebook, resources, settings, configured_limits())
        except RenderFailed as failure:
            self.log.warning("autograder: the view of submission %s was not made: %s", submission.id, failure)
            self.clear()
            self.set_status(500)
            return self.write(
                f"<!DOCTYPE html><title>Not shown</title><p>This submission's notebook ({html.escape(student)}, "
                f"{html.escape(assignment)}) was not shown: {html.escape(str(failure))}. The formgrader renders "
                f"each view under the grading stage's limits, {VIEW_SECONDS} seconds at most.</p>")
        self.write(page)


def _load_jupyter_server_extension(serverapp) -> None:
    """Jupyter server's entry point: this route goes first among the server's routes, before nbgrader's."""
    web_app = serverapp.web_app
    web_app.add_handlers(".*$", [(url_path_join(serverapp.base_url, ROUTE), LimitedSubmissionHandler)])
    rules = web_app.default_router.rules
    rules.insert(0, rules.pop(-2))  # add_handlers put it before the last rule
    serverapp.log.info("autograder: the formgrader's submission views are rendered under the stage's limits")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "autograder.formgrader.views"}]
