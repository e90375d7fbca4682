"""A formgrader view made in a child process, under the grading stage's limits (:mod:`autograder.formgrader.views`).

:func:`render_view` runs ``python -m autograder.formgrader.rendering``, as ``feedback`` renders a hand-graded
page (:mod:`autograder.feedback.limited`):

- the child has the grading stage's address-space and file-size limits and :data:`VIEW_SECONDS` of CPU time
  (:func:`view_limits`); it sets them itself, before it reads the notebook, for its parent is a server with
  threads of its own, which runs nothing between fork and exec;
- its process group is killed past :data:`VIEW_SECONDS` of wall clock, and its answer (the page) is read up to
  the stage's response cap (:func:`autograder.sandbox.stage.run_stage`).

The child reads one JSON request on standard input (the notebook's path, the page's resources, the exporter's
settings, the limits) and writes the page on standard output. Before rendering, it cleans the notebook's HTML
once more (:func:`autograder.feedback.outputs.cleaned_again`: the crossing checked the notebook's shape, not
its HTML).
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import sys
from pathlib import Path

from autograder import REPOSITORY
from autograder.sandbox.launcher import Limits

# What the child keeps of the server's environment: where programs, its home, its locale and Jupyter's data lie.
PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "JUPYTER_PATH", "JUPYTER_DATA_DIR",
                  "JUPYTER_CONFIG_DIR")
VIEW_SECONDS = 60  # CPU and wall clock of one view: nbconvert's start and one page take 1 to 3 s
MAX_REQUEST_BYTES = 1024 * 1024


class RenderFailed(RuntimeError):
    """A view that was not made, with the reason."""


def view_limits(limits: Limits) -> None:
    """The child's limits: the grading stage's for ``limits`` (address space, file size, no core files), with
    its CPU time held to :data:`VIEW_SECONDS`."""
    from autograder.sandbox.stage import set_stage_limits

    set_stage_limits(limits)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu = VIEW_SECONDS if hard == resource.RLIM_INFINITY else min(VIEW_SECONDS, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


def render_view(notebook: Path, resources: dict, exporter_settings: dict, limits: Limits,
                seconds: float = VIEW_SECONDS) -> str:
    """The formgrader's page of ``notebook`` (nbconvert's ``HTMLExporter`` with ``exporter_settings``, given
    ``resources``), made in a child process under :func:`view_limits` and ``seconds`` of wall clock.

    Raises:
        RenderFailed: the child was stopped (time, memory, CPU), failed, or answered nothing usable.
    """
    from autograder.sandbox.stage import run_stage

    request = json.dumps({"notebook": str(notebook), "resources": resources, "exporter": exporter_settings,
                          "limits": vars(limits)}).encode()
    # From an allowlist: the server's own environment holds its token (JUPYTER_TOKEN), which no renderer needs.
    environment = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    environment["PYTHONPATH"] = str(REPOSITORY)
    outcome = run_stage(request, [sys.executable, "-m", "autograder.formgrader.rendering"], environment, limits,
                        cwd=str(REPOSITORY), seconds=seconds, limits_before_exec=False, activity="rendering")
    if outcome.stopped:
        raise RenderFailed(outcome.stopped)
    if outcome.returncode == -signal.SIGXCPU:
        raise RenderFailed(f"rendering used its {VIEW_SECONDS} seconds of CPU time and was stopped")
    if outcome.returncode != 0 or not outcome.response:
        raise RenderFailed(f"the renderer ended with code {outcome.returncode} ({_exception_name(outcome.errors)})")
    return outcome.response.decode("utf-8")


def _exception_name(errors: bytes) -> str:
    """The exception a traceback ends with, by its name only: the rest of its last line may quote the notebook
    (a student's bytes), which goes neither to the page nor to the server's log."""
    last = errors.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    name = last[0].split(":", 1)[0].strip()
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,99}", name) else "no exception named"


def main() -> int:
    """The child: one request in, its limits set, one page out."""
    request = json.loads(sys.stdin.buffer.read(MAX_REQUEST_BYTES))
    view_limits(Limits(**request["limits"]))
    import nbformat
    from nbconvert.exporters import HTMLExporter

    from autograder.feedback.outputs import cleaned_again

    notebook_path = Path(request["notebook"])
    notebook = cleaned_again(nbformat.read(notebook_path, as_version=4))
    resources = {**request["resources"], "metadata": {"name": notebook_path.stem, "path": str(notebook_path.parent)}}
    exporter = HTMLExporter(**request["exporter"])
    page, _ = exporter.from_notebook_node(notebook, resources=resources)
    sys.stdout.buffer.write(page.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
