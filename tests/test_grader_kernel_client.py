"""The grader's kernel client is ready when the kernel has answered on both channels, and nothing of the
kernel's start is left for the first cell.

Checked against a real ipykernel (the interpreter's own kernelspec, no sandbox) and against scripted channels
that play the late-joining IOPub and the stale messages of earlier requests, which a real kernel shows only
by chance.
"""

from __future__ import annotations

import asyncio
import sys
from queue import Empty

import pytest
from jupyter_client.kernelspec import KernelSpec

from autograder.sandbox import kernel_client
from autograder.sandbox.execute import CappedExecute
from autograder.sandbox.kernel_client import ReadyClient, ReapingKernelManager

ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def _manager(tmp_path, argv: list[str]) -> ReapingKernelManager:
    manager = ReapingKernelManager(kernel_name="under-test")
    manager._kernel_spec = KernelSpec(argv=argv, display_name="under test", language="python", env=ENV)
    manager.connection_file = str(tmp_path / "connection.json")
    return manager


def _ipykernel(tmp_path) -> ReapingKernelManager:
    return _manager(tmp_path, [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                               "--HistoryManager.enabled=False"])


async def _next_iopub(client, seconds: float = 30) -> dict:
    return await client.iopub_channel.get_msg(timeout=seconds)


def test_a_ready_kernel_s_iopub_holds_nothing_of_its_start(tmp_path):
    async def run():
        manager = _ipykernel(tmp_path)
        await manager.start_kernel()
        client = manager.client()
        assert isinstance(client, ReadyClient)
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            request = client.execute("print(6 * 7)")
            seen = []
            while True:
                message = await _next_iopub(client)
                seen.append((message["msg_type"], message["parent_header"].get("msg_id")))
                if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                    break
            # Every message on IOPub after the ready check belongs to the first request: no "starting"
            # status, no kernel_info status left over.
            assert {parent for _, parent in seen} == {request}, seen
            assert seen[0][0] == "status" and ("stream", request) in seen
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)
        assert not await manager.is_alive()

    asyncio.run(run())


def test_a_kernel_that_dies_at_its_start_is_an_error_not_a_wait(tmp_path):
    async def run():
        manager = _manager(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"])
        await manager.start_kernel()
        client = manager.client()
        client.start_channels()
        try:
            with pytest.raises(RuntimeError, match="died before replying"):
                await client.wait_for_ready(timeout=60)
        finally:
            client.stop_channels()
            await manager.cleanup_resources()

    asyncio.run(run())


def test_a_silent_kernel_times_out(tmp_path):
    async def run():
        manager = _manager(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"])
        await manager.start_kernel()
        client = manager.client()
        client.start_channels()
        try:
            with pytest.raises(RuntimeError, match="didn't respond in 1.5 seconds"):
                await client.wait_for_ready(timeout=1.5)
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)

    asyncio.run(run())


class ScriptedChannel:
    """A channel that answers get_msg from a list filled by the scripted kernel; Empty when it is empty."""

    def __init__(self):
        self.messages: list[dict] = []

    async def get_msg(self, timeout=None):
        if not self.messages:
            raise Empty
        return self.messages.pop(0)


def _message(kind: str, parent: str, **content) -> dict:
    return {"msg_type": kind, "parent_header": {"msg_id": parent}, "content": content}


class ScriptedClient(ReadyClient):
    """A ReadyClient whose kernel is a script: the IOPub subscription joins at request ``joins_at`` (the
    statuses of earlier requests are lost), and a stale reply and status of an older request come first."""

    def __init__(self, joins_at: int):
        super().__init__()
        self.joins_at = joins_at
        self.requests: list[str] = []
        self.shell = ScriptedChannel()
        self.iopub = ScriptedChannel()
        self.shell.messages.append(_message("kernel_info_reply", "an-older-client's-request"))
        self.iopub.messages.append(_message("status", "an-older-client's-request", execution_state="idle"))

    @property
    def shell_channel(self):
        return self.shell

    @property
    def iopub_channel(self):
        return self.iopub

    def kernel_info(self):
        request = f"request-{len(self.requests) + 1}"
        self.requests.append(request)
        self.shell.messages.append(_message("kernel_info_reply", request, status="ok",
                                            protocol_version="5.3", language_info={"name": "python"}))
        if len(self.requests) >= self.joins_at:
            for state in ("busy", "idle"):
                self.iopub.messages.append(_message("status", request, execution_state=state))
        return request

    async def _async_is_alive(self):
        return True

    def _handle_kernel_info_reply(self, msg):
        self.taken_reply = msg


@pytest.mark.parametrize("joins_at", [1, 2, 5])
def test_the_client_asks_again_until_iopub_carries_the_answer_to_its_own_request(joins_at):
    client = ScriptedClient(joins_at)
    asyncio.run(client.wait_for_ready(timeout=30))
    assert len(client.requests) == joins_at
    assert client.taken_reply["parent_header"]["msg_id"] == client.requests[-1]
    assert client.iopub.messages == []  # the statuses of the request it took were read, none left over


def test_an_iopub_that_never_joins_ends_in_a_timeout_not_a_loop():
    client = ScriptedClient(joins_at=10**9)
    with pytest.raises(RuntimeError, match="didn't respond"):
        asyncio.run(client.wait_for_ready(timeout=0.3))
    assert len(client.requests) >= 2


def test_the_killed_kernel_is_looked_for_at_the_reaping_interval(monkeypatch):
    pauses = []

    async def pause(seconds):
        pauses.append(seconds)

    alive = iter([True, True, False])
    manager = ReapingKernelManager()

    async def is_alive():
        return next(alive)

    monkeypatch.setattr(manager, "_async_is_alive", is_alive)
    monkeypatch.setattr(asyncio, "sleep", pause)  # jupyter_client's manager pauses through asyncio.sleep
    asyncio.run(manager._async_wait())
    assert pauses == [kernel_client.REAP_POLL_SECONDS] * 2


def test_the_grader_s_execute_uses_the_ready_client():
    execute = CappedExecute()
    assert execute.kernel_manager_class is ReapingKernelManager
    assert ReapingKernelManager().client_factory is ReadyClient
