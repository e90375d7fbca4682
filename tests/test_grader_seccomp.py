"""autograder.sandbox.seccomp: the kernel's filter refuses anonymous memory files, System V IPC, keyrings, the
per-user counters, descriptors put in flight (sendmsg), sockets of any family but Unix and netlink and growing a socket's or a pipe's buffers.

The program is read by a BPF interpreter written here from the kernel's documentation (classic BPF, the
instructions the filter uses), against the system-call numbers of the kernel's tables, and installed for real in
a child process, where the calls it denies fail with EPERM and the course's imports still work. That a kernel
graded in the sandbox meets the same refusal is tested with the other attacks (tests/test_grader_hostile.py).
"""

from __future__ import annotations

import json
import platform
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.sandbox import seccomp

# From arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h (arm64).
KERNEL_NUMBERS = {
    "x86_64": {"shmget": 29, "shmat": 30, "semget": 64, "msgget": 68, "memfd_create": 319, "memfd_secret": 447,
               "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300, "mq_open": 240, "io_uring_setup": 425,
               "add_key": 248, "request_key": 249, "keyctl": 250, "sendmsg": 46, "sendmmsg": 307, "io_setup": 206, "getpid": 39, "write": 1, "socket": 41,
               "socketpair": 53, "setsockopt": 54, "fcntl": 72, "unshare": 272, "clone": 56, "clone3": 435},
    "aarch64": {"shmget": 194, "shmat": 196, "semget": 190, "msgget": 186, "memfd_create": 279, "memfd_secret": 447,
                "inotify_init1": 26, "fanotify_init": 262, "mq_open": 180, "io_uring_setup": 425, "add_key": 217,
                "request_key": 218, "keyctl": 219, "sendmsg": 211, "sendmmsg": 269, "io_setup": 0, "getpid": 172, "write": 64, "socket": 198, "socketpair": 199,
                "setsockopt": 208, "fcntl": 25, "unshare": 97, "clone": 220, "clone3": 435},
}
ARGUMENT_CHECKED = ("socket", "socketpair", "setsockopt", "fcntl")
# linux/socket.h, asm-generic/socket.h, linux/fcntl.h
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
SOL_SOCKET, IPPROTO_TCP = 1, 6
SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE, SO_KEEPALIVE, SO_REUSEADDR = 7, 8, 32, 33, 9, 2
F_GETFL, F_SETFL, F_SETPIPE_SZ, F_GETPIPE_SZ = 3, 4, 1031, 1032
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 5, 6, 7, 36, 37, 38  # asm-generic/fcntl.h
# AUDIT_ARCH_* = EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE (linux/audit.h, linux/elf-em.h)
AUDIT_ARCH = {"x86_64": 62 | 0x80000000 | 0x40000000, "aarch64": 183 | 0x80000000 | 0x40000000}
HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}
DENIED_CALLS = ("shmget", "shmat", "semget", "msgget", "memfd_create", "memfd_secret", "inotify_init", "inotify_init1",
                "fanotify_init", "mq_open", "io_uring_setup", "add_key", "request_key", "keyctl", "sendmsg", "sendmmsg",
                "io_setup")  # inotify_init: x86-64 only (arm64 has inotify_init1 alone)
NAMESPACE_CALLS = ("unshare", "clone", "clone3")
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026  # SECCOMP_RET_ERRNO | errno (EPERM 1, ENOSYS 38)
ENOLCK = 0x00050025  # errno 37
# linux/sched.h
CLONE_NEW = {"NEWNS": 0x00020000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
             "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000}
SIGCHLD, CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND, CLONE_VFORK = 17, 0x100, 0x200, 0x400, 0x800, 0x4000
CLONE_THREAD, CLONE_SYSVSEM, CLONE_SETTLS = 0x10000, 0x40000, 0x80000
CLONE_PARENT_SETTID, CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID = 0x100000, 0x200000, 0x1000000


def run_filter(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What the program returns for a call (``nr``, ``arch``, ``args``): a classic-BPF interpreter of the five
    instructions a seccomp filter of this kind uses (ld [k], jeq #k, jge #k, jset #k, ret #k)."""
    words = [*args, *[0] * (6 - len(args))]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *words)  # struct seccomp_data: int nr, u32 arch, u64 ip, u64 args[6]
    instructions = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    accumulator, pc = 0, 0
    while True:
        code, jump_true, jump_false, k = instructions[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # BPF_JMP | BPF_JEQ / BPF_JGE / BPF_JSET, against k
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: accumulator & k != 0}[code]
            pc += 1 + (jump_true if taken else jump_false)
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"instruction {code:#x} is not one this filter should use")


@pytest.mark.parametrize("machine", sorted(KERNEL_NUMBERS))
def test_the_program_denies_exactly_the_memory_calls(machine):
    program = seccomp.filter_program(machine)
    numbers, arch = KERNEL_NUMBERS[machine], AUDIT_ARCH[machine]
    denied = {name: numbers[name] for name in DENIED_CALLS if name in numbers}
    for name, number in denied.items():
        assert run_filter(program, number, arch) == EPERM, name
    checked = {numbers[name] for name in ARGUMENT_CHECKED}
    for nr in range(460):
        if nr not in denied.values() and nr not in checked:
            assert run_filter(program, nr, arch) == ALLOW, nr
    other = AUDIT_ARCH["aarch64" if machine == "x86_64" else "x86_64"]
    assert run_filter(program, numbers["getpid"], other) == EPERM  # another ABI of the same machine
    assert run_filter(program, numbers["getpid"], 0x40000003) == EPERM  # i386 (int 0x80 on x86-64)
    if machine == "x86_64":
        assert run_filter(program, 0x40000000 | numbers["getpid"], arch) == EPERM  # the x32 ABI


@pytest.mark.parametrize("machine", sorted(KERNEL_NUMBERS))
def test_the_program_allows_unix_sockets_only_and_no_larger_buffers(machine):
    program = seccomp.filter_program(machine)
    numbers, arch = KERNEL_NUMBERS[machine], AUDIT_ARCH[machine]
    for call in ("socket", "socketpair"):
        for family in (AF_UNIX, AF_NETLINK):  # ZeroMQ's sockets; bwrap's loopback set-up
            assert run_filter(program, numbers[call], arch, (family, 1, 0)) == ALLOW, (call, family)
        for family in (AF_INET, AF_INET6, AF_PACKET, 0x100000000 | AF_INET):
            assert run_filter(program, numbers[call], arch, (family, 1, 0)) == EPERM, (call, family)
    setsockopt = numbers["setsockopt"]
    for option in (SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE):
        assert run_filter(program, setsockopt, arch, (3, SOL_SOCKET, option, 0, 4)) == EPERM, option
    for level, option in ((SOL_SOCKET, SO_KEEPALIVE), (SOL_SOCKET, SO_REUSEADDR), (IPPROTO_TCP, SO_SNDBUF)):
        assert run_filter(program, setsockopt, arch, (3, level, option, 0, 4)) == ALLOW, (level, option)
    fcntl = numbers["fcntl"]
    assert run_filter(program, fcntl, arch, (3, F_SETPIPE_SZ, 1 << 20)) == EPERM
    for command in (F_GETFL, F_SETFL, F_GETPIPE_SZ, F_GETLK, F_OFD_GETLK):
        assert run_filter(program, fcntl, arch, (3, command, 0)) == ALLOW, command
    for command in (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW):  # byte-range locks: kernel memory, uncounted
        assert run_filter(program, fcntl, arch, (3, command, 0)) == ENOLCK, command


@pytest.mark.parametrize("machine", sorted(KERNEL_NUMBERS))
def test_the_allowlist_program_allows_its_calls_refuses_namespaces_and_answers_enosys_to_the_rest(machine):
    from autograder.sandbox.system_calls import NUMBERS

    program = seccomp.allowlist_program(machine)
    numbers, arch = KERNEL_NUMBERS[machine], AUDIT_ARCH[machine]
    clone, unshare, clone3 = numbers["clone"], numbers["unshare"], numbers["clone3"]
    for flags in (*CLONE_NEW.values(), CLONE_FILES, 0):
        assert run_filter(program, unshare, arch, (flags,)) == EPERM, flags
    assert run_filter(program, clone3, arch, (0x7FFF0000, 88)) == ENOSYS  # the C library then calls clone
    for name, flag in CLONE_NEW.items():
        assert run_filter(program, clone, arch, (flag | SIGCHLD,)) == EPERM, name
        assert run_filter(program, clone, arch, (0xFFFFFFFF00000000 | flag,)) == EPERM, name
    thread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS
    thread |= CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID  # glibc's pthread_create
    fork = CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD  # glibc's fork
    for flags in (thread, fork, CLONE_VM | CLONE_VFORK | SIGCHLD):  # and vfork, posix_spawn's
        assert run_filter(program, clone, arch, (flags,)) == ALLOW, hex(flags)
    allowed = {NUMBERS[machine][name] for name in seccomp.allowed_calls() if name in NUMBERS[machine]}
    denied = {numbers[name] for name in DENIED_CALLS if name in numbers}
    assert not allowed & denied
    for nr in range(600):
        if nr in (clone, unshare, clone3):
            continue
        expected = EPERM if nr in denied else ALLOW if nr in allowed else ENOSYS
        assert run_filter(program, nr, arch, (CLONE_NEW["NEWUSER"],)) == expected, nr
    for name in ("read", "write", "openat", "mmap", "futex", "execve", "socket", "fcntl", "getrandom", "rseq"):
        assert run_filter(program, numbers.get(name, NUMBERS[machine][name]), arch) == ALLOW, name
    for name in ("ptrace", "mount", "setns", "bpf", "perf_event_open", "userfaultfd", "sync", "process_vm_readv",
                 "fadvise64", "readahead"):  # the last two drop or fill the page cache of files all processes share
        assert name not in seccomp.allowed_calls(), name
    other = AUDIT_ARCH["aarch64" if machine == "x86_64" else "x86_64"]
    assert run_filter(program, clone, other, (SIGCHLD,)) == EPERM
    if machine == "x86_64":
        assert run_filter(program, 0x40000000 | unshare, arch, (0,)) == EPERM  # the x32 ABI


def test_every_allowed_call_has_a_number_on_x86_64_and_on_arm64_all_but_the_older_forms():
    from autograder.sandbox.system_calls import NUMBERS

    names = seccomp.allowed_calls()
    assert len(names) == len(set(names))
    assert set(NUMBERS["x86_64"]) == set(names)
    older = {"open", "creat", "dup2", "pipe", "stat", "lstat", "access", "getdents", "rename", "mkdir", "rmdir",
             "link", "unlink", "symlink", "readlink", "chmod", "chown", "lchown", "utime", "utimes", "futimesat",
             "mknod", "select", "poll", "epoll_create", "epoll_wait", "eventfd", "signalfd", "fork", "vfork",
             "getpgrp", "arch_prctl", "pause", "alarm", "time"}  # arm64 has only their newer forms (openat, ...)
    assert set(NUMBERS["aarch64"]) == set(names) - older


def test_the_buffer_bound_follows_its_formula(monkeypatch):
    sizes = {"/proc/sys/net/core/wmem_default": 212992, "/proc/sys/net/core/rmem_default": 100000}
    monkeypatch.setattr(seccomp, "_read_number", sizes.get)
    assert seccomp.buffer_bound(256) == 256 * 2 * 212992
    sizes.update({"/proc/sys/net/core/wmem_default": 4096, "/proc/sys/net/core/rmem_default": 4096})
    assert seccomp.buffer_bound(10) == 10 * 2 * 65536  # a pipe's 16 pages
    sizes.clear()
    assert seccomp.buffer_bound(10) is None


@pytest.mark.parametrize("machine", sorted(KERNEL_NUMBERS))
def test_the_numbers_are_the_system_headers_where_they_are_installed(machine):
    header = HEADERS[machine]
    if not header.is_file():
        pytest.skip(f"{header} is not installed (Debian: linux-libc-dev)")
    text = header.read_text()
    denied = {name: KERNEL_NUMBERS[machine][name] for name in DENIED_CALLS if name in KERNEL_NUMBERS[machine]}
    checked = {name: KERNEL_NUMBERS[machine][name] for name in ARGUMENT_CHECKED}
    namespaces = {name: KERNEL_NUMBERS[machine][name] for name in NAMESPACE_CALLS}
    for name, number in {**denied, **checked, **namespaces}.items():
        # asm-generic names the calls whose 32-bit form differs __NR3264_ (fcntl: fcntl64 on 32 bits)
        assert re.search(rf"#define __NR(3264)?_{name} {number}\n", re.sub(r"[ \t]+", " ", text)), name
    assert seccomp.DENIED[machine][1] == denied
    assert seccomp.CHECKED[machine] == checked
    assert seccomp.NAMESPACE_CALLS[machine] == namespaces
    from autograder.sandbox.system_calls import NUMBERS

    defined = {name: int(number) for _, name, number in re.findall(r"#define __NR(3264)?_(\w+) (\d+)\n",
                                                                    re.sub(r"[ \t]+", " ", text))}
    defined["newfstatat"] = defined.get("newfstatat", defined.get("fstatat"))  # asm-generic's __NR3264_fstatat
    for name, number in NUMBERS[machine].items():
        if name in defined or number < 452:  # the calls since Linux 6.6 only where the headers are that new
            assert defined[name] == number, name
    assert seccomp.DENIED[machine][0] == AUDIT_ARCH[machine]


def test_an_unknown_machine_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"machine must be one of \['aarch64', 'x86_64'\].*'riscv64'"):
        seccomp.filter_program("riscv64")
    with pytest.raises(ValueError, match=r"machine must be one of \['aarch64', 'x86_64'\].*'riscv64'"):
        seccomp.allowlist_program("riscv64")


PROBE = """
import ctypes, errno, json, os, sys
if sys.argv[1] == "filtered":
    from autograder.sandbox import seccomp
    seccomp.install()
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
try:
    os.close(os.memfd_create("probe"))
    seen["memfd_create"] = "allowed"
except OSError as error:
    seen["memfd_create"] = errno.errorcode[error.errno]
segment = libc.shmget(0, ctypes.c_size_t(4096), 0o1000 | 0o600)
seen["shmget"] = errno.errorcode[ctypes.get_errno()] if segment < 0 else "allowed"
if segment >= 0:
    libc.shmctl(segment, 0, None)  # IPC_RMID
instance = libc.inotify_init1(0)
seen["inotify_init1"] = errno.errorcode[ctypes.get_errno()] if instance < 0 else "allowed"
if instance >= 0:
    os.close(instance)
queue = libc.mq_open(b"/autograder-probe", os.O_CREAT | os.O_RDWR, 0o600, None)
seen["mq_open"] = errno.errorcode[ctypes.get_errno()] if queue < 0 else "allowed"
if queue >= 0:
    os.close(queue)
    libc.mq_unlink(b"/autograder-probe")
libc.syscall.restype = ctypes.c_long
KEYCTL = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
found = libc.syscall(KEYCTL, ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))  # GET_KEYRING_ID, session
seen["keyctl"] = errno.errorcode[ctypes.get_errno()] if found < 0 else "allowed"
IO_SETUP = {"x86_64": 206, "aarch64": 0}[os.uname().machine]
context = ctypes.c_ulong(0)
made = libc.syscall(IO_SETUP, ctypes.c_long(1), ctypes.byref(context))  # one asynchronous I/O context
seen["io_setup"] = errno.errorcode[ctypes.get_errno()] if made < 0 else "allowed"
if made == 0:
    libc.syscall({"x86_64": 207, "aarch64": 1}[os.uname().machine], context)  # io_destroy
queue = libc.msgget(0, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
seen["msgget"] = errno.errorcode[ctypes.get_errno()] if queue < 0 else "allowed"
if queue >= 0:
    libc.msgctl(queue, 0, None)  # IPC_RMID
import fcntl, socket
def refusal(call):
    try:
        call()
        return "allowed"
    except OSError as error:
        return errno.errorcode[error.errno]
seen["socket_inet"] = refusal(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
first, second = socket.socketpair()
seen["socketpair_unix"] = "allowed"
seen["so_sndbuf"] = refusal(lambda: first.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20))
seen["so_keepalive"] = refusal(lambda: first.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
read_end, write_end = os.pipe()
seen["f_setpipe_sz"] = refusal(lambda: fcntl.fcntl(write_end, 1031, 1 << 20))
locked = os.open(os.path.join(sys.argv[2], "locked"), os.O_RDWR | os.O_CREAT)
seen["byte_range_lock"] = refusal(lambda: fcntl.lockf(locked, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0))
seen["flock"] = refusal(lambda: fcntl.flock(locked, fcntl.LOCK_EX))
import array
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [read_end]).tobytes())]
seen["scm_rights"] = refusal(lambda: first.sendmsg([b"x"], rights))  # a descriptor put in flight
seen["send"] = refusal(lambda: (first.send(b"y"), second.recv(1)))
import numpy, torch, ipykernel, zmq  # what a graded kernel imports
context = zmq.Context()
server, client = context.socket(zmq.REP), context.socket(zmq.REQ)
address = "ipc://" + os.path.join(sys.argv[2], "probe")  # the transport nbgrader talks to the kernel over
server.bind(address)
client.connect(address)
client.send(b"ping")
seen["zmq_ipc"] = (server.recv(), server.send(b"pong"), client.recv())[2].decode()
context.destroy()
seen["torch"] = float((torch.ones(3, 3) @ torch.ones(3, 3)).sum())
seen["pid"] = os.getpid() > 0
print(json.dumps(seen))
"""


@pytest.mark.skipif(platform.machine() not in seccomp.DENIED, reason=f"no filter for {platform.machine()}")
@pytest.mark.parametrize("mode", ["filtered", "plain"])
def test_installed_the_filter_refuses_the_calls_and_the_kernels_imports_still_work(mode, tmp_path):
    completed = subprocess.run([sys.executable, "-c", PROBE, mode, str(tmp_path)], capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    seen = json.loads(completed.stdout.strip().splitlines()[-1])
    refused = "EPERM" if mode == "filtered" else "allowed"
    assert seen == {"memfd_create": refused, "shmget": refused, "inotify_init1": refused, "mq_open": refused,
                    "keyctl": refused, "msgget": refused, "io_setup": refused,
                    "socket_inet": refused, "socketpair_unix": "allowed", "so_sndbuf": refused,
                    "so_keepalive": "allowed", "f_setpipe_sz": refused, "scm_rights": refused, "send": "allowed",
                    "byte_range_lock": "ENOLCK" if mode == "filtered" else "allowed", "flock": "allowed",
                    "zmq_ipc": "pong", "torch": 27.0, "pid": True}


@pytest.mark.skipif(platform.machine() not in seccomp.DENIED, reason=f"no filter for {platform.machine()}")
def test_the_report_without_control_groups_gives_the_buffer_bound(monkeypatch):
    from autograder.grade import _enforcement_warnings
    from autograder.sandbox.launcher import KERNEL_OPEN_FILES, Limits

    sizes = {"/proc/sys/net/core/wmem_default": 212992, "/proc/sys/net/core/rmem_default": 212992}
    monkeypatch.setattr(seccomp, "_read_number", sizes.get)
    megabytes = KERNEL_OPEN_FILES * 2 * 212992 / 2**20
    for root, total in ((False, "times the processes a kernel may start (64, per user)"),
                        (True, "with no bound for a whole kernel, whose processes are not limited as root")):
        monkeypatch.setattr("os.geteuid", lambda root=root: 0 if root else 1000)
        [warning] = _enforcement_warnings(None, "no memory controller here", Limits())
        # The bound holds for each process of a kernel: as many processes, as many times the bound.
        assert (f"at most {megabytes:.0f} MB per process of a kernel (its {KERNEL_OPEN_FILES} open files, each "
                f"with its default buffers), {total}") in warning
        assert "no memory controller here" in warning
        assert "System V shared memory, semaphores and message queues were refused" in warning


def test_the_guide_names_the_kernels_open_file_limit_the_launcher_sets():
    from autograder.sandbox.launcher import KERNEL_OPEN_FILES

    guide = " ".join((Path(__file__).resolve().parents[1] / "book" / "guide_instructors.md").read_text().split())
    assert f"bounded by the kernel's {KERNEL_OPEN_FILES} open files" in guide


def test_the_guide_names_the_cell_output_and_signal_caps_the_code_sets():
    from autograder.feedback.outputs import MAX_OUTPUTS
    from autograder.sandbox.launcher import KERNEL_PENDING_SIGNALS
    from autograder.student.sanitize import MAX_CELLS

    guide = " ".join((Path(__file__).resolve().parents[1] / "book" / "guide_instructors.md").read_text().split())
    assert f"at most {MAX_CELLS:,} cells (each costs" in guide
    assert f"at most {MAX_CELLS:,} cells and {MAX_OUTPUTS:,} outputs a notebook" in guide
    assert f"(`RLIMIT_SIGPENDING` {KERNEL_PENDING_SIGNALS}: queued signals count per account)" in guide


NAMESPACE_PROBE = """
import ctypes, errno, json, os, subprocess, sys, threading
from autograder.sandbox import seccomp
seccomp.install(program=seccomp.allowlist_program())
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
numbers = seccomp.NAMESPACE_CALLS[os.uname().machine]
seen = {}
for name, flag in (("CLONE_NEWUSER", 0x10000000), ("CLONE_NEWNET", 0x40000000), ("CLONE_NEWNS", 0x00020000)):
    seen[name] = errno.errorcode[ctypes.get_errno()] if libc.unshare(flag) != 0 else "allowed"
made = libc.syscall(numbers["clone"], ctypes.c_ulong(0x10000000 | 17), None, None, None, None)  # NEWUSER | SIGCHLD
if made == 0:
    os._exit(0)  # the child of a clone the filter let through
seen["clone_newuser"] = errno.errorcode[ctypes.get_errno()] if made < 0 else "allowed"
if made > 0:
    os.waitpid(made, 0)
arguments = (ctypes.c_uint64 * 11)()
made = libc.syscall(numbers["clone3"], ctypes.byref(arguments), ctypes.c_size_t(88))
if made == 0:
    os._exit(0)
seen["clone3"] = errno.errorcode[ctypes.get_errno()] if made < 0 else "allowed"
seen["subprocess"] = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip()
results = []
workers = [threading.Thread(target=lambda: results.append(1)) for _ in range(4)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
seen["threads"] = len(results)
pid = os.fork()
if pid == 0:
    os._exit(3)
seen["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
import torch
torch.set_num_threads(2)
seen["torch"] = float((torch.ones(64, 64) @ torch.ones(64, 64)).sum())
import tempfile, zmq, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
with tempfile.TemporaryDirectory() as folder:
    context = zmq.Context()
    server, client = context.socket(zmq.REP), context.socket(zmq.REQ)
    server.bind("ipc://" + os.path.join(folder, "probe"))
    client.connect("ipc://" + os.path.join(folder, "probe"))
    client.send(b"ping")
    seen["zmq_ipc"] = (server.recv(), server.send(b"pong"), client.recv())[2].decode()
    context.destroy()
    plt.plot([0, 1], [1, 0])
    plt.savefig(os.path.join(folder, "figure.png"))
    seen["figure"] = os.path.getsize(os.path.join(folder, "figure.png")) > 1000
print(json.dumps(seen))
"""


@pytest.mark.skipif(platform.machine() not in seccomp.NAMESPACE_CALLS, reason=f"no filter for {platform.machine()}")
def test_installed_the_allowlist_refuses_namespaces_while_threads_processes_and_torch_work():
    completed = subprocess.run([sys.executable, "-c", NAMESPACE_PROBE], capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    seen = json.loads(completed.stdout.strip().splitlines()[-1])
    assert seen == {"CLONE_NEWUSER": "EPERM", "CLONE_NEWNET": "EPERM", "CLONE_NEWNS": "EPERM",
                    "clone_newuser": "EPERM", "clone3": "ENOSYS", "subprocess": "42", "threads": 4, "fork": 3,
                    "torch": 64.0 * 64 * 64, "zmq_ipc": "pong", "figure": True}
