"""A warm grading stage: one sandbox per worker that has imported the stage's code, and a fresh sandbox of its
own, forked from it, for each submission.

A new bwrap sandbox and a new Python per submission (a cold stage) imports nbgrader, nbconvert, SQLAlchemy
and the stage's own modules again: about 0.6 s of every submission, a fifth of a worker's time. So the worker
starts one *server* (:class:`WarmStage`): bwrap as :func:`autograder.sandbox.stage.bwrap_stage_argv` gives it,
without any student's file, running ``python -m autograder.sandbox --warm FD`` (:func:`serve`), which imports
what grading needs and then waits for the worker's requests on a socket. For each submission it forks a child
that leaves every namespace it shares with the server and with earlier submissions before it reads anything
(:func:`_leave_the_server`), and that dies with its parent:

- a new process namespace, of which its grading process is the first process: it sees its own processes only,
  and when it ends every process it started ends with it, the student's kernel included;
- a new mount namespace, with a new ``/proc`` (every entry but the processes' read-only) and ``/dev/shm``,
  then the stage's two capped folders
  (:func:`autograder.sandbox.stage.enter`): nothing an earlier submission wrote is there, nothing this one
  writes outlives it. The server's own ``/tmp`` and ``/dev`` are read-only from its start (``/tmp`` holds the
  course's folders that bwrap binds where they are, often in the machine's temporary folder; the stage's
  ``TMPDIR`` is in ``/grading``);
- new IPC, network (a loopback of its own, up, for the kernel's sockets) and host-name namespaces;

then it drops its privileges as a cold stage does, and grades as a cold stage does (:func:`autograder.sandbox.stage.main`):
its request on standard input, its answer on standard output, its errors on standard error, three pipes of
the worker's. The student's notebook reaches it as a sealed copy in memory (:func:`sealed_copy`), which it copies
into its capped folder. The worker never reads the notebook; the server reads nothing a student sent, only the
worker's requests, and no process of a submission can reach it: not by its process ID (another namespace),
its memory (not dumpable), or its socket (closed in the child before anything else).

What two submissions of one worker share, and what keeps one from reaching the other through it:

- the server's memory as it was after its imports: each child's writes are its own (copy on write);
- the user namespace, and with it the kernel's account, which a worker already kept for all of its submissions
  (:mod:`autograder.sandbox.accounts`): a user's keyring would outlive a submission, so a stage can use none
  (:func:`autograder.sandbox.seccomp.keyring_program`; the kernel's filter refuses them too);
- the worker's control groups, one submission at a time: the worker waits until the last kernel's group is
  empty, restores the one file of them a stage can write (the kernel group's ``cgroup.procs``), and reads the
  counts of the out-of-memory killer before and after each submission (:mod:`autograder.pipeline`);
- the device files, where the grader is root: copies that no sandbox can change
  (:func:`autograder.sandbox.stage.private_devices`).

A submission past its wall-clock limit ends the whole server, with its sandbox and every process in it; the
next submission starts a new one. So does a server that died, or a task of another course.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from autograder.sandbox.stage import (
    MAX_ERROR_BYTES,
    StageOutcome,
    _drain,
    _kill_group,
    max_response_bytes,
    set_stage_limits,
)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_PR_SET_DUMPABLE = 4
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 1
MEGABYTE = 1024 * 1024
SHARED_PLACES = ("/tmp", "/dev")  # the server's writable places from bwrap: read-only before any child
SCRATCH_BYTES = 16 * MEGABYTE  # a child's new /dev/shm (as the /tmp bwrap gives a cold stage)
DESCRIPTORS = 4  # a request's: standard input, output and error of the child, and the student's notebook
RECEIVED = "/grading/received.ipynb"  # where a child keeps the student's notebook, inside its capped folder
STARTED = b"ready"
START_SECONDS = 120  # for the server's imports, on a busy machine


# ---------------------------------------------------------------------------------------------------------
# Inside the sandbox: the server and its children
# ---------------------------------------------------------------------------------------------------------


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, kind: str | None, flags: int, options: str | None = None) -> None:
    _check(_libc().mount(_encoded(source), _encoded(target), _encoded(kind), flags, _encoded(options)),
           f"mount {target}")


def preload() -> None:
    """Import what grading a submission imports (:mod:`autograder.sandbox.grading_stage` and its late imports)."""
    from nbgrader.api import Gradebook  # noqa: F401
    from nbgrader.converters import Autograde, GenerateFeedback  # noqa: F401
    from nbgrader.coursedir import CourseDirectory  # noqa: F401
    from nbgrader.preprocessors import Execute  # noqa: F401



def serve(control_descriptor: int, grade=None) -> None:
    """The server: imports (:func:`preload`), makes its shared places read-only, says it is ready, then grades
    each request of the worker in a child of its own (:func:`_child`) and answers the child's exit code, until the
    worker closes the socket. ``grade(received)``: what a child runs once out of the server's namespaces
    (default :func:`autograder.sandbox.stage.main`; a test's own code)."""
    # Nothing else the worker's bwrap passed on stays open (the user namespace's descriptor, bwrap's own):
    # each child inherits what the server holds.
    os.closerange(3, control_descriptor)
    os.closerange(control_descriptor + 1, os.sysconf("SC_OPEN_MAX"))
    preload()
    for place in SHARED_PLACES:
        _mount(None, place, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)
    _check(_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
    control = socket.socket(fileno=control_descriptor)
    control.send(STARTED)
    while True:
        try:
            message, descriptors, _, _ = socket.recv_fds(control, 16, DESCRIPTORS)
        except OSError:
            os._exit(0)
        if not message or len(descriptors) != DESCRIPTORS:
            os._exit(0)
        child = os.fork()
        if child == 0:
            control.close()
            _child(*descriptors, grade=grade)
        for descriptor in descriptors:
            os.close(descriptor)
        _, status = os.waitpid(child, 0)
        control.send(struct.pack("i", os.waitstatus_to_exitcode(status)))


def _child(stdin: int, stdout: int, stderr: int, notebook: int, grade=None) -> None:
    """A submission's first process: its standard streams are the worker's pipes; it leaves the server's
    namespaces and starts the grading process, the first of its new process namespace, and ends with its code."""
    for descriptor, standard in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(descriptor, standard)
        os.close(descriptor)
    _die_with_parent()
    os.setsid()  # a session and process group of its own: no signal to its group reaches the server
    try:
        _check(_libc().unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS),
               "cannot leave the server's namespaces")
        grading = os.fork()
    except OSError as error:
        print(f"autograder: {error}", file=sys.stderr, flush=True)
        os._exit(70)
    if grading == 0:
        # Ended with its parent (the out-of-memory killer may choose it), and with it its whole namespace: nothing
        # of this submission runs on beside the next one.
        _die_with_parent()
        try:
            _leave_the_server()
        except OSError as error:
            print(f"autograder: a submission's sandbox could not be made: {error}", file=sys.stderr, flush=True)
            os._exit(70)
        from autograder.sandbox import phases
        from autograder.sandbox.stage import main

        random.seed()  # not the server's state, which every child would repeat
        phases.MARKS.clear()
        phases.mark("main")
        (grade or main)(received=(notebook, RECEIVED))  # main ends the process itself
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)
    # Only the grading process holds the worker's pipes open: the worker reads to their end.
    null = os.open(os.devnull, os.O_RDWR)
    for standard in (0, 1, 2):
        os.dup2(null, standard)
    os.close(notebook)
    _, status = os.waitpid(grading, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def proc_machine_entries(proc: str = "/proc") -> list[str]:
    """The entries of ``proc`` that are the machine's, not a process's: every one but the process folders and the
    links to them. Linux keeps one mode per such entry for every ``/proc`` of the machine, and a stage's root is
    the machine's root where the grader is root: writable, a ``chmod`` there would change it for every process of
    the machine. Each is made read-only (bwrap's ``--proc`` does so for ``sys``, ``sysrq-trigger``, ``irq`` and
    ``bus`` alone), readable as before."""
    entries = []
    for name in sorted(os.listdir(proc)):
        path = os.path.join(proc, name)
        if not name.isdigit() and not os.path.islink(path):
            entries.append(path)
    return entries


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """This process is killed when its parent ends (and ends now if the parent already has)."""
    parent = os.getppid()
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
    if os.getppid() != parent:
        os._exit(70)


def _leave_the_server() -> None:
    """In a submission's grading process, first of its process namespace: its own mounts (none shared back),
    a new ``/proc`` whose machine's entries are read-only (:func:`proc_machine_entries`), a new ``/dev/shm``, its loopback up, and no keyring (:func:`autograder.sandbox.seccomp.keyring_program`)."""
    from autograder.sandbox import seccomp

    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for path in proc_machine_entries():
        _mount(path, path, None, _MS_BIND | _MS_REC)
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={SCRATCH_BYTES},mode=1777")
    seccomp.install(program=seccomp.keyring_program())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b""))


def keep_received(notebook: int, path: str, limit: int) -> None:
    """Copy at most ``limit`` bytes of the open file ``notebook`` into ``path`` (new, 0600), then close it."""
    with os.fdopen(notebook, "rb") as source, open(path, "xb") as target:
        os.fchmod(target.fileno(), 0o600)
        left = limit
        while left > 0 and (chunk := source.read(min(left, 1024 * 1024))):
            target.write(chunk)
            left -= len(chunk)


# ---------------------------------------------------------------------------------------------------------
# In the worker
# ---------------------------------------------------------------------------------------------------------


@dataclass
class WarmStage:
    """A running server (see the module docstring), for the tasks whose :func:`server_key` is ``key``."""

    key: tuple
    process: subprocess.Popen
    control: socket.socket
    errors: list[bytes]
    context: object = None  # what the caller keeps with the server (its control groups), closed with it

    @classmethod
    def start(cls, key: tuple, argv: list[str], environment: dict[str, str], limits, *, join_group=None,
              pass_fds: tuple[int, ...] = (), context: object = None) -> WarmStage:
        """Start the server ``argv`` (a cold stage's bwrap command line, whose program gets ``--warm FD``) and
        wait until it has imported what it needs.

        Raises:
            OSError: it could not start, or ended or took more than :data:`START_SECONDS` before it was ready
                (its standard error's end is in the message).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

        def before_exec() -> None:
            if join_group is not None:
                join_group()
            set_stage_limits(limits)

        try:
            process = subprocess.Popen(
                [*argv, "--warm", str(theirs.fileno())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=environment, start_new_session=True,
                pass_fds=(theirs.fileno(), *pass_fds), preexec_fn=before_exec,  # noqa: PLW1509 (see run_stage)
            )
        finally:
            theirs.close()
        errors: list[bytes] = []
        threading.Thread(target=_drain, args=(process.stderr, MAX_ERROR_BYTES, errors), daemon=True).start()
        server = cls(key, process, ours, errors, context)
        ready, _, _ = select.select([ours], [], [], START_SECONDS)
        if not ready or ours.recv(16) != STARTED:
            server.close()
            time.sleep(0.1)  # the end of its standard error
            raise OSError(f"the grading stage's server did not start: {server.error_text()[-2000:] or 'no output'}")
        atexit.register(server.close)
        return server

    def alive(self) -> bool:
        return self.process.poll() is None

    def error_text(self) -> str:
        return b"".join(self.errors).removesuffix(b"\0over").decode("utf-8", "backslashreplace")

    def grade(self, request: bytes, notebook: Path, seconds: float) -> StageOutcome:
        """Grade one submission in a child of the server: ``request`` on its standard input, ``notebook`` as a
        sealed copy (:func:`sealed_copy`) handed over; its answer kept up to :func:`max_response_bytes`, the end of its
        standard error; the whole server ended after ``seconds``. Never raises for what the child does."""
        opened = sealed_copy(notebook)
        pipes = [os.pipe() for _ in range(3)]  # the child's standard input, output and error
        given = [pipes[0][0], pipes[1][1], pipes[2][1], opened]
        try:
            socket.send_fds(self.control, [b"g"], given)
        except OSError as error:
            for descriptor in (*given, pipes[0][1], pipes[1][0], pipes[2][0]):
                os.close(descriptor)
            self.close()
            return StageOutcome(b"", self.error_text().encode(), None, f"the grading stage's server was gone ({error})")
        for descriptor in given:
            os.close(descriptor)
        response: list[bytes] = []
        errors: list[bytes] = []
        readers = [
            threading.Thread(target=_drain, args=(os.fdopen(pipes[1][0], "rb"), max_response_bytes(), response),
                             daemon=True),
            threading.Thread(target=_drain, args=(os.fdopen(pipes[2][0], "rb"), MAX_ERROR_BYTES, errors), daemon=True),
            threading.Thread(target=_write_all, args=(pipes[0][1], request), daemon=True),
        ]
        for reader in readers:
            reader.start()
        stopped, returncode = None, None
        ready, _, _ = select.select([self.control], [], [], seconds)
        answer = self.control.recv(16) if ready else b""
        if len(answer) == 4:
            returncode = struct.unpack("i", answer)[0]
        else:
            stopped = (f"grading took longer than {seconds:g} seconds in all and was stopped" if not ready
                       else "the grading stage's server ended while grading")
            self.close()
        for reader in readers:
            reader.join(timeout=30)
        output = b"".join(response)
        if output.endswith(b"\0over"):
            output, stopped = b"", stopped or f"the grading stage answered more than {max_response_bytes()} bytes"
        return StageOutcome(output, b"".join(errors).removesuffix(b"\0over"), returncode, stopped)

    def close(self) -> None:
        """End the server, its sandbox and every process in it; release its context. Never raises."""
        try:
            self.control.close()
        except OSError:
            pass
        _kill_group(self.process)
        close = getattr(self.context, "close", None)
        if close is not None:
            close()
        self.context = None


def sealed_copy(path: Path, limit: int | None = None) -> int:
    """An anonymous file in memory holding the first ``limit`` bytes of ``path`` (opened without following a
    link), copied by the system (this process never reads them), sealed against any change and rewound: a
    stage that holds it can read it, and neither write it nor, through ``/proc/self/fd``, the grader's file."""
    from autograder.student.sanitize import MAX_NOTEBOOK_BYTES

    limit = MAX_NOTEBOOK_BYTES + 1 if limit is None else limit  # one byte past the cap: the stage says it is too large
    copy = os.memfd_create("submission", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            left = limit
            while left > 0 and (sent := os.sendfile(copy, source, None, min(left, 8 * MEGABYTE))):
                left -= sent
        finally:
            os.close(source)
        fcntl.fcntl(copy, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE)
        os.lseek(copy, 0, os.SEEK_SET)
    except BaseException:
        os.close(copy)
        raise
    return copy


def _write_all(descriptor: int, data: bytes) -> None:
    try:
        with os.fdopen(descriptor, "wb") as pipe:
            pipe.write(data)
    except OSError:  # the child ended without reading it all
        pass
