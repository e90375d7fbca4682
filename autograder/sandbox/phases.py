"""Where a submission's grading time goes: moments marked on the way, and the phases between them.

The worker and its grading stage mark moments on the machine's monotonic clock (``time.monotonic``), which
they share: bubblewrap gives the stage no time namespace of its own. The stage marks its moments in
:data:`MARKS` (:func:`mark`) and sends them with its answer; the worker adds its own, before it starts the
stage and after it has read and checked the answer, and :func:`phase_seconds` turns both into the seconds of
each of :data:`PHASES`. A submission that ends early (a file that is no notebook, a kernel that died) has the
phases whose two moments were marked. The stage's moments are checked like the rest of its answer: names from
:data:`STAGE_MARKS`, finite numbers, and a phase is kept only when its end comes after its start and both lie
inside the worker's own span, so a stage cannot claim a time that the worker did not see pass.
"""

from __future__ import annotations

import math
import time

WORKER_MARKS = ("begun", "spawned", "exited", "received", "done")
STAGE_MARKS = ("main", "imported", "read", "copied", "kernel_starting", "kernel_started", "cells_done",
               "autograded", "decided", "rebuilt", "page")
PHASES: tuple[tuple[str, str, str], ...] = (
    ("expected values", "begun", "spawned"),  # the worker's: this student's varied items, the control groups
    ("stage start-up", "spawned", "main"),  # a warm stage's fork and namespaces; a cold one's sandbox and Python
    ("stage imports", "main", "imported"),  # a cold stage's modules, nbgrader's converters (a warm one has them)
    ("read and repair", "imported", "read"),  # the notebook checked against its release
    ("course copy", "read", "copied"),
    ("nbgrader before the kernel", "copied", "kernel_starting"),
    ("kernel start", "kernel_starting", "kernel_started"),  # the sandboxed kernel, until it answers
    ("notebook cells", "kernel_started", "cells_done"),  # the student's code and the visible tests
    ("nbgrader after the cells", "cells_done", "autograded"),  # kernel shutdown, gradebook, saving
    ("verdicts", "autograded", "decided"),  # the hidden tests decided outside the kernel
    ("rebuilt outputs", "decided", "rebuilt"),
    ("feedback page", "rebuilt", "page"),
    ("stage exit", "page", "exited"),  # the answer written, the stage's processes ended, its sandbox gone
    ("answer check", "exited", "received"),  # the crossing's checks (autograder.sandbox.crossing)
    ("worker's files", "received", "done"),
)
"""Each phase as (name, the moment it starts, the moment it ends), in the order a submission goes through them."""

MARKS: dict[str, float] = {}
"""The moments this process marked (in the stage: one submission's)."""


def mark(name: str) -> None:
    """Mark the moment ``name`` now (a later mark of the same name replaces it)."""
    MARKS[name] = time.monotonic()


def checked_stage_marks(value: object) -> dict[str, float]:
    """The stage's marks as sent, or ValueError unless they are ``{name: finite number}`` with names from
    :data:`STAGE_MARKS`."""
    if not isinstance(value, dict) or not set(value) <= set(STAGE_MARKS):
        raise ValueError(f"the stage's marks must be an object with names among {list(STAGE_MARKS)}")
    if not all(type(moment) in (int, float) and math.isfinite(moment) for moment in value.values()):
        raise ValueError("the stage's marks must be finite numbers")
    return {name: float(moment) for name, moment in value.items()}


def phase_seconds(marks: dict[str, float]) -> dict[str, float]:
    """Seconds of each phase of :data:`PHASES` whose two moments are in ``marks`` and lie in order inside the
    worker's span (``begun`` to ``done``), in the order of :data:`PHASES`."""
    first, last = marks.get("begun"), marks.get("done")
    if first is None or last is None:
        return {}
    seconds = {}
    for name, start, end in PHASES:
        if start in marks and end in marks and first <= marks[start] <= marks[end] <= last:
            seconds[name] = round(marks[end] - marks[start], 4)
    return seconds
