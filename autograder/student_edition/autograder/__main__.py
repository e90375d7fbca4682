"""``python -m autograder check NOTEBOOK``: run a notebook's visible tests in a fresh kernel.

The student edition's only command; the instructor's repository has the others (release, grade, ...).
"""

import sys

from autograder.student.check import main

if __name__ == "__main__":
    sys.exit(main())
