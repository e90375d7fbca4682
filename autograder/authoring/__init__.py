"""The instructor's course, before any grading: the released notebooks generated from ``source/``
(:mod:`~autograder.authoring.release`) and the student edition built from the student's side by allowlist
(:mod:`~autograder.authoring.publish`)."""
