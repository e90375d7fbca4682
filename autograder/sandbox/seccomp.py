r"""A seccomp filter that keeps a student's kernel from holding what no limit of its own counts.

Without control groups (:mod:`autograder.sandbox.cgroups`), the kernel's memory is bounded by its address space
(``RLIMIT_AS``) and by the size of its ``/tmp`` and ``/dev/shm`` (a tmpfs of ``--tmp-mb``). Two kinds of memory
escape both: an anonymous memory file (``memfd_create``, ``memfd_secret``), whose pages written through
``write`` are never mapped, and System V shared memory (``shmget``), whose segments live in the IPC namespace
until it ends. A kernel that makes either can fill the machine. And some objects count against the grader's
own account, machine-wide, whatever user the kernel is inside its namespaces: inotify and fanotify instances
and POSIX message queues (their limits are per real user); a kernel that holds them all leaves none to the
instructor's servers and the other kernels of the batch. The launcher installs this filter before it starts
the kernel (:func:`install`), and every process of the kernel inherits it; those calls then fail with
``EPERM``, as if the system forbade them. Nothing the course, NumPy, PyTorch or ipykernel run needs them.

The filter is a classic BPF program over ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4)::

    load arch;   if arch != this machine's           -> EPERM   (no other ABI: i386's int 0x80 on x86-64)
    load nr;     if x86-64 and nr >= 0x40000000      -> EPERM   (the x32 ABI's numbers)
                 if nr in the denied calls            -> EPERM
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

# (audit architecture, {system call: number}) per machine, as platform.machine() names it.
DENIED: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"shmget": 29, "shmat": 30, "memfd_create": 319, "memfd_secret": 447,
                            "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300, "mq_open": 240}),
    "aarch64": (0xC00000B7, {"shmget": 194, "shmat": 196, "memfd_create": 279, "memfd_secret": 447,
                             "inotify_init1": 26, "fanotify_init": 262, "mq_open": 180}),
}
X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes (linux/filter.h, linux/bpf_common.h) and seccomp's return values (linux/seccomp.h).
LOAD_WORD_ABSOLUTE = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_IF_GREATER_OR_EQUAL = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
RETURN_ALLOW = 0x7FFF0000
RETURN_ERRNO = 0x00050000
NR_OFFSET, ARCH_OFFSET = 0, 4

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def _instruction(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> bytes:
    """One ``struct sock_filter``: u16 code, u8 jt, u8 jf, u32 k, in the machine's byte order."""
    return struct.pack("=HBBI", code, jump_true, jump_false, k)


def filter_program(machine: str | None = None) -> bytes:
    """The filter's instructions for ``machine`` (default: this one), as the bytes of a ``sock_filter`` array.

    Raises:
        ValueError: a machine not in :data:`DENIED`.
    """
    machine = platform.machine() if machine is None else machine
    if machine not in DENIED:
        raise ValueError(f"machine must be one of {sorted(DENIED)} for the kernel's seccomp filter, got {machine!r}")
    arch, numbers = DENIED[machine]
    checks = [(JUMP_IF_GREATER_OR_EQUAL, X32_SYSCALL_BIT)] if machine == "x86_64" else []
    checks += [(JUMP_IF_EQUAL, number) for number in sorted(numbers.values())]
    # Layout: 0 load arch, 1 arch check, 2 load nr, 3.. checks, then allow, then deny.
    deny = 3 + len(checks) + 1
    program = [
        _instruction(LOAD_WORD_ABSOLUTE, ARCH_OFFSET),
        _instruction(JUMP_IF_EQUAL, arch, 0, deny - 2),  # jumps count from the next instruction
        _instruction(LOAD_WORD_ABSOLUTE, NR_OFFSET),
    ]
    for index, (code, value) in enumerate(checks, start=3):
        program.append(_instruction(code, value, deny - index - 1, 0))
    program += [_instruction(RETURN, RETURN_ALLOW), _instruction(RETURN, RETURN_ERRNO | errno.EPERM)]
    return b"".join(program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(machine: str | None = None) -> None:
    """Install :func:`filter_program` on this thread (and so on everything it executes), after setting
    ``no_new_privs``, which an unprivileged process needs to install a filter.

    Raises:
        ValueError: a machine the filter does not know.
        OSError: the system refused (no seccomp in this kernel).
    """
    program = filter_program(machine)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    for request, argument in ((PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1)),
                              (PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER))):
        third = ctypes.byref(fprog) if request == PR_SET_SECCOMP else ctypes.c_ulong(0)
        if libc.prctl(request, argument, third, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"prctl({request}) for the kernel's seccomp filter: {errno.errorcode.get(code, code)}")
