"""The formgrader's address, with its token, is printed only once JupyterLab alone listens on its port; and what
that token opens changes no file.

Any account of the machine can listen on a free port before JupyterLab binds it (the port is on JupyterLab's
command line, which every account can read in ``/proc``); an answer on the port then came from that account's
program, which would receive the token with the instructor's first request. So the command checks whose
socket listens there (:func:`autograder.formgrader.server.served_by`), by ``/proc/net/tcp`` and the process's
descriptors, and says that the formgrader did not start when it is not JupyterLab's alone. Its contents API
refuses every change (a page that runs script in its origin, or a leaked token, could otherwise write the
``nbgrader_config.py`` that every nbgrader command run in the folder executes).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

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


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("formgrader-port") / "course"
    made = run_module("autograder", "course", "--out", str(course), timeout=600)
    assert made.returncode == 0, made.stderr
    return course


@pytest.mark.slow
def test_the_formgrader_prints_no_token_when_another_program_holds_its_port(another_process_s_port, course,
                                                                             tmp_path):
    _, held = another_process_s_port
    environment = {**os.environ, "HOME": str(tmp_path), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                   "JUPYTER_TOKEN": "a-token-that-must-not-be-printed"}
    completed = subprocess.run(
        [sys.executable, "-m", "autograder", "formgrader", "--out", str(course), "--port", str(held), "--no-browser"],
        capture_output=True, text=True, timeout=300, env=environment, check=False,
    )
    assert completed.returncode != 0
    assert "a-token-that-must-not-be-printed" not in completed.stdout + completed.stderr
    assert f"another program may hold port {held}" in completed.stdout


def _request(url: str, token: str, method: str = "GET", body: dict | None = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.slow
def test_the_formgrader_s_token_reads_files_and_changes_none(course, tmp_path):
    token = "the-instructor-s-token"
    environment = {**os.environ, "HOME": str(tmp_path), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                   "JUPYTER_TOKEN": token}
    server = subprocess.Popen(
        [sys.executable, "-m", "autograder", "formgrader", "--out", str(course), "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=environment, start_new_session=True,
    )
    try:
        line = server.stdout.readline()
        assert "/formgrader?token=" in line, line
        base = line.split(": ", 1)[1].split("/formgrader?", 1)[0]
        config = (course / "nbgrader_config.py").read_bytes()
        status, text = _request(f"{base}/api/contents/nbgrader_config.py", token)
        assert status == 200 and json.loads(text)["type"] == "file"  # a control: the token reads
        changes = [
            ("PUT", "nbgrader_config.py", {"type": "file", "format": "text", "content": "import os"}),
            ("PUT", "new.py", {"type": "file", "format": "text", "content": "x = 1"}),
            ("POST", "", {"type": "file", "ext": ".py"}),  # a new untitled file
            ("POST", "", {"copy_from": "nbgrader_config.py"}),
            ("PATCH", "nbgrader_config.py", {"path": "moved.py"}),
            ("DELETE", "nbgrader_config.py", None),
            ("POST", "nbgrader_config.py/checkpoints", None),
        ]
        for method, path, body in changes:
            status, text = _request(f"{base}/api/contents/{path}", token, method, body or ({} if method != "DELETE"
                                                                                          else None))
            assert status == 403 and "read-only" in text, (method, path, status, text[:300])
        assert (course / "nbgrader_config.py").read_bytes() == config
        assert not {"new.py", "moved.py"} & {path.name for path in course.iterdir()}
        assert not any(path.name.startswith("untitled") for path in course.iterdir())
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
