"""Hand grading: nbgrader's formgrader served over the class folder that ``grade`` writes
(:mod:`~autograder.formgrader.server`), under the course's Content-Security-Policy
(:mod:`~autograder.formgrader.csp`), with the buttons that would run or collect a notebook outside the grading
stage refused (:mod:`~autograder.formgrader.refusals`) and each submission's view made in a child process under
the grading stage's limits (:mod:`~autograder.formgrader.views`, :mod:`~autograder.formgrader.rendering`)."""
