"""A hand-graded feedback page, rendered in a process of its own under the grading stage's limits.

``python -m autograder feedback`` (and ``grade``, for a submission with hand grades) makes a submission's
page again from its autograded notebook, outside the grading stage. That notebook was cleaned by the stage
(an allowlist of cells and outputs, every text capped), but nbconvert's rendering of it is still work
decided by what a student wrote, so it runs as the stage does: a child process (``python -m
autograder.feedback.limited``) with the stage's address-space, CPU-time and file-size limits
(:func:`autograder.sandbox.stage.run_stage`), its process group killed past :data:`RENDER_SECONDS` of wall
clock, and its answer (the page) read up to the stage's response cap. The child reads one JSON request on
standard input (the notebook's path, the student, the assignment, the gradebook's URL, the grader's notes) and
writes the page on standard output; a page that could not be made raises :class:`RenderFailed` with the
reason, and the caller keeps the page it had.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from autograder import REPOSITORY
from autograder.sandbox.launcher import Limits

RENDER_SECONDS = 300  # nbconvert's start, the gradebook's read and one page; the stage allows as much
MAX_REQUEST_BYTES = 1024 * 1024


class RenderFailed(RuntimeError):
    """A page that was not made, with the reason."""


def render_page(autograded: Path, student: str, assignment: str, db_url: str, notes: list[str],
                limits: Limits) -> str:
    """:func:`autograder.feedback.handgraded.feedback_page` of these arguments, made in a child process under
    the grading stage's ``limits``.

    Raises:
        RenderFailed: the child was stopped (time, memory, CPU), failed, or answered nothing usable.
    """
    from autograder.sandbox.stage import run_stage

    request = json.dumps({"autograded": str(autograded), "student": student, "assignment": assignment,
                          "db_url": db_url, "notes": list(notes)}).encode()
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    environment["PYTHONPATH"] = str(REPOSITORY)
    outcome = run_stage(request, [sys.executable, "-m", "autograder.feedback.limited"], environment, limits,
                        cwd=str(REPOSITORY), seconds=RENDER_SECONDS)
    if outcome.stopped:
        raise RenderFailed(f"the page was not made: {outcome.stopped}")
    if outcome.returncode != 0 or not outcome.response:
        last = outcome.errors.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise RenderFailed(f"the page was not made: the renderer ended with code {outcome.returncode} ({last[0]})")
    return outcome.response.decode("utf-8")


def main() -> int:
    """The child: one request in, one page out."""
    from autograder.feedback.handgraded import feedback_page

    request = json.loads(sys.stdin.buffer.read(MAX_REQUEST_BYTES))
    page = feedback_page(Path(request["autograded"]), request["student"], request["assignment"],
                         request["db_url"], request["notes"])
    sys.stdout.buffer.write(page.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
