"""The student's side: everything a student may read, import and run, and nothing that computes an answer.

- what the notebooks import: :mod:`~autograder.student.progress` (the visible tests' progress lines),
  :mod:`~autograder.student.answers` (answers turned into plain values and compared),
  :mod:`~autograder.student.parameters` (each student's own parameters, drawn from the student ID) and
  :mod:`~autograder.student.submitted_tables` (the submissions diagnosed in 2.6);
- ``python -m autograder check`` (:mod:`~autograder.student.check`) and the kernel it starts
  (:mod:`~autograder.student.kernels`);
- the rules by which a notebook file is read (:mod:`~autograder.student.safe_files`,
  :mod:`~autograder.student.received`, :mod:`~autograder.student.sanitize`): the grader's intake applies the
  same ones, so that ``check`` refuses what ``grade`` refuses.

This folder is taken whole, and alone of ``autograder/`` with ``autograder/__init__.py``, by the student
edition (:mod:`autograder.authoring.publish`) and by the kernel's view
(:mod:`autograder.sandbox.kernel_view`). Nothing here imports the instructor's side, the rest of the package,
which holds the answer key (``source/``, :mod:`autograder.variants`, the hidden tests' verdicts); a test follows
every import of this folder to keep it so.
"""
