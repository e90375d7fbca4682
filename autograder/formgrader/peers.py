"""The formgrader answers only connections made by the accounts that may grade: no other account of the machine
can talk to it, whatever it holds.

A login cookie is a bearer secret, and browsers send a host's cookies to every port of it: any program on another
port of ``127.0.0.1`` that the instructor's browser reaches (a link in a student's answer, a tab left open on an
old formgrader's address that the program now holds) receives the formgrader's cookie, and a path that scopes it
is no secret (the server's own 404 page names it). So the server does not rely on the secret alone: on the
loopback, the kernel knows which account made each connection. This Jupyter server extension (enabled by
:mod:`autograder.formgrader.server`) asks the kernel, for every new connection and before its first byte is read,
for the client's socket: the one whose local end is the connection's remote one and whose remote end is the
server's (:func:`autograder.formgrader.sock_diag.socket_record`, one lookup whatever else is open, so that no
account can slow the check by opening connections). The connection is answered only when that socket is
established and held by a process (an inode), and its owner is one of :func:`allowed_accounts`:

    allowed = {the server's own account, root, the account that ran sudo (SUDO_UID)}

A socket its process has closed is no evidence: the kernel keeps it a while (time-wait) with uid 0 and no inode,
and a request sent before the close would still be read. A browser of the instructor's account, and ``ssh -L``
forwarded by the instructor's session, connect as that account; a student's program, with a stolen cookie or
token, connects as the student's, and is closed without an answer. A connection whose client cannot be found
(not on this machine's loopback), or that the kernel cannot be asked about, is closed as well: the formgrader
listens on the loopback only.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import ClassVar

from tornado.httpserver import HTTPServer

from autograder.formgrader.sock_diag import ESTABLISHED, socket_record

TABLES = ("tcp", "tcp6")


def allowed_accounts(environment: dict[str, str] | None = None) -> frozenset[int]:
    """The user IDs whose connections the formgrader answers: its own, root's, and ``SUDO_UID``'s when set."""
    environment = os.environ if environment is None else environment
    allowed = {os.getuid(), 0}
    if (sudo := environment.get("SUDO_UID", "")).isdigit():
        allowed.add(int(sudo))
    return frozenset(allowed)


def _endpoint(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``ADDRESS:PORT`` as ``/proc/net/tcp`` writes it (hexadecimal, each 32-bit word in the machine's order)."""
    address, port = text.rsplit(":", 1)
    raw = bytes.fromhex(address)
    words = b"".join(raw[index:index + 4][::-1] if sys.byteorder == "little" else raw[index:index + 4]
                     for index in range(0, len(raw), 4))
    return ipaddress.ip_address(words), int(port, 16)


def _normalized(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    found = ipaddress.ip_address(address.split("%", 1)[0])
    return found.ipv4_mapped or found if isinstance(found, ipaddress.IPv6Address) else found


def tcp_sockets(proc: Path = Path("/proc")):
    """Every TCP socket of this network namespace, from ``/proc/net/tcp`` and ``tcp6``, as
    ``(local, remote, state, uid, inode)``: the endpoints as ``(address, port)`` (an IPv4-mapped IPv6 address as
    its IPv4 one), the state as written (``0A``: listening), the owner's user ID and the socket's inode."""
    for table in TABLES:
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            columns = line.split()
            if len(columns) < 10:
                continue
            local, remote = _endpoint(columns[1]), _endpoint(columns[2])
            local = (getattr(local[0], "ipv4_mapped", None) or local[0], local[1])
            remote = (getattr(remote[0], "ipv4_mapped", None) or remote[0], remote[1])
            yield local, remote, columns[3], int(columns[7]), int(columns[9])


def connection_owner(client: tuple, server: tuple) -> int | None:
    """The user ID of the process that holds the socket at ``client`` (address, port) connected to ``server``
    (address, port); None when no process holds an established socket there (none, or one closed already).

    Raises:
        OSError, ValueError: the kernel could not be asked (:func:`autograder.formgrader.sock_diag.socket_record`).
    """
    record = socket_record(client, server)
    if record is None or record.state != ESTABLISHED or record.inode == 0:
        return None
    return record.uid


class AccountCheckedServer:
    """What the extension puts in place of :meth:`tornado.httpserver.HTTPServer.handle_stream`: each new
    connection is read only when its owner is an allowed account."""

    allowed: frozenset[int] = frozenset()
    original = HTTPServer.handle_stream
    log = None  # the server's logger: each refused account is named there once
    named: ClassVar[set[int | None]] = set()

    @classmethod
    def handle_stream(cls, server: HTTPServer, stream, address) -> None:
        try:
            owner = connection_owner(address, stream.socket.getsockname())
        except (OSError, ValueError):
            owner = None
        if owner not in cls.allowed:
            stream.close()
            if owner not in cls.named and cls.log is not None:  # once per account, so no flood of lines
                cls.named.add(owner)
                cls.log.warning(
                    "autograder: closed a connection of %s, which is not among the user IDs %s (this is said once "
                    "per account); if it was your browser, run it, or the formgrader, as one of them (su sets no "
                    "SUDO_UID: start the formgrader with sudo)",
                    "an unknown account" if owner is None else f"user ID {owner}", sorted(cls.allowed))
            return
        cls.original(server, stream, address)


def _load_jupyter_server_extension(serverapp) -> None:
    """Jupyter server's entry point: every connection's owner is checked before the server reads it."""
    AccountCheckedServer.allowed = allowed_accounts()
    AccountCheckedServer.log = serverapp.log
    HTTPServer.handle_stream = lambda server, stream, address: AccountCheckedServer.handle_stream(
        server, stream, address)
    serverapp.log.info("autograder: the formgrader answers connections of the user IDs %s only",
                       sorted(AccountCheckedServer.allowed))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "autograder.formgrader.peers"}]
