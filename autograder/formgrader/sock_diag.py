"""The kernel's record of one TCP socket, asked by its addresses: Linux's ``sock_diag`` over netlink.

``/proc/net/tcp`` lists every socket of the machine, and reading it costs time in proportion to its rows, which
any account can multiply by holding connections open. ``sock_diag`` answers one exact question instead: the
socket whose local end is ``local`` and whose remote end is ``remote`` (a lookup in the kernel's hash of
connections, whatever else is open). The request is an ``inet_diag_req_v2`` (``linux/inet_diag.h``)::

    family u8, protocol u8, extensions u8, pad u8, states u32,
    id: source port be16, destination port be16, source be32[4], destination be32[4], interface u32, cookie u32[2]

and the answer an ``inet_diag_msg``::

    family u8, state u8, timer u8, retransmits u8, id (as above), expires u32, receive queue u32,
    send queue u32, uid u32, inode u32

The state is TCP's (1: established, 6: time-wait...). A socket that no process holds any more (closed, in
time-wait or orphaned) has inode 0, and the kernel gives a time-wait one uid 0 whoever made it: its uid says
nothing of an account.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 0x2
IPPROTO_TCP = 6
ALL_STATES = 0xFFFFFFFF
NO_COOKIE = 0xFFFFFFFF
ESTABLISHED = 1

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2 before its id
_ID = struct.Struct(">HH16s16s")  # inet_diag_sockid: ports and addresses, in network order
_ID_REST = struct.Struct("=III")  # interface, cookie
_MESSAGE = struct.Struct("=BBBB")  # inet_diag_msg before its id
_MESSAGE_REST = struct.Struct("=IIIII")  # expires, receive queue, send queue, uid, inode
_ANSWER_SIZE = 8192


@dataclass(frozen=True)
class SocketRecord:
    """What the kernel says of a socket: its TCP state, its owner's user ID and its inode (0: no process holds
    it)."""

    state: int
    uid: int
    inode: int


def _packed(address: str) -> tuple[int, bytes]:
    """``(family, 16 bytes)`` of an address; an IPv4-mapped IPv6 address as its IPv4 one (the kernel keeps one
    hash of connections for both)."""
    found = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        found = found.ipv4_mapped
    family = socket.AF_INET if found.version == 4 else socket.AF_INET6
    return family, found.packed.ljust(16, b"\0")


def socket_record(local: tuple, remote: tuple) -> SocketRecord | None:
    """The kernel's record of the TCP socket whose local end is ``local`` and whose remote end is ``remote``,
    both ``(address, port, ...)``; None when there is none.

    Raises:
        ValueError: the two ends are not of one address family.
        OSError: the kernel could not be asked (no ``sock_diag``), or answered with an error other than "no such
            socket".
    """
    local_family, local_address = _packed(local[0])
    remote_family, remote_address = _packed(remote[0])
    if local_family != remote_family:
        raise ValueError(f"local {local[0]!r} and remote {remote[0]!r} are not of one address family")
    request = (_REQUEST.pack(local_family, IPPROTO_TCP, 0, 0, ALL_STATES)
               + _ID.pack(int(local[1]), int(remote[1]), local_address, remote_address)
               + _ID_REST.pack(0, NO_COOKIE, NO_COOKIE))
    message = _HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + request
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as netlink:
        netlink.settimeout(5)
        netlink.sendto(message, (0, 0))
        answer = netlink.recv(_ANSWER_SIZE)
    if len(answer) < _HEADER.size:
        raise OSError(errno.EPROTO, "sock_diag: a short answer")
    length, kind, _, _, _ = _HEADER.unpack_from(answer)
    body = answer[_HEADER.size:length]
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", body)
        if -code == errno.ENOENT:
            return None
        raise OSError(-code, f"sock_diag: {os.strerror(-code)}")
    if kind != SOCK_DIAG_BY_FAMILY or len(body) < _MESSAGE.size + _ID.size + _ID_REST.size + _MESSAGE_REST.size:
        raise OSError(errno.EPROTO, f"sock_diag: an answer of type {kind} and {len(body)} bytes")
    _, state, _, _ = _MESSAGE.unpack_from(body)
    sport, dport, _, _ = _ID.unpack_from(body, _MESSAGE.size)  # the addresses as the socket keeps them (v4 or mapped)
    if (sport, dport) != (int(local[1]), int(remote[1])):
        raise OSError(errno.EPROTO, "sock_diag: the answer is of another socket")
    _, _, _, uid, inode = _MESSAGE_REST.unpack_from(body, _MESSAGE.size + _ID.size + _ID_REST.size)
    return SocketRecord(state, uid, inode)
