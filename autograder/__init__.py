"""The course's exercises and the commands around nbgrader: ``python -m autograder release | grade | check``.

``autograder/`` is an nbgrader course directory: ``nbgrader_config.py`` and
``source/<assignment>/<assignment>.ipynb``, one assignment per chapter. ``source/`` is the only place an
exercise is written. The package's folders are the two sides of the course (the design's "Two sides"):

- :mod:`autograder.student`, the student's side: what the notebooks import (progress lines, answers turned into
  plain values, each student's parameters, the submissions of 2.6), ``python -m autograder check`` and the rules
  by which a notebook file is read. The student edition and the kernel's view take this folder whole.
- everything else, the instructor's side, which holds the answer key: ``source/`` and
  :mod:`autograder.variants` (each student's expected values and mistakes), and the tools, grouped as the work
  goes:

  - :mod:`autograder.authoring`: the released notebooks generated from ``source/``, and the student edition;
  - :mod:`autograder.course`: a temporary nbgrader course (nbgrader never writes into this directory);
  - ``python -m autograder grade`` (:mod:`autograder.grade`), a pipeline whose stages are folders, in order,
    with the data that passes between them in :mod:`autograder.types`:

    1. and 2. :mod:`autograder.intake`: submissions found by their exact paths (a class folder, a zip,
       nbgrader's exchange), never through a link, each file copied within its cap into the grader's own folder;
    3. :mod:`autograder.sandbox`: each submission graded in a sandboxed grading stage
       (:mod:`autograder.pipeline` starts it, on whichever :mod:`autograder.executors` the command chose;
       :mod:`autograder.sandbox.grading_stage` is what runs in it, the student's kernel sandboxed inside;
       :mod:`autograder.sandbox.crossing` checks what comes back);
    4. :mod:`autograder.verdicts`: hidden tests decided outside the kernel, in the stage;
    5. :mod:`autograder.gradebook`: the class's nbgrader gradebook, written by the main process only
       (:mod:`autograder.records` keeps verdicts for a resumed batch);
    6. :mod:`autograder.feedback`: feedback pages (rendered in the stage) and the class's reports;

  - :mod:`autograder.course_directory` and :mod:`autograder.formgrader`: the folder ``grade`` writes is an
    nbgrader course directory, served by nbgrader's formgrader for the hand grades
    (``python -m autograder formgrader``), which :mod:`autograder.feedback.handgraded` writes into the reports
    and pages (``python -m autograder feedback``).
"""

from __future__ import annotations

from pathlib import Path

COURSE_DIRECTORY = Path(__file__).resolve().parent
REPOSITORY = COURSE_DIRECTORY.parent
SOURCE_DIRECTORY = COURSE_DIRECTORY / "source"
CONFIG_FILE = COURSE_DIRECTORY / "nbgrader_config.py"
RELEASED_DIRECTORY = REPOSITORY / "notebooks"

# One assignment per chapter, named like the chapter (book/02_sinusoidal.md, notebooks/02_sinusoidal.ipynb).
ASSIGNMENTS: tuple[str, ...] = (
    "01_permutation",
    "02_sinusoidal",
    "03_learned",
    "04_relative",
    "05_rope",
    "06_comparison",
)


def source_notebook(assignment: str) -> Path:
    """``autograder/source/<assignment>/<assignment>.ipynb``."""
    return SOURCE_DIRECTORY / assignment / f"{assignment}.ipynb"


def released_notebook(assignment: str) -> Path:
    """``notebooks/<assignment>.ipynb``."""
    return RELEASED_DIRECTORY / f"{assignment}.ipynb"
