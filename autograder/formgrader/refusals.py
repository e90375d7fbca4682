"""The formgrader's buttons that would bypass the course's grader answer with the command that does the job.

A Jupyter server extension (``jpserver_extensions``, enabled by :mod:`autograder.formgrader.server`) that takes the
routes of nbgrader's formgrader API (``nbgrader.server_extensions.formgrader.apihandlers``) behind these buttons
before nbgrader's own handlers see them:

- Manage Submissions, per student: Autograde (``nbgrader autograde``: the student's notebook run as the
  server's user with no sandbox, its kernel's verdicts trusted), Generate Feedback (nbgrader's page without the
  course's Content-Security-Policy, with the hidden tests' expected answers in it) and Release Feedback;
- Manage Assignments, per assignment: Generate (``nbgrader generate_assignment``, which writes ``release/``
  again from ``source/`` without the course's own generation and rewrites the gradebook's record of an
  assignment that may already hold submissions), Collect (``nbgrader collect``, which authenticates nobody and
  follows links), Generate Feedback and Release Feedback (all students).

Each answers ``200`` with ``{"success": false, "error": MESSAGE}``, the form in which nbgrader's API reports a
command that did not run, so that the formgrader shows MESSAGE in its error dialog (a 4xx answer would only
show "There was an error ..."): what the button would have done, and the course's command that does it
(``python -m autograder grade``, ``feedback``, ``collect``, ``course``, and ``nbgrader release_feedback`` run after
``feedback``, as book/guide_instructors.md writes them), with this course directory's path. Nothing is run and
nothing is written. Every other route (the grades, the comments, the pages) is nbgrader's.
"""

from __future__ import annotations

import json
import shlex

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from autograder import ASSIGNMENTS
from autograder.formgrader.contents import ConfinedSubmissionFiles

GUIDE = "book/guide_instructors.md"
ROUTES = {  # nbgrader's route (apihandlers.default_handlers) -> the action refused
    r"/formgrader/api/submission/([^/]+)/([^/]+)/autograde": "autograde",
    r"/formgrader/api/assignment/([^/]+)/([^/]+)/generate_feedback": "generate_feedback",
    r"/formgrader/api/assignment/([^/]+)/([^/]+)/release_feedback": "release_feedback",
    r"/formgrader/api/assignment/([^/]+)/generate_feedback": "generate_feedback",
    r"/formgrader/api/assignment/([^/]+)/release_feedback": "release_feedback",
    r"/formgrader/api/assignment/([^/]+)/collect": "collect",
    r"/formgrader/api/assignment/([^/]+)/assign": "generate_assignment",
}
REFUSED_API_CALLS = frozenset(ROUTES.values())  # the methods of nbgrader's NbGraderAPI behind those routes
# Routes of the server that would run or render a notebook in the server's own process, as its user, outside
# the grader's sandbox and the view's limits: nbgrader's student-side extensions (the notebook toolbar's
# Validate runs the notebook in a kernel of its own; the assignment and course lists read the exchange), and
# nbconvert's export of any file of the served folder (JupyterLab's "Export Notebook As"). Every method.
OFF_ROUTES = {
    r"/assignments(?:/.*)?": "nbgrader's Validate and assignment list run or fetch notebooks as the server's user",
    r"/courses": "nbgrader's course list is the students' tool",
    r"/formgraders": "nbgrader's course list is the students' tool",
    r"/nbconvert/.*": "an export renders a notebook in the server, without the limits of the formgrader's views",
    r"/formgrader/api/assignment/[^/]+/(?:un)?release": "nbgrader's release and unrelease write the exchange; "
                                                        "release with nbgrader release_assignment in a terminal",
}


def refusal(action: str, course: str, assignment: str) -> str:
    """The message for the refused ``action`` (a name of :data:`REFUSED_API_CALLS`) in the course directory
    ``course``; ``assignment`` is named in a command only when it is one of the course's."""
    out = shlex.quote(course)
    name = assignment if assignment in ASSIGNMENTS else "ASSIGNMENT"
    feedback = f"python -m autograder feedback --out {out}"
    release = f"(cd {out} && nbgrader release_feedback {name})"
    messages = {
        "autograde": (
            "Not run: this course does not grade with nbgrader's Autograde, which would run the student's "
            "notebook without the grader's sandbox and trust its kernel's verdicts. Grade, or grade again, from "
            f"the course repository's root with:\n  python -m autograder grade CLASS --out {out}\n"
            f"(CLASS: the class folder graded into this one, {out}/submitted after python -m autograder "
            "collect). It keeps the hand grades."
        ),
        "generate_feedback": (
            "Not run: nbgrader's Generate Feedback would write the feedback pages without their "
            "Content-Security-Policy, with the hidden tests' expected answers in them. `grade` wrote each "
            "submission's page; after grading by hand, put the hand grades into the pages with:\n"
            f"  {feedback}"
        ),
        "release_feedback": (
            "Not run: feedback is released from a terminal, once no student can submit again, after the hand "
            f"grades are in the pages:\n  {feedback}\n  {release}"
        ),
        "generate_assignment": (
            "Not run: nbgrader's Generate would write the student notebooks of release/ again from source/ with "
            "nbgrader alone, without the course's own generation, and rewrite the gradebook's record of an "
            "assignment that may already hold submissions and hand grades. The course's student notebooks are "
            f"the ones in {out}/release, written by this command from the course repository's root:\n"
            f"  python -m autograder course --out {out}\n"
            f"and released to the exchange with:\n  (cd {out} && nbgrader release_assignment {name})"
        ),
        "collect": (
            "Not run: nbgrader's Collect authenticates nobody and follows links. Collect the newest submission "
            "of each student of the roster with:\n"
            f"  python -m autograder collect {name} --roster ROSTER.csv --out {out}/submitted"
        ),
    }
    return f"{messages[action]}\n({GUIDE} says what each of the formgrader's buttons does in this course.)"


class RefusedHandler(JupyterHandler):
    """A formgrader API call refused: ``{"success": false, "error": message}``, for the signed-in instructor
    (the server's token or cookie, and the XSRF check of every POST, as for nbgrader's handlers)."""

    def initialize(self, action: str) -> None:
        self.action = action

    @web.authenticated
    def post(self, assignment: str, *student: str) -> None:
        message = refusal(self.action, self.settings["server_root_dir"], assignment)
        self.log.warning("autograder: refused the formgrader's %s of %r", self.action, assignment)
        # As text, like nbgrader's answers: the formgrader's script parses the text itself (JSON.parse), and
        # jQuery would already have parsed an application/json answer.
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.finish(json.dumps({"success": False, "error": message, "log": ""}))


class OffHandler(JupyterHandler):
    """A route of the server that the formgrader does not serve: ``403`` with the reason, for every method."""

    def initialize(self, why: str) -> None:
        self.why = why

    def _refuse(self, *arguments: str) -> None:
        self.log.warning("autograder: refused %s %s", self.request.method, self.request.path[:200])
        self.set_status(403)
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.finish(f"Not served by the formgrader: {self.why}. Grade with python -m autograder grade ({GUIDE}).")

    get = post = put = patch = delete = _refuse


def _load_jupyter_server_extension(serverapp) -> None:
    """Jupyter server's entry point: the refusals' routes go first among the server's routes, before those that
    nbgrader's formgrader adds (tornado takes the first route that matches)."""
    web_app = serverapp.web_app
    handlers = [
        (url_path_join(serverapp.base_url, route), RefusedHandler, {"action": action})
        for route, action in ROUTES.items()
    ]
    handlers += [(url_path_join(serverapp.base_url, route), OffHandler, {"why": why}) for route, why in OFF_ROUTES.items()]
    # nbgrader's files beside a submission, confined to the submission's folder
    handlers.append((url_path_join(serverapp.base_url, r"/formgrader/submissions/(.*)"), ConfinedSubmissionFiles))
    web_app.add_handlers(".*$", handlers)
    rules = web_app.default_router.rules
    rules.insert(0, rules.pop(-2))  # add_handlers put it before the last rule
    serverapp.log.info("autograder: the formgrader's autograde, feedback, collect and generate calls are refused")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "autograder.formgrader.refusals"}]
