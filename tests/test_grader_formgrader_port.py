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
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from planted import run_module

from autograder.formgrader.server import listening_sockets, served_by, socket_inodes

LOOPBACK = "127.0.0.1"
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
        assert listening_sockets(port, LOOPBACK) and listening_sockets(port, LOOPBACK) <= socket_inodes(os.getpid())
        assert served_by(os.getpid(), LOOPBACK, port)
        assert not served_by(holder.pid, LOOPBACK, port)
        assert served_by(holder.pid, LOOPBACK, held) and not served_by(os.getpid(), LOOPBACK, held)
        assert not served_by(os.getpid(), "127.0.0.2", port)  # nothing listens at that address
    assert not listening_sockets(port, LOOPBACK) and not served_by(os.getpid(), LOOPBACK, port)  # closed


def test_a_bound_socket_that_does_not_listen_serves_nothing():
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        assert not listening_sockets(port, LOOPBACK) and not served_by(os.getpid(), LOOPBACK, port)


def test_a_listener_at_another_address_of_the_port_is_not_counted_but_one_at_every_address_is(
        another_process_s_port):
    """Round 28: a student listening at [::1] or 127.0.0.2 on the formgrader's port takes none of its
    connections, and stopped it for good when it was counted; one at 0.0.0.0 would take them, and counts."""
    holder, _ = another_process_s_port
    with socket.socket() as mine:
        mine.bind((LOOPBACK, 0))
        mine.listen()
        port = mine.getsockname()[1]
        others = []
        try:
            for family, address in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.2")):
                other = socket.socket(family)
                other.bind((address, port))
                other.listen()
                others.append(other)
            assert served_by(os.getpid(), LOOPBACK, port)
            assert listening_sockets(port, "::1") == {os.fstat(others[0].fileno()).st_ino}
            assert listening_sockets(port, "127.0.0.2") == {os.fstat(others[1].fileno()).st_ino}
        finally:
            for other in others:
                other.close()
    with socket.socket() as everywhere:
        everywhere.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        everywhere.bind(("0.0.0.0", 0))
        everywhere.listen()
        wildcard = everywhere.getsockname()[1]
        assert listening_sockets(wildcard, LOOPBACK) == {os.fstat(everywhere.fileno()).st_ino}
        assert not served_by(holder.pid, LOOPBACK, wildcard)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("formgrader-port") / "course"
    made = run_module("autograder", "course", "--out", str(course), timeout=600)
    assert made.returncode == 0, made.stderr
    return course


class Formgrader:
    """``python -m autograder formgrader --out COURSE --no-browser [--port PORT]``, its log in a file."""

    def __init__(self, course: Path, home: Path, port: int | None = None) -> None:
        home.mkdir(exist_ok=True)
        self.log = home / "formgrader.log"
        command = [sys.executable, "-m", "autograder", "formgrader", "--out", str(course), "--no-browser"]
        self.process = subprocess.Popen(
            [*command, *(["--port", str(port)] if port else [])], stdout=subprocess.PIPE,
            stderr=self.log.open("wb"), text=True, env={**os.environ, "HOME": str(home)}, start_new_session=True,
        )  # fmt: skip
        self.first_line = self.process.stdout.readline()

    @property
    def url(self) -> str:
        assert "/formgrader?token=" in self.first_line, self.first_line
        return self.first_line.split(": ", 1)[1].strip()

    @property
    def base(self) -> str:
        return self.url.split("formgrader?", 1)[0]  # http://127.0.0.1:PORT/<random>/

    @property
    def token(self) -> str:
        return self.url.rsplit("token=", 1)[1]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
        self.process.wait(timeout=60)


@pytest.mark.slow
def test_the_formgrader_prints_no_token_when_another_program_holds_its_port(another_process_s_port, course,
                                                                             tmp_path):
    _, held = another_process_s_port
    server = Formgrader(course, tmp_path / "home", port=held)
    server.stop()
    assert server.process.returncode != 0
    assert "token" not in server.first_line and f"another program may hold port {held}" in server.first_line


def _request(url: str, token: str | None = None, method: str = "GET", body: dict | None = None,
             cookie: str | None = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"token {token}"} if token else {}
    if cookie:
        headers["Cookie"] = cookie
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.slow
def test_the_formgrader_s_token_reads_files_and_changes_none(course, tmp_path):
    server = Formgrader(course, tmp_path / "home")
    try:
        base, token = server.base, server.token
        config = (course / "nbgrader_config.py").read_bytes()
        status, text = _request(f"{base}api/contents/nbgrader_config.py", token)
        assert status == 200 and json.loads(text)["type"] == "file"  # a control: the token reads
        changes = [
            ("PUT", "nbgrader_config.py", {"type": "file", "format": "text", "content": "import os"}),
            ("PUT", "new.py", {"type": "file", "format": "text", "content": "x = 1"}),
            ("POST", "", {"type": "file", "ext": ".py"}),  # a new untitled file
            ("POST", "", {"copy_from": "nbgrader_config.py"}),
            ("PATCH", "nbgrader_config.py", {"path": "moved.py"}),
            ("DELETE", "nbgrader_config.py", None),
            ("POST", "nbgrader_config.py/checkpoints", {}),
        ]
        for method, path, body in changes:
            status, text = _request(f"{base}api/contents/{path}", token, method, body)
            assert status == 403 and "read-only" in text, (method, path, status, text[:300])
        assert (course / "nbgrader_config.py").read_bytes() == config
        assert not {"new.py", "moved.py"} & {path.name for path in course.iterdir()}
        assert not any(path.name.startswith("untitled") for path in course.iterdir())
    finally:
        server.stop()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _login_cookies(server: Formgrader) -> list[str]:
    """The cookies the server sets when a browser opens the printed address (its token, once)."""
    opener = urllib.request.build_opener(NoRedirect)
    try:
        answer = opener.open(server.url, timeout=60)
    except urllib.error.HTTPError as error:  # the redirect, not followed
        answer = error
    return answer.headers.get_all("Set-Cookie") or []


@pytest.mark.slow
def test_a_login_cookie_is_limited_to_its_run_s_path_and_opens_no_later_run(course, tmp_path):
    """Round 28: browsers send a host's cookies to every port of it. A login cookie of this server is limited
    to a path drawn for its run and signed by a secret of its run, so no other program's port receives it by a
    link or an old tab, and a later run on the same port refuses it."""
    first = Formgrader(course, tmp_path / "first")
    try:
        path = "/" + first.base.split("/", 3)[3].rstrip("/")  # the cookie path: the base without its slash
        cookies = _login_cookies(first)
        login = [cookie for cookie in cookies if cookie.startswith("username-")]
        assert login and all(f"Path={path}" in cookie for cookie in cookies), cookies
        assert len(path) == len("/0123456789abcdef")  # 16 hexadecimal digits drawn for the run
        cookie = login[0].split(";", 1)[0]
        assert _request(f"{first.base}api/contents", cookie=cookie)[0] == 200  # a control: it logs in
        port = int(first.base.split(":")[2].split("/")[0])
    finally:
        first.stop()
    second = Formgrader(course, tmp_path / "second", port=port)
    try:
        assert second.base != first.base
        assert _request(f"{second.base}api/contents", cookie=cookie)[0] == 403  # signed by the first run's secret
        assert _request(f"{second.base}api/contents", second.token)[0] == 200
        assert _request(f"{second.base}api/contents", first.token)[0] == 403
    finally:
        second.stop()


@pytest.mark.slow
def test_the_server_s_log_reaches_the_terminal_escaped(course, tmp_path):
    """Round 28: tornado refuses ESC and BEL in a request line but logs the 8-bit controls (CSI is 0x9b), which
    any account that reaches the port could send to the instructor's terminal."""
    server = Formgrader(course, tmp_path / "home")
    try:
        host, port = server.base.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            connection.sendall(b"GET /\x9b2J\x9d0;forged\x9c HTTP/1.1\r\nHost: x\r\n\r\n")
            connection.recv(65536)
    finally:
        server.stop()
    log = server.log.read_bytes()
    assert b"\\x9b2J" in log or b"%C2%9B2J" in log or b"\\u009b" in log, log[-2000:]
    assert not any(byte in log for byte in (b"\x9b", b"\x9d", b"\xc2\x9b")), log[-2000:]


# ---------------------------------------------------------------------------------------------------------
# Only the grading accounts' connections (round 29: a cookie or token stolen by another account is useless)
# ---------------------------------------------------------------------------------------------------------

AS_ANOTHER_ACCOUNT = """
import socket, sys
connection = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
connection.sendall(("GET " + sys.argv[3] + " HTTP/1.1\\r\\nHost: " + sys.argv[1] + ":" + sys.argv[2]
                    + "\\r\\nAuthorization: token " + sys.argv[4]
                    + "\\r\\nConnection: close\\r\\n\\r\\n").encode())
answer = b""
try:
    while chunk := connection.recv(65536):
        answer += chunk
except ConnectionResetError:  # closed with the request unread
    pass
print(repr(answer[:200]))
"""
SYSTEM_PYTHON = Path("/usr/bin/python3")
NOBODY = 65534


def test_a_connection_s_owner_is_the_account_of_the_process_that_made_it():
    from autograder.formgrader.peers import allowed_accounts, connection_owner

    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen()
        with socket.create_connection(listener.getsockname(), timeout=30) as client:
            accepted, address = listener.accept()
            with accepted:
                assert address == client.getsockname()
                assert connection_owner(address, accepted.getsockname()) == os.getuid()
                assert connection_owner(address, ("127.0.0.2", accepted.getsockname()[1])) is None
    assert allowed_accounts({"SUDO_UID": "1234"}) == {os.getuid(), 0, 1234}
    assert allowed_accounts({"SUDO_UID": "x"}) == {os.getuid(), 0}


def test_a_connection_s_owner_is_asked_of_the_kernel_not_read_from_a_table_that_any_account_can_lengthen(
        monkeypatch):
    """Round 30: reading all of /proc/net/tcp for every connection cost 0.26 s of the server's only thread once a
    student held 18,000 connections, and a flood of connections then kept the formgrader from answering."""
    from autograder.formgrader import peers

    def no_table(*arguments):
        raise AssertionError("the table was read")

    monkeypatch.setattr(peers, "tcp_sockets", no_table)
    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen()
        with socket.socket(socket.AF_INET6) as mapped:  # an IPv6 socket connected to an IPv4 address
            mapped.connect(("::ffff:127.0.0.1", listener.getsockname()[1]))
            accepted, address = listener.accept()
            with accepted:
                assert peers.connection_owner(address, accepted.getsockname()) == os.getuid()


SENDS_AND_CLOSES = """
import socket, sys
connection = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
connection.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
connection.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists() or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root, setpriv and the system's python3 to connect as another account")
def test_a_connection_closed_before_it_is_checked_has_no_owner_though_the_kernel_s_table_says_root():
    """Round 30: another account connected, sent its request and closed before the server looked the connection
    up; the kernel lists such a socket (time-wait) with uid 0, root's, which the formgrader answers: a burst of
    such requests (with a stolen token) changed the gradebook."""
    from autograder.formgrader.peers import connection_owner, tcp_sockets

    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen()
        port = listener.getsockname()[1]
        sent = subprocess.run(
            ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(SYSTEM_PYTHON),
             "-c", SENDS_AND_CLOSES, LOOPBACK, str(port)],
            capture_output=True, text=True, timeout=120, check=False, cwd="/",
        )
        assert sent.returncode == 0, sent.stderr
        accepted, address = listener.accept()  # after the client closed: its request waits, unread
        with accepted:
            assert accepted.recv(4) == b"GET "
            assert connection_owner(address, accepted.getsockname()) is None  # closed, held by no process
            deadline = time.monotonic() + 30
            while (rows := [(state, uid, inode) for local, remote, state, uid, inode in tcp_sockets()
                            if (str(local[0]), local[1]) == address and remote[1] == port]) != [("05", 0, 0)]:
                assert time.monotonic() < deadline, rows  # (an orphan first, with its maker's uid)
                time.sleep(0.05)
            # what /proc/net/tcp says of it now: a time-wait socket (fin-wait-2), root's
            assert connection_owner(address, accepted.getsockname()) is None


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists() or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root, setpriv and the system's python3 to connect as another account")
def test_the_formgrader_answers_its_own_account_and_closes_another_s_connection_with_the_token(course, tmp_path):
    server = Formgrader(course, tmp_path / "home")
    try:
        where = urllib.parse.urlsplit(server.base)
        path = f"{where.path}api/contents"
        assert _request(f"{server.base}api/contents", server.token)[0] == 200  # the instructor's own account
        arguments = ["-c", AS_ANOTHER_ACCOUNT, where.hostname, str(where.port), path, server.token]
        control = subprocess.run([str(SYSTEM_PYTHON), *arguments], capture_output=True, text=True, timeout=120,
                                 check=False, cwd="/")
        assert control.stdout[2:].startswith("HTTP/1.1 200"), (control.stdout, control.stderr)  # the script works
        completed = subprocess.run(
            ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(SYSTEM_PYTHON),
             "-c", AS_ANOTHER_ACCOUNT, where.hostname, str(where.port), path, server.token],
            capture_output=True, text=True, timeout=120, check=False, cwd="/",
        )
        assert completed.stdout.strip() == "b''", (completed.stdout, completed.stderr)  # closed, no answer
        again = subprocess.run(
            ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(SYSTEM_PYTHON),
             "-c", AS_ANOTHER_ACCOUNT, where.hostname, str(where.port), path, server.token],
            capture_output=True, text=True, timeout=120, check=False, cwd="/",
        )
        assert again.stdout.strip() == "b''", (again.stdout, again.stderr)
    finally:
        server.stop()
    log = server.log.read_text()
    assert "the formgrader answers connections of the user IDs" in log
    assert log.count(f"closed a connection of user ID {NOBODY}, which is not among") == 1  # named once, not twice
    assert f"closed a connection of user ID {os.getuid()}," not in log


@pytest.mark.slow
def test_the_server_installs_no_package_writes_nothing_for_its_user_and_releases_nothing(course, tmp_path):
    home = tmp_path / "home"
    earlier = set(Path(tempfile.gettempdir()).glob("autograder-formgrader-*/settings"))  # of servers killed before
    server = Formgrader(course, home)
    try:
        base, token = server.base, server.token
        for command, refused in (("install", "installation not supported"), ("uninstall", "removal not supported")):
            status, text = _request(f"{base}lab/api/extensions?refresh=0", token, "POST",
                                    {"cmd": command, "extension_name": "nbgrader"})
            # JupyterLab's read-only manager: blocked before, or refused by, the manager; pip never runs
            assert (status == 422 and "was blocked" in text) or (status == 500 and refused in text), (
                command, status, text)
        status, _ = _request(f"{base}lab/api/settings/@jupyterlab/apputils-extension:themes", token, "PUT",
                             {"raw": '{"theme": "JupyterLab Dark"}'})
        assert status in (200, 204)  # a control: the settings service takes it...
        assert not (home / ".jupyter").exists()  # ...into the run's own folder, not the instructor's home
        status, text = _request(f"{base}formgrader/api/assignment/04_relative/release", token, "POST", {})
        assert status == 403 and "release_assignment" in text
    finally:
        server.stop()
    assert set(Path(tempfile.gettempdir()).glob("autograder-formgrader-*/settings")) <= earlier  # removed with the run
    assert "Extension Manager is 'readonly'" in server.log.read_text()
