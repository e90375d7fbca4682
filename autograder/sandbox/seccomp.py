r"""A seccomp filter that keeps a student's kernel from holding what no limit of its own counts.

Without control groups (:mod:`autograder.sandbox.cgroups`), the kernel's memory is bounded by its address space
(``RLIMIT_AS``) and by the size of its ``/tmp`` and ``/dev/shm`` (a tmpfs of ``--tmp-mb``). Three kinds of memory
escape both:

- an anonymous memory file (``memfd_create``, ``memfd_secret``), whose pages written through ``write`` are never
  mapped, and System V shared memory, message queues and semaphores (``shmget``, ``msgget``, ``semget``), which
  live in the IPC namespace until it ends: refused;
- the buffers of sockets and pipes, kernel memory that holds what one end wrote until the other reads it.
  They cannot be refused (the kernel talks to nbgrader over ZeroMQ's Unix sockets), so they are bounded: a
  kernel may make Unix and netlink sockets only (bwrap, under the filter too, brings up the loopback device
  over netlink; ``socket``, ``socketpair`` with another family: refused; it has no network anyway, and a TCP
  socket on its loopback grows its buffers by itself up to ``tcp_wmem``'s maximum), may not
  enlarge a socket's buffers (``setsockopt(SOL_SOCKET, SO_SNDBUF | SO_RCVBUF | their FORCE forms)``) or a
  pipe's (``fcntl(F_SETPIPE_SZ)``), and may not hold files through an io_uring (``io_uring_setup``). What it can
  hold is then at most :func:`buffer_bound`: every socket or pipe it has open (at most ``RLIMIT_NOFILE``) with
  its default buffer and one message past it.
- descriptors in flight: a descriptor sent over a Unix socket (``SCM_RIGHTS``) and not yet received holds its
  file and its buffers outside the sender's open files, and the kernel counts such descriptors per real user,
  so a kernel that keeps ``RLIMIT_NOFILE`` of them in flight stops every other process of the grader's account
  from passing one. A descriptor can only be sent by ``sendmsg`` or ``sendmmsg`` (ZeroMQ and Python's sockets
  send with ``sendto``): both refused, so a kernel has no descriptor in flight.

Byte-range locks (``fcntl(F_SETLK)`` and its kin) are kernel memory too, one record per range locked, which
neither the address space nor a control group counts: refused with ``ENOLCK``, as when the system has none left
(SQLite on a file then reports its database locked, once its busy timeout has passed; the grader's kernels keep no
IPython history, which is such a file: :func:`autograder.sandbox.launcher.kernel_command`; ``flock``, one lock per
open file, still works).

And some objects count against the grader's own account, machine-wide, whatever user the kernel is inside its
namespaces: inotify and fanotify instances and POSIX message queues (their limits are per real user); a kernel
that holds them all leaves none to the instructor's servers and the other kernels of the batch: refused. So are
the kernel's keyrings (``add_key``, ``request_key``, ``keyctl``): keys count against the same account's quota,
and the session keyring a process inherits holds the keys of the grader's own session, which no namespace
hides. So
are asynchronous I/O contexts (``io_setup``): their counter (``fs.aio-nr`` against ``fs.aio-max-nr``) is one
number for the whole machine, and a kernel that takes them all leaves none to any process of any account. The
launcher installs this filter before it starts the kernel (:func:`install`), and every process of the kernel
inherits it; those calls then fail with ``EPERM``, as if the system forbade them. Nothing the course, NumPy,
PyTorch or ipykernel run needs them.

A second filter (:func:`allowlist_program`), which bubblewrap loads once it has made the kernel's own sandbox,
just before it executes the kernel (without bubblewrap, the launcher installs both), lets the kernel make the
system calls of :data:`KERNEL_CALLS` and no other, and no namespace: namespaces count against the grader's
account too, in every user namespace up to the machine's.

The filter is a classic BPF program over ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, the
arguments as 64-bit words from 16; an argument checked here is a C ``int`` or ``unsigned int``, of which the
kernel reads the low 32 bits, the first word on these little-endian machines)::

    load arch;   if arch != this machine's           -> EPERM   (no other ABI: i386's int 0x80 on x86-64)
    load nr;     if x86-64 and nr >= 0x40000000      -> EPERM   (the x32 ABI's numbers)
                 if nr in the denied calls            -> EPERM
                 if nr is socket or socketpair        -> load args[0]: AF_UNIX, AF_NETLINK -> allow, else EPERM
                 if nr is setsockopt                  -> load args[1]: not SOL_SOCKET -> allow;
                                                         load args[2]: a buffer size -> EPERM, else allow
                 if nr is fcntl                       -> load args[1]: a lock command -> ENOLCK;
                                                         F_SETPIPE_SZ -> EPERM, else allow
                                                      -> allow

Its system-call numbers are the kernel's own tables (``arch/x86/entry/syscalls/syscall_64.tbl``,
``include/uapi/asm-generic/unistd.h`` for arm64), for the machines listed in :data:`DENIED`; on another one
:func:`filter_program` raises and the launcher says so in the kernel's log.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from pathlib import Path

# (audit architecture, {system call: number}) per machine, as platform.machine() names it: the calls refused
# whatever their arguments.
DENIED: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"shmget": 29, "shmat": 30, "semget": 64, "msgget": 68, "memfd_create": 319,
                            "memfd_secret": 447, "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300,
                            "mq_open": 240, "io_uring_setup": 425, "add_key": 248, "request_key": 249,
                            "keyctl": 250, "sendmsg": 46, "sendmmsg": 307, "io_setup": 206}),
    "aarch64": (0xC00000B7, {"shmget": 194, "shmat": 196, "semget": 190, "msgget": 186, "memfd_create": 279,
                             "memfd_secret": 447, "inotify_init1": 26, "fanotify_init": 262, "mq_open": 180,
                             "io_uring_setup": 425, "add_key": 217, "request_key": 218, "keyctl": 219,
                             "sendmsg": 211, "sendmmsg": 269, "io_setup": 0}),
}
# The calls refused for some arguments only, per machine.
CHECKED: dict[str, dict[str, int]] = {
    "x86_64": {"socket": 41, "socketpair": 53, "setsockopt": 54, "fcntl": 72},
    "aarch64": {"socket": 198, "socketpair": 199, "setsockopt": 208, "fcntl": 25},
}
# The calls that make namespaces, per machine: unshare(flags) and clone(flags, ...) (flags the first argument on
# both), and clone3(args, size), whose flags lie in a structure that a filter cannot read.
NAMESPACE_CALLS: dict[str, dict[str, int]] = {
    "x86_64": {"unshare": 272, "clone": 56, "clone3": 435},
    "aarch64": {"unshare": 97, "clone": 220, "clone3": 435},
}
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET (linux/sched.h;
# CLONE_NEWTIME, 0x80, is only for unshare and clone3, both refused whole).
NEW_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# The system calls a kernel may make once its sandbox is made (:func:`allowlist_program`), by what they are for:
# what Python, NumPy, PyTorch, Matplotlib, ipykernel and ZeroMQ make, with the C library's older and newer forms
# of each (arm64 has only the newer). Not here, among others: mount, namespaces (setns), tracing (ptrace,
# process_vm_*), eBPF, perf events, userfaultfd, kernel modules, keys, clocks' setting, sync and syncfs (which
# write every file system of the machine), System V and POSIX IPC, io_uring and asynchronous I/O, inotify,
# setting users or capabilities (nobody has none to set), advice that drops or fills the machine's page cache for
# files that every process shares (fadvise64, readahead), and whatever a newer Linux adds.
KERNEL_CALLS: dict[str, str] = {
    "files": """read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2 open openat openat2 creat
        close close_range lseek dup dup2 dup3 pipe pipe2 fcntl ioctl flock fsync fdatasync sync_file_range
        ftruncate truncate fallocate sendfile copy_file_range splice tee stat fstat lstat
        newfstatat statx statfs fstatfs access faccessat faccessat2 getdents getdents64 getcwd chdir fchdir
        rename renameat renameat2 mkdir mkdirat rmdir link linkat unlink unlinkat symlink symlinkat readlink
        readlinkat chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat umask utime utimes utimensat
        futimesat mknod mknodat getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr""",
    "waiting": """select pselect6 poll ppoll epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait epoll_pwait2
        eventfd eventfd2 signalfd signalfd4 timerfd_create timerfd_settime timerfd_gettime""",
    "memory": "brk mmap munmap mremap mprotect madvise mincore msync membarrier pkey_alloc pkey_free pkey_mprotect",
    "processes": """clone fork vfork execve execveat exit exit_group wait4 waitid kill tkill tgkill getpid getppid
        gettid getpgid setpgid getpgrp getsid setsid set_tid_address set_robust_list get_robust_list futex
        futex_waitv futex_wake futex_wait futex_requeue rseq arch_prctl prctl sched_yield sched_getaffinity
        sched_setaffinity sched_getparam sched_setparam sched_getscheduler sched_setscheduler sched_getattr
        sched_get_priority_max sched_get_priority_min sched_rr_get_interval getpriority setpriority getcpu
        getrlimit setrlimit prlimit64 getrusage times sysinfo uname getuid geteuid getgid getegid getresuid
        getresgid getgroups capget pidfd_open pidfd_send_signal""",
    "signals and time": """rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait rt_sigsuspend
        rt_sigqueueinfo rt_tgsigqueueinfo sigaltstack pause alarm getitimer setitimer timer_create timer_settime
        timer_gettime timer_getoverrun timer_delete restart_syscall clock_gettime clock_getres clock_nanosleep
        nanosleep gettimeofday time getrandom""",
    "sockets": """socket socketpair bind listen accept accept4 connect getsockname getpeername sendto recvfrom
        recvmsg recvmmsg setsockopt getsockopt shutdown""",
}
X32_SYSCALL_BIT = 0x40000000
AF_UNIX, AF_NETLINK = 1, 16  # linux/socket.h
SOL_SOCKET = 1  # asm-generic/socket.h, on both machines
BUFFER_OPTIONS = {"SO_SNDBUF": 7, "SO_RCVBUF": 8, "SO_SNDBUFFORCE": 32, "SO_RCVBUFFORCE": 33}
F_SETPIPE_SZ = 1031  # F_LINUX_SPECIFIC_BASE (1024) + 7
# Byte-range locks (asm-generic/fcntl.h, the same on both machines; F_SETLK64 is F_SETLK on 64 bits): each range a
# process locks is kernel memory that neither its address space nor its control group counts, without end
# (millions of ranges on one empty file). Refused with ENOLCK, "no locks available", which SQLite and Python's
# fcntl report as such; whole-file flock() is a separate call, bounded by the open files.
LOCK_COMMANDS = {"F_SETLK": 6, "F_SETLKW": 7, "F_OFD_SETLK": 37, "F_OFD_SETLKW": 38}

# Classic BPF opcodes (linux/filter.h, linux/bpf_common.h) and seccomp's return values (linux/seccomp.h).
LOAD_WORD_ABSOLUTE = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_IF_GREATER_OR_EQUAL = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JUMP_IF_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
RETURN_ALLOW = 0x7FFF0000
RETURN_ERRNO = 0x00050000
NR_OFFSET, ARCH_OFFSET = 0, 4


def argument_offset(index: int) -> int:
    """Where the low 32 bits of argument ``index`` lie in ``struct seccomp_data``: args[6] of u64 from 16."""
    return 16 + 8 * index


PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def _instruction(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> bytes:
    """One ``struct sock_filter``: u16 code, u8 jt, u8 jf, u32 k, in the machine's byte order."""
    return struct.pack("=HBBI", code, jump_true, jump_false, k)


class _Program:
    """Instructions with named places: a jump names where it goes, and :meth:`assemble` counts the offsets
    (classic BPF jumps forward only, by the number of instructions skipped after the jump)."""

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.items)

    def load(self, offset: int) -> None:
        self.items.append((LOAD_WORD_ABSOLUTE, offset, None, None))

    def jump(self, code: int, value: int, if_true: str | None, if_false: str | None) -> None:
        """``None`` for a branch: go on to the next instruction."""
        self.items.append((code, value, if_true, if_false))

    def ret(self, value: int) -> None:
        self.items.append((RETURN, value, None, None))

    def assemble(self) -> bytes:
        def offset(at: int, label: str | None) -> int:
            skipped = 0 if label is None else self.labels[label] - at - 1
            if not 0 <= skipped <= 255:
                raise AssertionError(f"a jump of {skipped} instructions: classic BPF jumps 0 to 255 forward")
            return skipped

        return b"".join(_instruction(code, value, offset(at, if_true), offset(at, if_false))
                        for at, (code, value, if_true, if_false) in enumerate(self.items))


def _program_for(machine: str | None, whose: str) -> tuple[str, _Program, dict[str, int]]:
    """A filter's start for ``machine`` (default: this one): another architecture's calls, and x32's, go to the
    label "deny"; the call's number is loaded. Returns the machine, the program and its denied calls' numbers.

    Raises:
        ValueError: a machine not in :data:`DENIED`.
    """
    machine = platform.machine() if machine is None else machine
    if machine not in DENIED:
        raise ValueError(f"machine must be one of {sorted(DENIED)} for {whose} seccomp filter, got {machine!r}")
    arch, numbers = DENIED[machine]
    program = _Program()
    program.load(ARCH_OFFSET)
    program.jump(JUMP_IF_EQUAL, arch, None, "deny")
    program.load(NR_OFFSET)
    if machine == "x86_64":
        program.jump(JUMP_IF_GREATER_OR_EQUAL, X32_SYSCALL_BIT, "deny", None)
    return machine, program, numbers


def filter_program(machine: str | None = None) -> bytes:
    """The filter's instructions for ``machine`` (default: this one), as the bytes of a ``sock_filter`` array.

    Raises:
        ValueError: a machine not in :data:`DENIED`.
    """
    machine, program, numbers = _program_for(machine, "the kernel's")
    checked = CHECKED[machine]
    for number in sorted(numbers.values()):
        program.jump(JUMP_IF_EQUAL, number, "deny", None)
    program.jump(JUMP_IF_EQUAL, checked["socket"], "socket family", None)
    program.jump(JUMP_IF_EQUAL, checked["socketpair"], "socket family", None)
    program.jump(JUMP_IF_EQUAL, checked["setsockopt"], "socket option", None)
    program.jump(JUMP_IF_EQUAL, checked["fcntl"], "fcntl command", None)
    program.ret(RETURN_ALLOW)

    program.label("socket family")  # socket(domain, type, protocol), socketpair(domain, type, protocol, sv)
    program.load(argument_offset(0))
    program.jump(JUMP_IF_EQUAL, AF_UNIX, "allow", None)
    program.jump(JUMP_IF_EQUAL, AF_NETLINK, "allow", "deny")

    program.label("socket option")  # setsockopt(fd, level, optname, optval, optlen)
    program.load(argument_offset(1))
    program.jump(JUMP_IF_EQUAL, SOL_SOCKET, None, "allow")
    program.load(argument_offset(2))
    for option in sorted(BUFFER_OPTIONS.values()):
        program.jump(JUMP_IF_EQUAL, option, "deny", None)
    program.ret(RETURN_ALLOW)

    program.label("fcntl command")  # fcntl(fd, cmd, arg)
    program.load(argument_offset(1))
    for command in sorted(LOCK_COMMANDS.values()):
        program.jump(JUMP_IF_EQUAL, command, "no locks", None)
    program.jump(JUMP_IF_EQUAL, F_SETPIPE_SZ, "deny", "allow")

    program.label("no locks")
    program.ret(RETURN_ERRNO | errno.ENOLCK)

    program.label("allow")
    program.ret(RETURN_ALLOW)
    program.label("deny")
    program.ret(RETURN_ERRNO | errno.EPERM)
    return program.assemble()


KEYRING_CALLS = ("add_key", "request_key", "keyctl")


def keyring_program(machine: str | None = None) -> bytes:
    """The grading stage's own filter: the calls that reach keyrings (:data:`KEYRING_CALLS`) fail with
    ``EPERM``, everything else is allowed. A warm stage's user namespace serves every submission of its worker,
    and so does the keyring of its user: a key one submission's stage stored, the next one's could read
    (:mod:`autograder.sandbox.warm_stage`). The kernel, nested, has :func:`filter_program` besides.

    Raises:
        ValueError: a machine not in :data:`DENIED`.
    """
    _, program, numbers = _program_for(machine, "the stage's")
    for name in KEYRING_CALLS:
        program.jump(JUMP_IF_EQUAL, numbers[name], "deny", None)
    program.ret(RETURN_ALLOW)
    program.label("deny")
    program.ret(RETURN_ERRNO | errno.EPERM)
    return program.assemble()


def allowlist_program(machine: str | None = None) -> bytes:
    """The kernel's second filter, for the kernel once bubblewrap has made its sandbox: the system calls of
    :data:`KERNEL_CALLS` and no other. Those of :data:`DENIED` get ``EPERM`` here too (this filter, the newer,
    decides the error where both refuse), ``unshare`` ``EPERM``, ``clone`` ``EPERM`` when its flags ask for a
    namespace, ``clone3`` ``ENOSYS``, and any other call ``ENOSYS``, as a system without it would answer (the C
    library then falls back to an older call, as it does for ``clone3``)::

        load arch;   if arch != this machine's                 -> EPERM
        load nr;     if x86-64 and nr >= 0x40000000            -> EPERM
                     if nr in the denied calls or unshare      -> EPERM
                     if nr is clone3                           -> ENOSYS
                     if nr is clone -> load args[0]: any of NEW_NAMESPACE_FLAGS -> EPERM, else allow
                     if nr in KERNEL_CALLS (a binary search over their ranges of numbers) -> allow
                                                               -> ENOSYS

    Every namespace a process makes counts against its creator's account in every user namespace above it, up
    to the machine's (``user.max_*_namespaces``, a few thousand on a small machine), so a kernel that held them
    all would stop the sandbox of every other kernel of the grader's account; bubblewrap makes the kernel's own
    namespaces before it loads this filter (``--add-seccomp-fd``). What a call not yet known to this list may
    hold is refused by construction rather than by a list of known attacks.

    Raises:
        ValueError: a machine not in :data:`NAMESPACE_CALLS`.
    """
    from autograder.sandbox.system_calls import NUMBERS

    machine = platform.machine() if machine is None else machine
    if machine not in NAMESPACE_CALLS:
        raise ValueError(f"machine must be one of {sorted(NAMESPACE_CALLS)} for the kernel's allowlist filter, "
                         f"got {machine!r}")
    calls = NAMESPACE_CALLS[machine]
    allowed = sorted(NUMBERS[machine][name] for name in allowed_calls() if name in NUMBERS[machine])
    program = _Program()
    program.load(ARCH_OFFSET)
    program.jump(JUMP_IF_EQUAL, DENIED[machine][0], None, "deny")
    program.load(NR_OFFSET)
    if machine == "x86_64":
        program.jump(JUMP_IF_GREATER_OR_EQUAL, X32_SYSCALL_BIT, "deny", None)
    for number in sorted({*DENIED[machine][1].values(), calls["unshare"]}):
        program.jump(JUMP_IF_EQUAL, number, "deny", None)
    program.jump(JUMP_IF_EQUAL, calls["clone3"], "no such call", None)
    program.jump(JUMP_IF_EQUAL, calls["clone"], "clone flags", None)
    _search_ranges(program, _ranges(allowed), "allowed")
    program.label("clone flags")  # clone(flags, stack, parent_tid, child_tid, tls)
    program.load(argument_offset(0))
    program.jump(JUMP_IF_ANY_BIT, NEW_NAMESPACE_FLAGS, "deny", None)
    program.ret(RETURN_ALLOW)
    program.label("no such call")
    program.ret(RETURN_ERRNO | errno.ENOSYS)
    program.label("deny")
    program.ret(RETURN_ERRNO | errno.EPERM)
    return program.assemble()


def allowed_calls() -> list[str]:
    """The names of :data:`KERNEL_CALLS`, every group."""
    return [name for group in KERNEL_CALLS.values() for name in group.split()]


def _ranges(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as runs of consecutive ones, ``[(first, last), ...]``."""
    runs: list[tuple[int, int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


def _search_ranges(program: _Program, runs: list[tuple[int, int]], name: str) -> None:
    """Instructions that return allow when the loaded number lies in one of ``runs``, ``ENOSYS`` otherwise: a
    binary search (``jge`` on the first number of the middle run), each leaf with its own two returns, so that
    every jump stays short."""
    if len(runs) == 1:
        first, last = runs[0]
        program.jump(JUMP_IF_GREATER_OR_EQUAL, first, None, f"{name} outside")
        program.jump(JUMP_IF_GREATER_OR_EQUAL, last + 1, f"{name} outside", None)
        program.ret(RETURN_ALLOW)
        program.label(f"{name} outside")
        program.ret(RETURN_ERRNO | errno.ENOSYS)
        return
    middle = len(runs) // 2
    program.jump(JUMP_IF_GREATER_OR_EQUAL, runs[middle][0], f"{name}.upper", None)
    _search_ranges(program, runs[:middle], f"{name}.lower")
    program.label(f"{name}.upper")
    _search_ranges(program, runs[middle:], f"{name}.upper")


def _read_number(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def buffer_bound(open_files: int) -> int | None:
    """The bytes of socket and pipe buffers a filtered kernel with ``open_files`` descriptors can hold, at most:

        open_files * 2 * max(net.core.wmem_default, net.core.rmem_default, 16 pages of a pipe)

    Each socket or pipe is open in the kernel (none is in flight: the filter refuses ``sendmsg``). What a
    socket has sent and is not yet read is charged to its send buffer, which the filter keeps at its default; a
    write may pass it by one message of at most half the buffer, rounded up here to a second buffer (the 2). A
    pipe holds 16 pages. ``None`` where ``/proc/sys/net/core`` cannot be read.
    """
    sizes = [_read_number(f"/proc/sys/net/core/{name}") for name in ("wmem_default", "rmem_default")]
    if None in sizes:
        return None
    return open_files * 2 * max(*sizes, 16 * 4096)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(machine: str | None = None, program: bytes | None = None) -> None:
    """Install ``program`` (default :func:`filter_program`) on this thread (and so on everything it executes),
    after setting ``no_new_privs``, which an unprivileged process needs to install a filter.

    Raises:
        ValueError: a machine the filter does not know.
        OSError: the system refused (no seccomp in this kernel).
    """
    program = filter_program(machine) if program is None else program
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    for request, argument in ((PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1)),
                              (PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER))):
        third = ctypes.byref(fprog) if request == PR_SET_SECCOMP else ctypes.c_ulong(0)
        if libc.prctl(request, argument, third, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"prctl({request}) for the kernel's seccomp filter: {errno.errorcode.get(code, code)}")
