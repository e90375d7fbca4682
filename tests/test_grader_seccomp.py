"""autograder.sandbox.seccomp: the kernel's filter refuses anonymous memory files and System V shared memory.

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
    "x86_64": {"shmget": 29, "shmat": 30, "memfd_create": 319, "memfd_secret": 447, "inotify_init": 253,
               "inotify_init1": 294, "fanotify_init": 300, "mq_open": 240, "getpid": 39, "write": 1},
    "aarch64": {"shmget": 194, "shmat": 196, "memfd_create": 279, "memfd_secret": 447, "inotify_init1": 26,
                "fanotify_init": 262, "mq_open": 180, "getpid": 172, "write": 64},
}
# AUDIT_ARCH_* = EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE (linux/audit.h, linux/elf-em.h)
AUDIT_ARCH = {"x86_64": 62 | 0x80000000 | 0x40000000, "aarch64": 183 | 0x80000000 | 0x40000000}
HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}
DENIED_CALLS = ("shmget", "shmat", "memfd_create", "memfd_secret", "inotify_init", "inotify_init1", "fanotify_init",
                "mq_open")  # inotify_init: x86-64 only (arm64 has inotify_init1 alone)
ALLOW, EPERM = 0x7FFF0000, 0x00050001


def run_filter(program: bytes, nr: int, arch: int) -> int:
    """What the program returns for a call (``nr``, ``arch``): a classic-BPF interpreter of the four
    instructions a seccomp filter of this kind uses (ld [k], jeq #k, jge #k, ret #k)."""
    data = struct.pack("=iI", nr, arch) + bytes(56)  # struct seccomp_data: nr, arch, ip, args[6]
    instructions = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    accumulator, pc = 0, 0
    while True:
        code, jump_true, jump_false, k = instructions[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35):  # BPF_JMP | BPF_JEQ / BPF_JGE, against k
            taken = accumulator == k if code == 0x15 else accumulator >= k
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
    for nr in range(460):
        if nr not in denied.values():
            assert run_filter(program, nr, arch) == ALLOW, nr
    other = AUDIT_ARCH["aarch64" if machine == "x86_64" else "x86_64"]
    assert run_filter(program, numbers["getpid"], other) == EPERM  # another ABI of the same machine
    assert run_filter(program, numbers["getpid"], 0x40000003) == EPERM  # i386 (int 0x80 on x86-64)
    if machine == "x86_64":
        assert run_filter(program, 0x40000000 | numbers["getpid"], arch) == EPERM  # the x32 ABI


@pytest.mark.parametrize("machine", sorted(KERNEL_NUMBERS))
def test_the_numbers_are_the_system_headers_where_they_are_installed(machine):
    header = HEADERS[machine]
    if not header.is_file():
        pytest.skip(f"{header} is not installed (Debian: linux-libc-dev)")
    text = header.read_text()
    denied = {name: KERNEL_NUMBERS[machine][name] for name in DENIED_CALLS if name in KERNEL_NUMBERS[machine]}
    for name, number in denied.items():
        assert f"#define __NR_{name} {number}" in re.sub(r"[ \t]+", " ", text), name
    assert seccomp.DENIED[machine][1] == denied
    assert seccomp.DENIED[machine][0] == AUDIT_ARCH[machine]


def test_an_unknown_machine_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"machine must be one of \['aarch64', 'x86_64'\].*'riscv64'"):
        seccomp.filter_program("riscv64")


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
import numpy, torch, ipykernel, zmq  # what a graded kernel imports
seen["torch"] = float((torch.ones(3, 3) @ torch.ones(3, 3)).sum())
seen["pid"] = os.getpid() > 0
print(json.dumps(seen))
"""


@pytest.mark.skipif(platform.machine() not in seccomp.DENIED, reason=f"no filter for {platform.machine()}")
@pytest.mark.parametrize("mode", ["filtered", "plain"])
def test_installed_the_filter_refuses_the_calls_and_the_kernels_imports_still_work(mode):
    completed = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                               check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    seen = json.loads(completed.stdout.strip().splitlines()[-1])
    refused = "EPERM" if mode == "filtered" else "allowed"
    assert seen == {"memfd_create": refused, "shmget": refused, "inotify_init1": refused, "mq_open": refused,
                    "torch": 27.0, "pid": True}
