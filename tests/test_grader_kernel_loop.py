"""A notebook run leaves nothing behind on an event loop: :func:`autograder.student.kernels.execute_in_own_loop`.

nbclient's own ``execute`` keeps one event loop for the thread. When handling a cell's output raises, the
kernel-alive poll of that run stays on the loop, fails during the next run (its client is gone) and is logged as
"Task exception was never retrieved" whenever the garbage collector reaches it; on Python 3.11 formatting that
log line parses source, which breaks an ``ast.parse`` the collector happened to interrupt. Both ways of running
are tried here on the same two notebooks: the first run's output handler raises, the second runs long enough for
a leftover poll to wake up.
"""

from __future__ import annotations

import gc
import logging

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.student.kernels import execute_in_own_loop


class _FailingOutputHandler(NotebookClient):
    def output(self, *arguments, **keywords):
        raise RuntimeError("the output handler failed")


def _notebook(source: str) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source)]
    return notebook


class _Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().splitlines()[0])


def _leftovers_logged(run) -> list[str]:
    """What asyncio logs, at the next collection, after ``run`` executed the two notebooks."""
    recorded = _Recorded()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(recorded)
    try:
        with pytest.raises(RuntimeError, match="the output handler failed"):
            run(_FailingOutputHandler(_notebook("print('an output')"), timeout=60, kernel_name="python3"))
        run(NotebookClient(_notebook("import time\ntime.sleep(2.5)"), timeout=60, kernel_name="python3"))
        gc.collect()
    finally:
        asyncio_log.removeHandler(recorded)
    return recorded.messages


@pytest.mark.slow
def test_a_failed_run_leaves_no_task_to_fail_later():
    assert _leftovers_logged(execute_in_own_loop) == []


@pytest.mark.slow
def test_nbclient_alone_leaves_its_kernel_poll_behind():
    # Why execute_in_own_loop exists: with nbclient's execute the same two runs leave a failed task.
    assert _leftovers_logged(NotebookClient.execute) == ["Task exception was never retrieved"]
