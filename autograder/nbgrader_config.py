"""nbgrader's configuration of the course, read by ``python -m autograder`` (and by nbgrader run here).

``python -m autograder`` copies the course into a temporary directory for every run and sets the course root
there; nbgrader never writes into ``autograder/``.
"""

c = get_config()  # noqa: F821 (nbgrader provides get_config when it reads this file)

c.CourseDirectory.course_id = "posenc"

# What a student sees in place of a solution. The code stub is a comment, so that an unanswered item leaves its
# names undefined and the notebook still runs to its end; its test cell then says "not answered yet" while the
# student works, and fails when graded (autograder/student/progress.py), so that the item scores 0.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Per-student variants (autograder/variants/): the numerical items give each student parameters of their own,
# drawn from the student ID, so that an answer passed around the class is wrong for most of it. False: every
# student answers with the same parameters (one answer key). `python -m autograder grade --variants on|off`
# overrides it for one batch; notebooks read it when they print "your parameters".
c.AutograderVariants.enabled = True

# A cell that runs longer than this many seconds is interrupted and counts as failed; the rest of the
# notebook still runs. `python -m autograder grade --timeout S` overrides it.
c.Execute.timeout = 120

# Keep feedback pages readable when a student prints a lot.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60

# The sandbox of every student's kernel while grading (autograder/sandbox/launcher.py): bubblewrap, a control group
# (autograder/sandbox/cgroups.py) and these limits (0: no limit). `python -m autograder grade --memory-mb ...`
# overrides them.
c.AutograderSandbox.memory_mb = 4096  # address space and control-group memory; torch alone takes ~700 MB
c.AutograderSandbox.cpu_seconds = 600  # CPU time of each process of the kernel
c.AutograderSandbox.processes = 64  # processes and threads of the kernel (its control group)
c.AutograderSandbox.file_size_mb = 64  # largest file the kernel may write
c.AutograderSandbox.output_kb = 1024  # output a cell may send the grader; the rest is cut, with a note
c.AutograderSandbox.notebook_output_kb = 4096  # output and widget messages of the whole notebook
c.AutograderSandbox.tmp_mb = 256  # the kernel's /tmp (its working folder) and /dev/shm, each
c.AutograderSandbox.notebook_seconds = 1800  # wall-clock time of the whole notebook; later cells are not run
