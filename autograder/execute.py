"""nbgrader's Execute with a cap on the bytes of output a cell may send to the grader.

nbgrader's ``LimitOutput`` trims a cell's stream output to a number of lines once the notebook has run; by
then a single line of a gigabyte has already been received and held in the grader's memory. Here the cap
applies while the cell runs, to what arrives:

- every message from the kernel larger than ``max_message_bytes`` is refused by ZeroMQ before it is read
  (``ZMQ_MAXMSGSIZE`` on every socket of the kernel's client);
- a cell keeps its outputs (streams, displays, results, errors) until they add up to ``max_output_bytes``;
  what comes after is dropped, and one line says so in the cell's output (and so in the feedback page).
"""

from __future__ import annotations

import json

import zmq
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

OUTPUT_MESSAGES = frozenset({"stream", "display_data", "execute_result", "update_display_data", "error"})
MIN_MESSAGE_BYTES = 16 * 1024 * 1024


def content_bytes(content: dict) -> int:
    """The size of an output message's content: its text, data and traceback, as JSON."""
    return len(json.dumps(content, default=str).encode())


def cut_notice(limit: int) -> str:
    return f"[the grader cut this cell's output here: it was over {limit} bytes]\n"


class CappedExecute(Execute):
    """Execute a notebook, keeping at most ``max_output_bytes`` of output per cell."""

    max_output_bytes = Integer(
        1024 * 1024, help="bytes of output a cell keeps; what comes after is dropped (0: no limit)"
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._received_bytes: dict[int, int] = {}  # by cell index
        return super().preprocess(nb, resources, km)

    def create_kernel_manager(self):
        manager = super().create_kernel_manager()
        limit = max(MIN_MESSAGE_BYTES, 2 * self.max_output_bytes) if self.max_output_bytes else -1
        # Default options of the sockets this context creates next: the client's channels.
        manager.context.setsockopt(zmq.MAXMSGSIZE, limit)
        return manager

    def process_message(self, msg, cell, cell_index):
        if not self.max_output_bytes or msg["msg_type"] not in OUTPUT_MESSAGES:
            return super().process_message(msg, cell, cell_index)
        used = self._received_bytes.get(cell_index, 0)
        if used > self.max_output_bytes:
            return None
        used += content_bytes(msg["content"])
        self._received_bytes[cell_index] = used
        if used > self.max_output_bytes:
            # A display, not a stream: nbgrader's LimitOutput may drop streams past its line limit.
            notice = new_output("display_data", data={"text/plain": cut_notice(self.max_output_bytes)})
            cell.outputs.append(notice)
            return notice
        return super().process_message(msg, cell, cell_index)
