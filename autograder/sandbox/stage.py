"""The grading stage: one submission graded in a sandbox of its own, from the student's bytes to plain data.

Everything that reads what a student sent runs here, never in the grader's worker: the notebook's JSON and
its repair (:mod:`autograder.student.sanitize`), nbgrader's autograde with the student's kernel, the reports
of the hidden tests (:mod:`autograder.verdicts`), the cleaning of outputs and markdown, and nbconvert's
rendering of the feedback page (:mod:`autograder.sandbox.grading_stage`). The worker hands the stage its task and the
student's bytes, and takes back one JSON document of bounded size, which :mod:`autograder.sandbox.crossing` checks
field by field before anything of it is used.

The worker starts one sandbox for its stages (:mod:`autograder.sandbox.warm_stage`) as

    bwrap --unshare-all --die-with-parent --new-session --uid 0 --gid 0 --cap-drop ALL
          --cap-add CAP_SYS_ADMIN --cap-add CAP_SETPCAP --cap-add CAP_NET_ADMIN
          --ro-bind <the system, the Python installation, the course's packages, the template course>
          --dir /grading --remount-ro /
          python -m autograder.sandbox --warm FD

with resource limits (address space, CPU seconds, file size; its control group when the machine has them),
and forks each submission's stage from it: the fork leaves the sandbox's namespaces for new ones of its own,
then runs :func:`main` with the student's notebook as an open file; past a wall-clock limit the whole sandbox
is killed. Inside, before it reads anything (:func:`enter`), the stage mounts the two size- and
file-count-capped folders it may write to:

- ``/grading``: nbgrader's course directory (the copy of the template course, the autograded notebook, the
  feedback page);
- ``/grading/kernel``: everything the student's kernel can write: its ``/tmp``, its ``/dev/shm``, its
  runtime folder (the connection file and sockets) and its log;

then drops every capability (bounding set included) but what its kernel's launcher needs
(:func:`kept_capabilities`), forbids new privileges and makes itself not dumpable, so that the kernel, in a
sandbox nested in this one (:mod:`autograder.sandbox.launcher`), can neither read its memory nor trace it.
A grader run as root gives the stage a user namespace that maps a second user, the kernel's account on the
machine (:mod:`autograder.sandbox.accounts`); the kernel then runs as that user, another than the stage's.

Without bubblewrap (``--no-sandbox``) the stage runs as a plain process under the same resource and time
limits, its folders on the grader's disk, uncapped; the grader says so on the terminal and in report.txt.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import os
import pickle
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from autograder import REPOSITORY
from autograder.sandbox import accounts
from autograder.sandbox.launcher import (
    ETC_FILES,
    MEGABYTE,
    NO_PTYS,
    PROC_SYS_READ_ONLY,
    SYSTEM_FOLDERS,
    Limits,
    system_binds,
)

ROOT = "/grading"
KERNEL_FOLDER = "kernel"
HOME = f"{ROOT}/home"  # the stage's HOME and TMPDIR
STAGE_MEMORY_MB = 2048  # nbgrader, nbconvert, SQLite and the verdicts' checks, beside the kernel
STAGE_FILES = 20_000  # files and folders in /grading: a course copy is a few dozen
KERNEL_FILES = 10_000  # files and folders the kernel may create, all of its writable places together
MAX_RESPONSE_BYTES = 96 * MEGABYTE
MAX_ERROR_BYTES = 256 * 1024
STARTUP_SECONDS = 300  # beyond the notebook's cap: nbgrader's start, the verdicts and the feedback page


@dataclass(frozen=True)
class StageOutcome:
    """What came back from a stage: its standard output (the response, at most ``MAX_RESPONSE_BYTES``), the
    end of its standard error, its exit code, and why the worker stopped it (None when it ended itself)."""

    response: bytes
    errors: bytes
    returncode: int | None
    stopped: str | None = None


def max_response_bytes() -> int:
    """The most a stage may answer (read at each call, so that a test can lower it)."""
    return MAX_RESPONSE_BYTES


def stage_seconds(limits: Limits) -> int:
    """The wall-clock limit of a whole stage: the notebook's cap and the time to start and finish around it."""
    return limits.notebook_seconds + STARTUP_SECONDS


def stage_quota_bytes(limits: Limits, notebook_bytes: int) -> int:
    """Bytes of ``/grading``: the course copy (five copies of the notebook at most: as received by a warm stage,
    submitted, autograded, the cleaned copy, the feedback page) and the gradebook."""
    return 5 * notebook_bytes + 4 * limits.notebook_output_kb * 1024 + 64 * MEGABYTE


def kernel_quota_bytes(limits: Limits) -> int:
    """Bytes of ``/grading/kernel``: the kernel's /tmp and /dev/shm, its sockets and its log."""
    return limits.tmp_mb * MEGABYTE + 8 * MEGABYTE


def stage_readable_folders() -> list[str]:
    """What the stage reads besides the system: the Python installation, its virtual environment and the
    course's two packages, whole (the stage is the grader's own code; the student's kernel, nested in it,
    is given far less)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    wanted = {os.path.realpath(path) for path in prefixes}
    wanted |= {os.path.join(os.path.realpath(REPOSITORY), package) for package in ("autograder", "posenc_ref")}
    wanted = {path for path in wanted if not any(_inside(path, system) for system in SYSTEM_FOLDERS)}
    return sorted(path for path in wanted if not any(other != path and _inside(path, other) for other in wanted))


def traversed_folders(bound: list[str]) -> list[str]:
    """The folders above the ``bound`` paths, outermost first, but those that a system folder or a bound path
    already holds."""
    holders = [*SYSTEM_FOLDERS, *bound]
    above = {str(parent) for path in bound for parent in Path(path).parents if str(parent) != "/"}
    above = {folder for folder in above if not any(_inside(folder, holder) for holder in holders)}
    return sorted(above, key=lambda folder: (folder.count("/"), folder))


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


DEVICES = ("null", "zero", "full", "random", "urandom", "tty")  # what bwrap's --dev binds from the machine's /dev
NOBODY = 65534  # the machine's account that no sandbox maps


def private_devices(folder: Path) -> list[str]:
    """For a grader run as root: bwrap arguments that bind copies of :data:`DEVICES`, made in ``folder`` (new),
    over the ones ``--dev`` binds. A sandbox's root is the machine's root there, and owns the machine's device
    files: it could change their mode for every process of the machine (``chmod 0 /dev/null``). The copies belong to
    :data:`NOBODY`, whom no sandbox maps, so neither a stage nor a kernel can change them (and a change would be
    theirs, not the machine's); the kernel's own ``--dev`` binds them from the stage's ``/dev``. Empty for a grader
    that is not root, whose sandboxes map its own account, which owns no device; and where the copies cannot be
    opened (``folder`` on a file system mounted ``nodev``), in which case ``folder`` is left empty.

    Raises:
        OSError: ``folder`` could not be made.
    """
    if os.geteuid() != 0:
        return []
    folder.mkdir(mode=0o700)
    argv = []
    for name in DEVICES:
        copy = folder / name
        os.mknod(copy, stat.S_IFCHR | 0o666, os.stat(f"/dev/{name}").st_rdev)
        os.chmod(copy, 0o666)
        os.chown(copy, NOBODY, NOBODY)
        argv += ["--dev-bind", str(copy), f"/dev/{name}"]
    try:
        os.close(os.open(folder / "null", os.O_WRONLY))
    except OSError:
        for name in DEVICES:
            (folder / name).unlink()
        return []
    return argv


def bwrap_stage_argv(
    template: Path,
    jupyter: Path,
    extra: tuple[Path, ...] = (),
    writable: tuple[Path, ...] = (),
    user_namespace: int | None = None,
    devices: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """The bwrap command line of the stages' sandbox (the server of :mod:`autograder.sandbox.warm_stage`, whose
    children are the stages): read-only the system, Python, the course's packages, the template course with its
    kernelspec and the ``extra`` folders (the kernel's view of the course), no student's file; writable the
    ``writable`` files (the kernel's ``cgroup.procs``), and nothing else until :func:`enter` mounts ``/grading``.
    ``user_namespace``: a descriptor of the namespace that maps the kernel's account
    (:func:`autograder.sandbox.accounts.user_namespace`; the caller passes it to bwrap), or None for a new one with
    the caller's user alone. ``devices``: :func:`private_devices`'s arguments."""
    argv = [shutil.which("bwrap") or "bwrap"]
    # Every namespace but the control groups': the kernel's launcher moves the kernel into its group (a sibling
    # of the stage's, which a namespace rooted at the stage's group would refuse).
    if user_namespace is None:
        argv += ["--unshare-user", "--uid", "0", "--gid", "0"]
    else:
        argv += ["--userns", str(user_namespace)]
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--die-with-parent", "--new-session"]
    # CAP_SYS_ADMIN for the two mounts, CAP_SETPCAP to empty the bounding set after them (drop_privileges).
    # What the kernel's launcher and nbgrader need stays (kept_capabilities).
    # CAP_NET_ADMIN for each stage to put up the loopback of its own network namespace (warm_stage).
    argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_NET_ADMIN"]
    kept = ("CAP_SETFCAP",) if user_namespace is None else ("CAP_KILL", "CAP_SETUID", "CAP_SETGID")
    for capability in kept:
        argv += ["--cap-add", capability]
    # Nothing of the stage's own goes to /tmp (its HOME and TMPDIR are in /grading): a small one, for libraries
    # that insist.
    # No pseudo-terminal (as the kernel has none, launcher.NO_PTYS): a devpts instance would be the server's, one for
    # all of its submissions.
    argv += ["--proc", "/proc", *PROC_SYS_READ_ONLY, "--dev", "/dev", *devices, *NO_PTYS]
    argv += ["--size", str(16 * MEGABYTE), "--tmpfs", "/tmp"]
    readable = [*stage_readable_folders(), *(os.path.realpath(path) for path in (template, jupyter, *extra))]
    # The folders that lead to what is bound, made here rather than by bwrap (which makes them 0700): the
    # kernel's launcher, once it is the kernel's account, passes through them to /etc, Python and the kernel's view.
    etc = [f"/etc/{name}" for name in ETC_FILES]
    for folder in traversed_folders([*etc, *readable, *map(str, writable)]):
        argv += ["--perms", "0755", "--dir", folder]
    argv += system_binds()
    for path in readable:
        argv += ["--ro-bind", path, path]
    for path in writable:  # the kernel's control group's cgroup.procs, and nothing else of /sys
        argv += ["--bind", str(path), str(path)]
    argv += ["--dir", ROOT, "--remount-ro", "/", "--chdir", "/tmp", "--"]
    return argv + [sys.executable, "-m", "autograder.sandbox"]


def stage_environment(jupyter: Path, home: str) -> dict[str, str]:
    """The stage's whole environment, from an allowlist (no secret of the grader's reaches it)."""
    from autograder.sandbox.launcher import PASSED_THROUGH

    environment = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    environment.update(
        PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        HOME=home,
        TMPDIR=home,
        LANG="C.UTF-8",
        PYTHONPATH=os.path.realpath(REPOSITORY),
        JUPYTER_PATH=str(jupyter),
        JUPYTER_CONFIG_DIR=os.path.join(home, ".jupyter"),
        JUPYTER_DATA_DIR=os.path.join(home, ".jupyter-data"),
        MPLBACKEND="Agg",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    environment.setdefault("OMP_NUM_THREADS", "1")
    return environment


def set_stage_limits(limits: Limits) -> None:
    """The stage's own resource limits (the kernel sets lower ones for itself): set in the child before exec,
    or by the stage's program itself where the caller starts it with ``limits_before_exec=False``."""
    memory = (max(limits.memory_mb, 1024) + STAGE_MEMORY_MB) * MEGABYTE if limits.memory_mb else 0
    cpu = stage_seconds(limits) + limits.cpu_seconds if limits.cpu_seconds else 0
    for kind, value in (
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, max(limits.file_size_mb, 64) * MEGABYTE if limits.file_size_mb else 0),
        (resource.RLIMIT_CORE, 0),
    ):
        if value or kind == resource.RLIMIT_CORE:
            _, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value))


def _drain(stream, limit: int, into: list[bytes]) -> None:
    """Read ``stream`` to its end, keeping its first ``limit`` bytes (the rest is read and dropped, so that the
    writer never blocks)."""
    kept = 0
    while chunk := stream.read(65536):
        if kept < limit:
            into.append(chunk[: limit - kept])
        kept += len(chunk)
    into.append(b"" if kept <= limit else b"\0over")


def run_stage(
    request: bytes,
    argv: list[str],
    environment: dict[str, str],
    limits: Limits,
    *,
    cwd: str | None = None,
    join_group=None,
    seconds: float | None = None,
    limits_before_exec: bool = True,
    activity: str = "grading",
    pass_fds: tuple[int, ...] = (),
) -> StageOutcome:
    """Run a stage: ``request`` on its standard input, its standard output kept up to
    :data:`MAX_RESPONSE_BYTES`, the end of its standard error; its whole process group killed after
    ``seconds`` of wall-clock time (default :func:`stage_seconds`; ``activity`` names what took too long).
    ``join_group`` (a control group's ``join``) runs in the child before it executes bwrap; ``pass_fds`` stay
    open in it (the stage's user namespace). With ``limits_before_exec`` False (a caller with threads of its own, such as a
    server, where code run between fork and exec may deadlock), nothing runs before exec and the program sets
    :func:`set_stage_limits` itself before it reads ``request``. Never raises for what the stage does."""

    def before_exec() -> None:
        if join_group is not None:
            join_group()
        set_stage_limits(limits)

    if not limits_before_exec and join_group is not None:
        raise ValueError("join_group runs before exec: it needs limits_before_exec=True")
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=cwd,
        start_new_session=True, pass_fds=pass_fds,
        preexec_fn=before_exec if limits_before_exec else None,  # noqa: PLW1509 (the worker starts no threads)
    )
    response: list[bytes] = []
    errors: list[bytes] = []
    readers = [
        threading.Thread(target=_drain, args=(process.stdout, max_response_bytes(), response), daemon=True),
        threading.Thread(target=_drain, args=(process.stderr, MAX_ERROR_BYTES, errors), daemon=True),
    ]
    for reader in readers:
        reader.start()
    stopped = None
    try:
        process.stdin.write(request)
        process.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    seconds = stage_seconds(limits) if seconds is None else seconds
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        stopped = f"{activity} took longer than {seconds:g} seconds in all and was stopped"
    finally:
        _kill_group(process)
    for reader in readers:
        reader.join(timeout=30)
    output = b"".join(response)
    if output.endswith(b"\0over"):
        output, stopped = b"", stopped or f"the grading stage answered more than {max_response_bytes()} bytes"
    return StageOutcome(output, b"".join(errors).removesuffix(b"\0over"), process.returncode, stopped)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


# ---------------------------------------------------------------------------------------------------------
# Inside the stage
# ---------------------------------------------------------------------------------------------------------

CAP_KILL = 5
CAP_SETGID = 6
CAP_SETUID = 7
CAP_SETFCAP = 31
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapabilityData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def mount_quota_folder(path: str, size_bytes: int, files: int, mode: int = 0o700) -> None:
    """A new tmpfs on ``path`` of at most ``size_bytes`` bytes and ``files`` files and folders.

    Raises:
        OSError: the mount failed (the stage then grades nothing).
    """
    options = f"size={size_bytes},nr_inodes={files},mode={mode:04o}".encode()
    if _libc().mount(b"tmpfs", path.encode(), b"tmpfs", 0, options) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot mount a tmpfs on {path}: {os.strerror(error)}")


_MS_REMOUNT = 32
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8


def hide_other_users_processes() -> None:
    """Remount the stage's ``/proc`` with ``hidepid=2``: a process sees there only the processes and threads of
    its own user. The kernel's ``/proc`` is this one, bound (a sandbox nested in bwrap cannot mount its own), so
    a kernel that runs as its own account sees none of the stage's, not even the threads that start after it.

    Raises:
        OSError: the remount failed (the stage then grades nothing).
    """
    flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC  # a remount sets every flag anew
    if _libc().mount(b"proc", b"/proc", b"proc", flags, b"hidepid=2") != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot hide the stage's processes in /proc: {os.strerror(error)}")


def kept_capabilities(kernel_account: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What the stage keeps of its capabilities, as (permitted, effective).

    Without the kernel's account: CAP_SETFCAP, permitted only, for the kernel's bwrap to map the kernel's user
    onto this sandbox's user 0 (Linux asks for it, since 5.12, of whoever maps a user namespace's root).

    Where the stage maps the kernel's account (:mod:`autograder.sandbox.accounts`): CAP_SETUID and CAP_SETGID,
    permitted only, for the launcher to become that account (only the two users this namespace maps can be
    named), and CAP_KILL, effective, for nbgrader to interrupt and stop a kernel that is no longer its own
    user's. It reaches no process outside this sandbox's process namespace: the stage's and its kernel's."""
    if kernel_account:
        return (CAP_KILL, CAP_SETUID, CAP_SETGID), (CAP_KILL,)
    return (CAP_SETFCAP,), ()


def drop_privileges(kept: tuple[tuple[int, ...], tuple[int, ...]] = ((CAP_SETFCAP,), ())) -> None:
    """Every capability dropped but ``kept`` (permitted, and of them effective: :func:`kept_capabilities`), no
    new privileges, and not dumpable: a process of the same user can no longer read this one's memory.

    With no other capability and no file system to write but the two capped folders, the kept ones grant
    nothing else; the kernel's launcher loses them (its setuid, or its bwrap's ``--cap-drop ALL``).

    Raises:
        OSError: a capability could not be dropped (the stage then grades nothing).
    """
    libc = _libc()
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    permitted, effective = kept
    for capability in range(last + 1):
        if capability in permitted:
            continue
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            raise OSError(ctypes.get_errno(), f"cannot drop capability {capability} from the bounding set")
    header = _CapabilityHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapabilityData * 2)()
    mask = sum(1 << capability for capability in permitted)
    effective_mask = sum(1 << capability for capability in effective)
    data[0].permitted = mask
    data[0].effective = effective_mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "cannot clear the capabilities")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot forbid new privileges")
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    for name, allowed in (("CapEff", effective_mask), ("CapPrm", mask), ("CapBnd", mask)):
        if int(status[name].strip(), 16) & ~allowed:
            raise OSError(0, f"capabilities are still held ({name} {status[name].strip()})")


def enter(limits: Limits, notebook_bytes: int) -> None:
    """In the sandbox, before anything is read: the two capped folders, then no privilege but what the kernel's
    launcher needs (:func:`kept_capabilities`). Where the kernel has an account of its own, the two folders
    let it pass through to its own folders (mode 0711: no listing), for its bwrap to bind them."""
    kernel_account = accounts.kernel_account_mapped()
    mode = 0o711 if kernel_account else 0o700
    mount_quota_folder(ROOT, stage_quota_bytes(limits, notebook_bytes), STAGE_FILES, mode)
    kernel = os.path.join(ROOT, KERNEL_FOLDER)
    os.mkdir(kernel, 0o700)
    mount_quota_folder(kernel, kernel_quota_bytes(limits), KERNEL_FILES, mode)
    os.mkdir(HOME, 0o700)
    if kernel_account:
        hide_other_users_processes()
    drop_privileges(kept_capabilities(kernel_account))


def main(received: tuple[int, str] | None = None) -> NoReturn:
    """``python -m autograder.sandbox``: a pickled :class:`autograder.sandbox.grading_stage.StageRequest` on
    standard input (written by the worker, which is trusted), the response as JSON on standard output; then the
    process ends at once, with exit code 0. ``received``: in a warm stage's child
    (:mod:`autograder.sandbox.warm_stage`), the student's notebook as an open file and the path in ``/grading``
    it is copied to, once that folder is mounted, and graded from."""
    from autograder.sandbox.grading_stage import grade_in_stage
    from autograder.student.sanitize import MAX_NOTEBOOK_BYTES

    request = pickle.loads(sys.stdin.buffer.read())
    if request.sandboxed:
        enter(request.task.limits, request.notebook_bytes)
    if received is not None:
        from autograder.sandbox.warm_stage import keep_received

        descriptor, path = received
        # One byte past the cap, so that the reading of the notebook says it is too large.
        keep_received(descriptor, path, MAX_NOTEBOOK_BYTES + 1)
        task = dataclasses.replace(request.task, notebook=Path(path))
        request = dataclasses.replace(request, task=task)
    # The answer has standard output to itself: whatever else prints there (a library, nbgrader) goes to
    # standard error instead.
    answer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    response = grade_in_stage(request)
    answer.write(json.dumps(response, ensure_ascii=True).encode("ascii"))
    answer.flush()
    answer.close()
    sys.stderr.flush()
    # Nothing is left to do: the kernel was shut down by nbgrader (and anything left of it dies with the sandbox),
    # and the stage's folders die with it. Python's own finalization (the garbage of nbgrader, nbconvert and the
    # gradebook's database engine, atexit hooks) took seconds per submission, so it is skipped.
    os._exit(0)
