"""Knowing when a kernel is ready, and when it has ended, without waiting out fixed timeouts.

jupyter_client's client decides that a new kernel is ready when it has answered a ``kernel_info_request`` on
the shell channel and one message of any kind has come on IOPub within 0.2 s (the publisher drops what it
sends before the subscriber is connected); it then reads IOPub until it has been silent for another 0.2 s. So
every kernel costs 0.2 s of waiting after it is ready, and 0.2 s more each time IOPub joined late. Its
manager, asked to kill a kernel, looks whether the process has ended every 0.1 s.

:class:`ReadyClient` waits for what the kernel sends in answer to its own request instead: for the request
numbered ``n``,

    ready  <=>  shell carries the reply whose parent is n,  and  IOPub carries ``status: idle`` whose parent is n.

A kernel publishes ``busy``, then the reply, then ``idle`` for every request, in that order on IOPub. Once
the idle of request n has arrived, the subscriber was connected before the kernel finished n, and everything
the kernel published before (its ``starting`` status, earlier requests' statuses) has been read: nothing of
the start is left to flush. When the idle does not come within :data:`IOPUB_JOIN_SECONDS` (IOPub joined after
the kernel published it), the client sends a new request; replies and statuses of older requests are passed
over by their parent. The kernel's answers decide, not the clock, so a busy machine costs retries, not
errors.

:class:`ReapingKernelManager` looks for the killed kernel's end every :data:`REAP_POLL_SECONDS`.
"""

from __future__ import annotations

import time
from queue import Empty

from jupyter_client import AsyncKernelManager
from jupyter_client.asynchronous import AsyncKernelClient
from traitlets import DottedObjectName, Type

SHELL_REPLY_SECONDS = 1.0  # as jupyter_client waits for each reply before it asks again
IOPUB_JOIN_SECONDS = 0.05  # after the reply, for the idle status that shows IOPub is connected
REAP_POLL_SECONDS = 0.005


class ReadyClient(AsyncKernelClient):
    """An asynchronous kernel client whose :meth:`wait_for_ready` returns when the kernel has answered a
    ``kernel_info_request`` on both the shell channel and IOPub."""

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            request = self.kernel_info()
            reply = await self._reply_to(request, deadline)
            if reply is not None and await self._idle_after(request):
                self._handle_kernel_info_reply(reply)
                return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")

    async def _reply_to(self, request: str, deadline: float | None) -> dict | None:
        """The shell's reply to ``request``, or None when none came within :data:`SHELL_REPLY_SECONDS`."""
        waited_until = time.monotonic() + SHELL_REPLY_SECONDS
        if deadline is not None:
            waited_until = min(waited_until, deadline)
        while (left := waited_until - time.monotonic()) > 0:
            try:
                message = await self.shell_channel.get_msg(timeout=left)
            except Empty:
                return None
            if message["parent_header"].get("msg_id") == request and message["msg_type"] == "kernel_info_reply":
                return message
        return None

    async def _idle_after(self, request: str) -> bool:
        """Whether IOPub carries the kernel's ``idle`` for ``request`` within :data:`IOPUB_JOIN_SECONDS`."""
        waited_until = time.monotonic() + IOPUB_JOIN_SECONDS
        while (left := waited_until - time.monotonic()) > 0:
            try:
                message = await self.iopub_channel.get_msg(timeout=left)
            except Empty:
                return False
            if (
                message["msg_type"] == "status"
                and message["parent_header"].get("msg_id") == request
                and message["content"].get("execution_state") == "idle"
            ):
                return True
        return False


class ReapingKernelManager(AsyncKernelManager):
    """An asynchronous kernel manager whose clients are :class:`ReadyClient` and which sees a killed kernel's
    end within :data:`REAP_POLL_SECONDS`."""

    client_class = DottedObjectName("autograder.sandbox.kernel_client.ReadyClient")
    client_factory = Type(ReadyClient, klass=AsyncKernelClient)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        await super()._async_wait(pollinterval=min(pollinterval, REAP_POLL_SECONDS))
