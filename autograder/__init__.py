"""The course's exercises and the commands around nbgrader: ``python -m autograder release | grade | check``.

``autograder/`` is an nbgrader course directory: ``nbgrader_config.py`` and
``source/<assignment>/<assignment>.ipynb``, one assignment per chapter. ``source/`` is the only place an
exercise is written. The modules of this package add what an instructor needs around nbgrader:

- :mod:`autograder.course`: a temporary nbgrader course (nbgrader never writes into this directory) and
  the environment of the kernels that run notebooks;
- :mod:`autograder.release`: the student notebooks in ``notebooks/``, generated from ``source/``;
- :mod:`autograder.check`: a student's self-check with the visible tests;
- :mod:`autograder.answers`: turning answers into plain values and comparing them, for the hidden tests;
- :mod:`autograder.parameters`: each student's own parameters for the numerical items, drawn from the student
  ID and printed in the notebook, and :mod:`autograder.submitted_tables`, the submissions diagnosed in 2.6;
- :mod:`autograder.variants`: the grader's side of those items, each student's expected values and mistakes;
- :mod:`autograder.course_directory` and :mod:`autograder.formgrader`: the folder ``grade`` writes is an nbgrader
  course directory, served by nbgrader's formgrader for the hand grades (``python -m autograder formgrader``),
  which :mod:`autograder.feedback.handgraded` writes into the reports and pages (``python -m autograder feedback``).

``python -m autograder grade`` (:mod:`autograder.grade`) runs a pipeline whose stages are the folders of this
package, in order, with the data that passes between them in :mod:`autograder.types`:

1. and 2. :mod:`autograder.intake`: submissions found by their exact paths, never through a link, each file
   copied within its cap into the grader's own folder (it is read, checked and repaired in the stage);
3. :mod:`autograder.sandbox`: each submission graded in a sandboxed grading stage (:mod:`autograder.pipeline`
   starts it, on whichever :mod:`autograder.executors` the command chose; :mod:`autograder.grading_stage` is
   what runs in it, the student's kernel sandboxed inside; :mod:`autograder.crossing` checks what comes back);
4. :mod:`autograder.verdicts`: hidden tests decided outside the kernel, in the stage;
5. :mod:`autograder.gradebook`: the class's nbgrader gradebook, written by the main process only;
6. :mod:`autograder.feedback`: feedback pages (rendered in the stage) and the class's reports.
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
