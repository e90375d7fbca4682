"""nbgrader's Execute with caps on the bytes every kind of kernel message may bring to the grader.

nbgrader's ``LimitOutput`` trims a cell's stream output to a number of lines once the notebook has run; by
then a single line of a gigabyte has already been received and held in the grader's memory. Here the caps
apply while the notebook runs, to what arrives, whatever its type:

- every message from the kernel larger than ``max_message_bytes`` is refused by ZeroMQ before it is read
  (``ZMQ_MAXMSGSIZE`` on every socket of the kernel's client);
- outputs (streams, displays, results, errors, display updates): a cell keeps them until they add up to
  ``max_output_bytes``, and the notebook until they add up to ``max_notebook_bytes``; what comes after is
  dropped, and one line per cell says so in its output (and so on the feedback page);
- widget messages (``comm_open``, ``comm_msg``, ``comm_close``, with their binary buffers) count towards the
  notebook's cap too; past it they are dropped;
- the reports of the hidden tests (display data of :data:`autograder.verdict.REPORT_MIME`) have a budget of
  their own per cell, so that a flood of output cannot crowd out a test's report, nor a flood of forged
  reports the grader's memory;
- the messages that drive execution (``status``, ``execute_input``, ``clear_output``) always pass: their
  content is small and nbclient needs them to know when a cell is done; so do errors, cut to
  :data:`MAX_ERROR_CHARS` of name and message and the last :data:`MAX_TRACEBACK_LINES` lines of traceback,
  since nbgrader fails a test cell by its error.

Sizes are those of a message's content as JSON plus its binary buffers (:func:`message_bytes`).

Kernels are started and ended by :mod:`autograder.sandbox.kernel_client`: ready as soon as they have answered,
reaped as soon as they have ended.

Time: besides nbgrader's cap per cell, the whole notebook runs for at most ``notebook_seconds`` of wall-clock
time. A cell never waits longer than what is left; once nothing is left, the code cells after it are not run,
each gets an error output that says so (a test cell not run fails, as a cell that raised does), and
:data:`NOTEBOOK_CAP_MARK` in the log tells the grader to say so on the feedback page and in report.txt.
"""

from __future__ import annotations

import json
import time

import zmq
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

from autograder.sandbox import phases
from autograder.verdicts.verdict import REPORT_MIME

OUTPUT_MESSAGES = frozenset({"stream", "display_data", "execute_result", "update_display_data", "error"})
COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})
MIN_MESSAGE_BYTES = 16 * 1024 * 1024
REPORT_BYTES_PER_CELL = 1024 * 1024
MAX_ERROR_CHARS = 2000
MAX_TRACEBACK_LINES = 30
NOTEBOOK_CAP_MARK = "autograder: the notebook reached its wall-clock cap"


def message_bytes(msg: dict) -> int:
    """The size of a message: its content as JSON, and its binary buffers."""
    buffers = msg.get("buffers") or []
    return len(json.dumps(msg.get("content", {}), default=str).encode()) + sum(len(b) for b in buffers)


def content_bytes(content: dict) -> int:
    """The size of an output message's content: its text, data and traceback, as JSON."""
    return message_bytes({"content": content})


def cut_notice(limit: int, scope: str = "this cell's output") -> str:
    return f"[the grader cut {scope} here: it was over {limit} bytes]\n"


def _shortened_error(msg: dict) -> dict:
    """An error message whose name, value and traceback are cut to a readable size."""
    content = dict(msg.get("content", {}))
    for key in ("ename", "evalue"):
        content[key] = str(content.get(key, ""))[:MAX_ERROR_CHARS]
    traceback = content.get("traceback")
    lines = traceback if isinstance(traceback, list) else []
    content["traceback"] = [str(line)[:MAX_ERROR_CHARS] for line in lines[-MAX_TRACEBACK_LINES:]]
    return {**msg, "content": content}


def _is_report(msg: dict) -> bool:
    data = msg.get("content", {}).get("data")
    return msg["msg_type"] == "display_data" and isinstance(data, dict) and set(data) == {REPORT_MIME}


class CappedExecute(Execute):
    """Execute a notebook, keeping at most ``max_output_bytes`` of output per cell and
    ``max_notebook_bytes`` of output and widget messages in all."""

    max_output_bytes = Integer(
        1024 * 1024, help="bytes of output a cell keeps; what comes after is dropped (0: no limit)"
    ).tag(config=True)
    max_notebook_bytes = Integer(
        4 * 1024 * 1024,
        help="bytes of output and widget messages the notebook keeps in all; what comes after is dropped (0: no limit)",
    ).tag(config=True)

    notebook_seconds = Integer(
        0, help="wall-clock seconds the whole notebook may run; the code cells after are not run (0: no limit)"
    ).tag(config=True)

    def __init__(self, *args, **kwargs):
        from autograder.sandbox.kernel_client import ReapingKernelManager

        kwargs.setdefault("kernel_manager_class", ReapingKernelManager)  # before nbgrader's own default
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_seconds if self.notebook_seconds else None
        self._cap_reported = False
        self._cell_bytes: dict[int, int] = {}  # output received, by cell index
        self._report_bytes: dict[int, int] = {}
        self._notebook_bytes = 0
        self._noticed: set[int] = set()
        return super().preprocess(nb, resources, km)

    def _seconds_left(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = self._seconds_left()
        if left is None:
            return timeout
        left = max(1, int(left) + 1)
        return left if timeout is None else min(timeout, left)

    def preprocess_cell(self, cell, resources, index):
        left = self._seconds_left()
        if cell.cell_type == "code" and left is not None and left <= 0:
            if not self._cap_reported:
                self.log.error(NOTEBOOK_CAP_MARK + " (%is)", self.notebook_seconds)
                self._cap_reported = True
            text = f"this cell was not run: the notebook ran for its {self.notebook_seconds} seconds in all"
            cell.outputs = [new_output("error", ename="NotebookTimeCap", evalue=text, traceback=[text])]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        finally:
            phases.mark("cells_done")  # the last cell's end, before the kernel is shut down

    def start_new_kernel(self, **kwargs):
        phases.mark("kernel_starting")
        return super().start_new_kernel(**kwargs)

    def start_new_kernel_client(self):
        client = super().start_new_kernel_client()
        phases.mark("kernel_started")
        return client

    def create_kernel_manager(self):
        manager = super().create_kernel_manager()
        limit = max(MIN_MESSAGE_BYTES, 2 * self.max_output_bytes) if self.max_output_bytes else -1
        # Default options of the sockets this context creates next: the client's channels.
        manager.context.setsockopt(zmq.MAXMSGSIZE, limit)
        return manager

    def _over(self, used: int, limit: int) -> bool:
        return bool(limit) and used > limit

    def _notice(self, cell, cell_index: int, text: str):
        if cell_index in self._noticed:
            return None
        self._noticed.add(cell_index)
        # A display, not a stream: nbgrader's LimitOutput may drop streams past its line limit.
        notice = new_output("display_data", data={"text/plain": text})
        cell.outputs.append(notice)
        return notice

    def process_message(self, msg, cell, cell_index):
        kind = msg["msg_type"]
        if kind == "error":
            msg = _shortened_error(msg)
            self._notebook_bytes += message_bytes(msg)
            return super().process_message(msg, cell, cell_index)
        if kind not in OUTPUT_MESSAGES and kind not in COMM_MESSAGES:
            return super().process_message(msg, cell, cell_index)
        size = message_bytes(msg)
        if _is_report(msg):
            used = self._report_bytes.get(cell_index, 0) + size
            self._report_bytes[cell_index] = used
            return None if used > REPORT_BYTES_PER_CELL else super().process_message(msg, cell, cell_index)
        if self._over(self._notebook_bytes, self.max_notebook_bytes):
            if kind in OUTPUT_MESSAGES:
                return self._notice(cell, cell_index, cut_notice(self.max_notebook_bytes, "the notebook's output"))
            return None
        self._notebook_bytes += size
        if kind in COMM_MESSAGES:
            return None if self._over(self._notebook_bytes, self.max_notebook_bytes) else super().process_message(
                msg, cell, cell_index
            )
        used = self._cell_bytes.get(cell_index, 0) + size
        self._cell_bytes[cell_index] = used
        if self._over(used, self.max_output_bytes):
            return self._notice(cell, cell_index, cut_notice(self.max_output_bytes))
        if self._over(self._notebook_bytes, self.max_notebook_bytes):
            return self._notice(cell, cell_index, cut_notice(self.max_notebook_bytes, "the notebook's output"))
        return super().process_message(msg, cell, cell_index)
