"""The formgrader's address, with its token, is printed only once JupyterLab alone listens on its port.

Any account of the machine can listen on a free port before JupyterLab binds it (the port is on JupyterLab's
command line, which every account can read in ``/proc``); an answer on the port then came from that account's
program, which would receive the token with the instructor's first request. So the command checks whose
socket listens there (:func:`autograder.formgrader.server.served_by`), by ``/proc/net/tcp`` and the process's
descriptors, and says that the formgrader did not start when it is not JupyterLab's alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from planted import run_module

from autograder.formgrader.server import listening_sockets, served_by, socket_inodes

HOLDS_A_PORT = """
import socket, sys
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
print(listener.getsockname()[1], flush=True)
sys.stdin.read()  # until the test closes the pipe
"""


@pytest.fixture
def another_process_s_port():
    holder = subprocess.Popen([sys.executable, "-c", HOLDS_A_PORT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        yield holder, int(holder.stdout.readline())
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_port_is_served_by_the_process_whose_socket_listens_there(another_process_s_port):
    holder, held = another_process_s_port
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        port = mine.getsockname()[1]
        assert listening_sockets(port) and listening_sockets(port) <= socket_inodes(os.getpid())
        assert served_by(os.getpid(), port)
        assert not served_by(holder.pid, port)
        assert served_by(holder.pid, held) and not served_by(os.getpid(), held)
    assert not listening_sockets(port) and not served_by(os.getpid(), port)  # closed: nobody serves it


def test_a_bound_socket_that_does_not_listen_serves_nothing():
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        assert not listening_sockets(port) and not served_by(os.getpid(), port)


@pytest.mark.slow
def test_the_formgrader_prints_no_token_when_another_program_holds_its_port(another_process_s_port, tmp_path):
    _, held = another_process_s_port
    course = tmp_path / "course"
    made = run_module("autograder", "course", "--out", str(course), timeout=600)
    assert made.returncode == 0, made.stderr
    environment = {**os.environ, "HOME": str(tmp_path), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                   "JUPYTER_TOKEN": "a-token-that-must-not-be-printed"}
    completed = subprocess.run(
        [sys.executable, "-m", "autograder", "formgrader", "--out", str(course), "--port", str(held), "--no-browser"],
        capture_output=True, text=True, timeout=300, env=environment, check=False,
    )
    assert completed.returncode != 0
    assert "a-token-that-must-not-be-printed" not in completed.stdout + completed.stderr
    assert f"another program may hold port {held}" in completed.stdout
