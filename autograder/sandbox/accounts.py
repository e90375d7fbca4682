"""An account of its own on the machine for each student's kernel.

Linux counts some of what a process holds per account (per user ID on the machine), not per process: epoll
watches (``fs.epoll.max_user_watches``), pipe buffers (``fs.pipe-user-pages-soft``), processes, queued
signals. A kernel that runs under the grader's account draws on the grader's counts, and one that holds them
all stops its neighbours and the grader. So a grader that runs as root gives every grading stage a user
namespace with two users mapped:

    uid_map (and gid_map):   0      0          1     the stage: root, as it was
                             65534  <account>  1     the kernel: nobody in the stage, <account> on the machine

where ``<account> = KERNEL_ACCOUNTS_BASE + <the worker's process ID>``: no two workers of the machine that
run at the same time share one (process IDs are unique while their processes live, in the machine's own process
namespace, which :func:`account_problem` asks of the grader), no account of a person
lies there, and everything the kernel held dies with its sandbox before the worker grades the next
submission under the same ID. Inside the stage, the kernel's launcher switches to user 65534
(:func:`become_kernel_account`) before it starts the kernel's own sandbox, whose user namespace maps the
kernel's ``nobody`` onto it.

Only root may map a second user (Linux asks for CAP_SETUID over the parent namespace); a grader run by another
account runs the kernels under its own account, as the instructors' guide says.

In a container of its own (a process namespace of its own), process IDs repeat from one container to the next,
and so would accounts made of them. There the deployer gives each container a range of the machine's user IDs
of its own, in ``AUTOGRADER_KERNEL_ACCOUNTS=FIRST-LAST`` (:func:`account_range`), and each worker claims one
account of it for as long as it lives (:func:`claim_account`: a lock file per account, in a folder the
container's workers share). Without that range, a grader in a container runs the kernels under its own
account.

The stage's ``/proc`` is then mounted with ``hidepid=2`` (:func:`autograder.sandbox.stage.enter`): the kernel,
another user, cannot see the stage's processes or threads there at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import grp
import os
import pwd
from pathlib import Path

KERNEL_ACCOUNTS_BASE = 2_000_000_000  # plus a process ID (at most 2**22): below 2**31, far above any person's
LAST_PROCESS_ACCOUNT = KERNEL_ACCOUNTS_BASE + 2**22  # the highest process ID Linux gives (pid_max's limit)
KERNEL_USER_IN_STAGE = 65534  # nobody, as the stage sees the kernel's account
_CLONE_NEWUSER = 0x10000000
_INITIAL_MAP = "0 0 4294967295"
_INITIAL_PID_NAMESPACE = 0xEFFFFFFC  # PROC_PID_INIT_INO (include/linux/proc_ns.h): the machine's first one


ACCOUNTS_VARIABLE = "AUTOGRADER_KERNEL_ACCOUNTS"
LOWEST_GIVEN_ACCOUNT = 65536  # above every account Linux distributions give people and services (and nobody)
HIGHEST_GIVEN_ACCOUNT = 2**32 - 2  # (uid_t) -1 means "no user"
CLAIMS_FOLDER = Path("/run/autograder-kernel-accounts")
_claim: tuple[int, int, int] | None = None  # (process ID, account, lock descriptor) of this process's claim


def account_range(value: str | None = None) -> range | None:
    """The machine's user IDs given to this grader's kernels, from ``value`` (default: the environment's
    ``AUTOGRADER_KERNEL_ACCOUNTS``), written ``FIRST-LAST``; None when it is not set.

    Raises:
        ValueError: ``value`` is not two whole numbers FIRST <= LAST between 65536 and 4294967294.
    """
    value = os.environ.get(ACCOUNTS_VARIABLE) if value is None else value
    if value is None or not value.strip():
        return None
    parts = value.strip().split("-")
    allowed = (f"{ACCOUNTS_VARIABLE}={value!r}: give FIRST-LAST, two whole numbers with FIRST <= LAST, between "
               f"{LOWEST_GIVEN_ACCOUNT} and {HIGHEST_GIVEN_ACCOUNT}, a range of the machine's user IDs that no "
               "person, service or other container uses")
    if len(parts) != 2 or not all(part.isascii() and part.isdigit() for part in parts):
        raise ValueError(allowed)
    first, last = int(parts[0]), int(parts[1])
    if not LOWEST_GIVEN_ACCOUNT <= first <= last <= HIGHEST_GIVEN_ACCOUNT:
        raise ValueError(allowed)
    if first <= LAST_PROCESS_ACCOUNT and last >= KERNEL_ACCOUNTS_BASE:
        raise ValueError(f"{allowed}, outside {KERNEL_ACCOUNTS_BASE}-{LAST_PROCESS_ACCOUNT}: the accounts that "
                         "graders in the machine's own process namespace make of their process IDs")
    return range(first, last + 1)


def claim_account(accounts: range, folder: Path = CLAIMS_FOLDER) -> int:
    """One account of ``accounts`` that no other live process claimed through ``folder``, held by this process
    until it ends (a lock on ``folder/<account>``; the lock goes with the process, so a worker that dies frees its
    account). A process claims once; a child forked from it claims again, and drops the parent's lock it
    inherited, so that the parent's account is freed when the parent ends.

    Raises:
        OSError: every account of the range is claimed, one is already held on the machine
            (:func:`account_holder`), or the folder cannot be made.
    """
    global _claim
    if _claim is not None:
        if _claim[0] == os.getpid():
            return _claim[1]
        os.close(_claim[2])  # the parent's lock, inherited: the parent's account stays the parent's alone
        _claim = None
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for account in accounts:
        descriptor = os.open(folder / str(account), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue
        holder = account_holder(account)
        if holder is None:
            _claim = (os.getpid(), account, descriptor)
            return account
        os.close(descriptor)
        raise OSError(f"{ACCOUNTS_VARIABLE} holds {account}, {holder}")
    raise OSError(f"every account of {ACCOUNTS_VARIABLE} ({accounts.start}-{accounts.stop - 1}) is claimed by "
                  "another worker: give a range with one account for each worker")


SUBORDINATE_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))


def account_holder(account: int, subordinate_files: tuple[Path, ...] = SUBORDINATE_FILES) -> str | None:
    """Who on the machine already holds the ID ``account`` (the kernel's user and its group alike), in words, or
    None: a user or a group the machine names, or a person's subordinate range (``/etc/subuid``,
    ``/etc/subgid``: the IDs ``newuidmap`` lets that person's rootless containers run as, which could then signal
    the kernel and share what Linux counts for its account)."""
    with contextlib.suppress(KeyError):
        return f"the machine's account {pwd.getpwuid(account).pw_name!r}"
    with contextlib.suppress(KeyError):
        return f"the machine's group {grp.getgrgid(account).gr_name!r}"
    for path in subordinate_files:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.strip().split(":")
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                first, count = int(fields[1]), int(fields[2])
                if first <= account < first + count:
                    return f"in the subordinate IDs {first}-{first + count - 1} of {fields[0]!r} ({path})"
    return None


def kernel_account(pid: int | None = None) -> int:
    """The machine's user ID for the kernels of the worker ``pid`` (default: this process): claimed from
    ``AUTOGRADER_KERNEL_ACCOUNTS`` where it is set (:func:`claim_account`), else 2,000,000,000 plus the
    worker's process ID.

    Raises:
        ValueError: ``AUTOGRADER_KERNEL_ACCOUNTS`` is set but not a range (:func:`account_range`).
        OSError: no account of the range can be claimed, or the account is already held on the machine.
    """
    given = account_range()
    if given is not None and pid is None:
        return claim_account(given)
    account = KERNEL_ACCOUNTS_BASE + (os.getpid() if pid is None else pid)
    if (holder := account_holder(account)) is not None:
        raise OSError(f"the kernel's account {account} is {holder}")
    return account


def account_problem() -> str | None:
    """Why this process cannot give kernels accounts of their own, or None when it can: it must be root, in the
    machine's first user namespace (a grader in a user namespace of its own maps a range that holds no account
    of ours) and, unless ``AUTOGRADER_KERNEL_ACCOUNTS`` gives its accounts, in the machine's first process
    namespace (in a container of its own, process IDs, and so the accounts made of them, repeat from one
    container to the next)."""
    try:
        given = account_range()
    except ValueError as error:
        return str(error)
    if os.geteuid() != 0:
        return "only a grader run as root gives it one of its own"
    try:
        uid_map = " ".join(Path("/proc/self/uid_map").read_text().split())
        pid_namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError as error:
        return f"the grader cannot tell its namespaces ({error.strerror})"
    if uid_map != _INITIAL_MAP:
        return "the grader runs in a user namespace of its own"
    if pid_namespace != _INITIAL_PID_NAMESPACE and given is None:
        return ("the grader runs in a process namespace of its own (a container), where process IDs, and so the"
                f" kernels' accounts, repeat from one container to the next, and {ACCOUNTS_VARIABLE} gives it no"
                " range of its own")
    return None


def can_map_accounts() -> bool:
    """Whether this process can give kernels accounts of their own (:func:`account_problem`)."""
    return account_problem() is None


def user_namespace(account: int) -> int:
    """A new user namespace with the stage's two users (the module's map), held open by the descriptor returned
    (inheritable, for ``bwrap --userns FD``; the caller closes it).

    A short-lived child process unshares the namespace; this process writes its maps and opens it.

    Raises:
        OSError: the namespace could not be made or mapped (no user namespaces here, or not root).
    """
    unshare = ctypes.CDLL(None, use_errno=True).unshare  # looked up before fork: the child only calls it
    ready_read, ready_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child: system calls only, then _exit)
        try:
            os.close(ready_read)
            os.close(done_write)
            os.write(ready_write, b"1" if unshare(_CLONE_NEWUSER) == 0 else b"0")
            os.read(done_read, 1)
        finally:
            os._exit(0)
    os.close(ready_write)
    os.close(done_read)
    try:
        if os.read(ready_read, 1) != b"1":
            raise OSError(f"cannot make a user namespace for the kernel's account {account}")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as handle:
                handle.write(f"0 0 1\n{KERNEL_USER_IN_STAGE} {account} 1\n")
        descriptor = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    finally:
        os.close(done_write)
        os.close(ready_read)
        os.waitpid(pid, 0)
    os.set_inheritable(descriptor, True)
    return descriptor


def kernel_account_mapped() -> bool:
    """Inside a stage: whether its user namespace maps the kernel's account (:func:`user_namespace`)."""
    try:
        lines = Path("/proc/self/uid_map").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[:1] == [str(KERNEL_USER_IN_STAGE)] for line in lines)


def become_kernel_account() -> None:
    """In the kernel's launcher, as the stage's root: become the kernel's account (user and group 65534, no
    supplementary group), with a file mode mask of 0, so that the sockets the kernel makes in its runtime
    folder stay open to the stage that talks to it. The stage keeps CAP_SETUID and CAP_SETGID for this alone;
    the switch clears them.

    Raises:
        OSError: the switch failed (the launcher then starts no kernel).
    """
    os.setgroups([])
    os.setresgid(KERNEL_USER_IN_STAGE, KERNEL_USER_IN_STAGE, KERNEL_USER_IN_STAGE)
    os.setresuid(KERNEL_USER_IN_STAGE, KERNEL_USER_IN_STAGE, KERNEL_USER_IN_STAGE)
    os.umask(0)
    if os.getresuid() != (KERNEL_USER_IN_STAGE,) * 3 or os.getresgid() != (KERNEL_USER_IN_STAGE,) * 3:
        raise OSError(0, f"the launcher is still {os.getresuid()}, not the kernel's account")
