"""The sandbox of a student's kernel: what it may see, who it runs as, and the limits that hold it.

The kernelspec written by :func:`autograder.course.write_kernelspec` starts ``python -m autograder.sandbox.launcher
CONNECTION_FILE``; this launcher reads its :class:`Settings` from the environment variable
``AUTOGRADER_SANDBOX`` (JSON, set by the grader's worker for each submission), and then, in this order:

1. points its standard input at ``/dev/null`` and its standard output and error at the kernel's own log file,
   so that nothing the kernel prints reaches the worker's files;
2. moves itself into the kernel's control group (:mod:`autograder.sandbox.cgroups`: memory with shared memory
   counted, processes, an equal CPU share), made by the worker, which removes it and everything left in it
   after the notebook ran;
3. where its grading stage maps the kernel an account of its own on the machine (a grader run as root:
   :mod:`autograder.sandbox.accounts`), becomes that account, so that what Linux counts per account (epoll
   watches, pipe buffers, processes) is the kernel's alone;
4. sets the resource limits (``setrlimit``, soft and hard alike: address space, CPU seconds, processes, file
   size, no core files, open files, no message queues, no queued signals) and installs a seccomp filter that
   holds the memory the address space does not count and the grader's account's own objects: no anonymous
   memory files, System V IPC, keyrings, inotify or message queues, Unix and netlink sockets only, no socket or
   pipe buffer enlarged (:mod:`autograder.sandbox.seccomp`);
5. replaces itself with the kernel, in an environment built from an allowlist (:func:`kernel_environment`),
   inside bubblewrap, as the unprivileged user ``nobody`` of a user namespace of its own, with no capability,
   and with a second seccomp filter that bubblewrap loads once it has made the sandbox: an allowlist of system
   calls, and no namespace (:func:`autograder.sandbox.seccomp.allowlist_program`; without bubblewrap, installed
   here):

       bwrap --add-seccomp-fd FD --unshare-all --die-with-parent --new-session --cap-drop ALL --uid 65534 --gid 65534
             --ro-bind /usr /usr (and /bin, /lib... as on the machine) --ro-bind-try /etc/<a few files>
             --ro-bind <the Python installation and its virtual environment; its editable installs covered>
             --ro-bind <the kernel's view of the course> /course
             --proc /proc --dev /dev --size 4096 --tmpfs /dev/pts (no pseudo-terminal)
             --size N --tmpfs /tmp --size N --tmpfs /dev/shm
             --bind <runtime folder> --remount-ro /  --chdir /tmp  python -m ipykernel_launcher -f CONNECTION_FILE

The kernel's file system is built from nothing, by allowlist: no ``/home``, ``/root``, ``/run``, ``/var``,
``/srv``, ``/mnt``, no checkout of the course (the kernel imports the copies of the student's side of it in
:mod:`autograder.sandbox.kernel_view`, and nothing of the grader's side), the gradebook, the submissions or
the outputs, and no host socket
(``/run`` is where servers put theirs); ``/tmp`` and ``/dev/shm`` are new and size-capped; it has no network
(it talks to nbgrader over Unix sockets in its runtime folder: the grader sets
``KernelManager.transport = "ipc"``). Run by the grader, the kernel's ``/proc`` is its grading stage's, bound
read-only (a nested sandbox cannot mount a new one), with the stage's processes covered by empty folders, and
every other entry of its top but an allowlist (the CPUs, memory, mounts, its own entries) and the boot's identity
covered by empty folders and files (:func:`stage_proc_covers`): it sees no process outside its own, cannot signal
or trace them, and reads none of the grader's user's keys or of the machine's kernel state. Its host name is
``sandbox``. Its ``/proc/self/mountinfo`` still names the host folders
bound into it (the Python installation, the virtual environment), as any process's does.

Fallback: where bwrap cannot run (not installed, or no user namespaces), the kernel runs with the limits and
the clean environment only, in a scratch folder, as the grader's user; the grader writes this into
``report.txt``, with every limit that does not hold.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from autograder.sandbox import accounts, seccomp
from autograder.sandbox.kernel_view import MOUNT, STUDENT_IMPORTS, default_kernel_view
from autograder.student.parameters import ENABLED_VARIABLE, STUDENT_VARIABLE
from autograder.student.progress import GRADING_VARIABLE

ENVIRONMENT_VARIABLE = "AUTOGRADER_SANDBOX"
MEGABYTE = 1024 * 1024
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs and libraries read in /etc; nothing else of it (no passwd, hosts, ssl, machine-id).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "fonts", "mime.types")
# Variables passed from the grader's environment to the kernel when set; every other one is dropped.
PASSED_THROUGH = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TZ")
SANDBOX_HOME = "/tmp"
KERNEL_USER = "student"


@dataclass(frozen=True)
class Limits:
    """Resource limits of a student's kernel; ``0`` means no limit."""

    memory_mb: int = 4096  # address space, and the control group's memory; importing torch takes ~700 MB
    cpu_seconds: int = 600
    processes: int = 64  # processes and threads of the kernel's own user (or beyond the grader's, unsandboxed)
    file_size_mb: int = 64
    output_kb: int = 1024  # output a cell may send to the grader (autograder.sandbox.execute); the rest is cut
    notebook_output_kb: int = 4096  # output the whole notebook may send; the rest is cut
    tmp_mb: int = 256  # size of the kernel's /tmp (its working folder), and of its /dev/shm
    notebook_seconds: int = 1800  # wall-clock time the whole notebook may run; later cells are not run


@dataclass(frozen=True)
class Settings:
    """What the launcher needs for one kernel (serialized into ``AUTOGRADER_SANDBOX``).

    ``scratch``: the working folder when the kernel runs without bwrap; ``runtime``: the folder of the
    connection file and the kernel's sockets; ``log``: the kernel's own log file (its stdout and stderr);
    ``hidden``: folders covered even where they lie inside what the kernel may read; ``cgroup``: the kernel's
    control group
    (:class:`autograder.cgroups.KernelGroup` as ``[version, [folders]]``), or None.
    """

    scratch: str
    runtime: str
    log: str = os.devnull
    hidden: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    use_bwrap: bool = True
    cgroup: tuple[int, tuple[str, ...]] | None = None
    student: str = ""  # the submission's student folder: its ID draws the parameters of the varied items
    variants: bool = True  # per-student variants (autograder.student.parameters); False: the one answer key
    kernel_view: str = ""  # the folder of autograder.sandbox.kernel_view.kernel_packages ("": a cached one)
    # The kernel's writable folder inside the grading stage's capped tmpfs (autograder.sandbox.stage): its
    # tmp/ and shm/ become the kernel's /tmp and /dev/shm, and /proc is the stage's (a sandbox nested in
    # bwrap cannot mount a new one). Empty: a kernel started outside a stage, with tmpfs of its own.
    writable: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        data = json.loads(text)
        cgroup = data.get("cgroup")
        return cls(
            scratch=str(data["scratch"]),
            runtime=str(data["runtime"]),
            log=str(data.get("log", os.devnull)),
            hidden=tuple(str(path) for path in data.get("hidden", ())),
            limits=Limits(**data.get("limits", {})),
            use_bwrap=bool(data.get("use_bwrap", True)),
            cgroup=None if cgroup is None else (int(cgroup[0]), tuple(str(path) for path in cgroup[1])),
            student=str(data.get("student", "")),
            variants=bool(data.get("variants", True)),
            kernel_view=str(data.get("kernel_view", "")),
            writable=str(data.get("writable", "")),
        )

    def view(self) -> str:
        """The folder the kernel imports the course from: :attr:`kernel_view`, or the cached default."""
        return self.kernel_view or str(default_kernel_view())


NOBODY = 65534
# The kernel's settings (/proc/sys) read-only, bound over the new /proc. A user namespace made by a grader that
# runs as root maps its users onto root, and Linux lets root's uid write the machine-wide settings (such as
# kernel.core_pattern, a program run as root) by the file's mode alone, without any capability.
PROC_SYS_READ_ONLY = ("--ro-bind", "/proc/sys", "/proc/sys")
# (Not --disable-userns: bwrap sets it through /proc/sys/user, which is read-only where the grader runs the kernel,
# inside its stage. A user namespace the kernel makes maps no user, its /proc being read-only, and the namespaces
# it can hold are bounded by its open files and processes.)
# No pseudo-terminal: bwrap's --dev gives the sandbox a devpts instance of its own, and every devpts instance
# but the machine's first draws on one count for the whole machine (kernel.pty.max less kernel.pty.reserve), which
# a kernel opening /dev/ptmx in a loop would take from every other container and sandbox. An empty, read-only
# folder over /dev/pts hides its ptmx (and /dev/ptmx, a link to it): opening it fails with ENOENT.
NO_PTYS = ("--size", "4096", "--tmpfs", "/dev/pts", "--remount-ro", "/dev/pts")
BASE_OPTIONS = (
    *("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL"),
    *("--uid", str(NOBODY), "--gid", str(NOBODY)),
)


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def readable_folders() -> list[str]:
    """What the kernel reads besides the system and its view of the course: the Python installation and its
    virtual environment (real paths, outermost only)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    wanted = {os.path.realpath(path) for path in prefixes}
    wanted = {path for path in wanted if not any(_inside(path, system) for system in SYSTEM_FOLDERS)}
    return sorted(path for path in wanted if not any(other != path and _inside(path, other) for other in wanted))


def sandboxed_python() -> str:
    """This interpreter's path as the sandbox has it: under the real path of its virtual environment (bound
    there; a link to it elsewhere, such as a checkout's ``.venv``, is not in the sandbox)."""
    prefix = os.path.abspath(sys.prefix)
    if not _inside(os.path.abspath(sys.executable), prefix):
        return sys.executable
    return os.path.join(os.path.realpath(prefix), os.path.relpath(os.path.abspath(sys.executable), prefix))


def editable_installs() -> list[str]:
    """The files by which site-packages imports packages from where they were installed in editable mode
    (``__editable__*`` path files and finders, and ``.pth`` files that name a folder outside the Python
    installation): the sandbox covers them, so that nothing leads the kernel from the Python installation to a
    checkout of the course."""
    import site

    prefixes = [os.path.realpath(path) for path in (sys.prefix, sys.base_prefix)]
    found = []
    for folder in sorted({os.path.realpath(path) for path in site.getsitepackages()}):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if name.startswith("__editable__") or (name.endswith(".pth") and _names_outside(path, prefixes)):
                found.append(path)
    return found


def _names_outside(pth: str, prefixes: list[str]) -> bool:
    """Whether the path file ``pth`` adds a folder outside ``prefixes`` to ``sys.path`` (an import line does not)."""
    try:
        with open(pth, encoding="utf-8", errors="replace") as handle:
            lines = [line.strip() for line in handle]
    except OSError:
        return False
    folders = [line for line in lines if line and not line.startswith(("#", "import ", "import\t"))]
    folders = [os.path.realpath(os.path.join(os.path.dirname(pth), folder)) for folder in folders]
    return any(not any(_inside(folder, prefix) for prefix in prefixes) for folder in folders)


def system_binds() -> list[str]:
    """bwrap's arguments for the system folders (read-only, or as the links they are) and the few files of /etc
    that programs read; the kernel's sandbox and the grading stage's start from the same."""
    argv = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    for name in ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return argv


# What a kernel may read of the top of /proc besides its own processes: what Python, NumPy, PyTorch and ipykernel
# read (the CPUs, memory, load, mounts) and links to its own entries. The rest is the machine's rather than the
# kernel's, and some of it the grader's user alone may read, which the kernel's user maps to: the keys of that
# user (keys, key-users), kernel addresses and allocator state (slabinfo, vmallocinfo, timer_list, kallsyms),
# the host kernel's command line.
KERNEL_PROC_ENTRIES = frozenset({
    "self", "thread-self", "net", "mounts", "sys",
    "cpuinfo", "meminfo", "stat", "uptime", "loadavg", "version", "filesystems", "cgroups", "swaps", "vmstat",
})
# Under /proc/sys (read-only, kept whole for what programs tune by it): this boot's identity.
MACHINE_PROC_FILES = ("/proc/sys/kernel/random/boot_id",)
KERNEL_HOSTNAME = "sandbox"


def _thread_ids(process: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(os.path.join(process, "task")) if name.isdigit())
    except OSError:  # ended meanwhile
        return []


def stage_proc_covers(empty_file: str, proc: str = "/proc") -> list[str]:
    """bwrap's arguments that cover, in the kernel's read-only bind of its grading stage's ``/proc``:

    - every process there now (the stage's bwrap, the stage, this launcher: their command lines name the
      grader's installation, control groups and folders), and each of its threads (which ``/proc`` opens by
      ID without listing them), under an empty tmpfs; where the kernel has an account of its own, the stage's
      ``/proc`` hides them all, later threads included (:func:`autograder.sandbox.stage.hide_other_users_processes`);
    - every other entry of the top of ``/proc`` but :data:`KERNEL_PROC_ENTRIES` (an allowlist), a folder under an
      empty tmpfs, a file under ``empty_file``, and :data:`MACHINE_PROC_FILES` under ``empty_file``.

    The kernel and what it starts come after, and stay visible to it (``/proc/self``)."""
    argv = []
    for entry in sorted(os.listdir(proc), key=lambda name: (len(name), name)):
        path = f"/proc/{entry}"
        if entry in KERNEL_PROC_ENTRIES or os.path.islink(os.path.join(proc, entry)):
            continue
        if entry.isdigit():  # the process, and its threads, which /proc does not list but opens by their IDs
            for thread in [entry, *(thread for thread in _thread_ids(os.path.join(proc, entry)) if thread != entry)]:
                argv += ["--size", "4096", "--tmpfs", f"/proc/{thread}"]
        elif os.path.isdir(os.path.join(proc, entry)):
            argv += ["--size", "4096", "--tmpfs", path]
        else:
            argv += ["--ro-bind", empty_file, path]
    for path in MACHINE_PROC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", empty_file, path]
    return argv


def empty_cover_file(writable: str) -> str:
    """The empty, read-only file in the kernel's writable folder that covers files of ``/proc``; made once."""
    path = os.path.join(writable, "empty")
    if not os.path.exists(path):
        with open(path, "w"):
            pass
        os.chmod(path, 0o444)
    return path


def bwrap_argv(settings: Settings, command: list[str]) -> list[str]:
    """The bwrap command line that runs ``command`` in the sandbox described by ``settings`` (inside a grading
    stage, it first writes the empty file that covers ``/proc``'s entries, ``empty`` in ``settings.writable``)."""
    argv = [shutil.which("bwrap") or "bwrap", *BASE_OPTIONS, "--hostname", KERNEL_HOSTNAME]
    # The new /tmp and /dev/shm first: what the kernel reads may lie under /tmp (a checkout and its
    # virtual environment there), and is bound on top of them.
    tmp_size = str(settings.limits.tmp_mb * MEGABYTE)
    if settings.writable:
        empty_file = empty_cover_file(settings.writable)
        argv += ["--ro-bind", "/proc", "/proc", *stage_proc_covers(empty_file), "--dev", "/dev", *NO_PTYS]
        for path, name in (("/tmp", "tmp"), ("/dev/shm", "shm")):
            argv += ["--bind", os.path.join(settings.writable, name), path]
    else:
        argv += ["--proc", "/proc", *PROC_SYS_READ_ONLY, "--dev", "/dev", *NO_PTYS]
        for path in ("/tmp", "/dev/shm"):
            argv += (["--size", tmp_size] if settings.limits.tmp_mb else []) + ["--tmpfs", path]
    argv += system_binds()
    readable = readable_folders()
    for folder in readable:
        argv += ["--ro-bind", folder, folder]
    # The course: the copies of its student's side only, never the checkout (autograder.sandbox.kernel_view).
    argv += ["--ro-bind", settings.view(), MOUNT]
    covered = editable_installs()
    covered += [os.path.realpath(path) for path in settings.hidden]
    covered = [path for path in dict.fromkeys(covered) if any(_inside(path, folder) for folder in readable)]
    for path in covered:
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            argv += ["--ro-bind", os.devnull, path]
    # The root that bwrap builds to hold these mounts is made read-only last: /tmp, /dev/shm and the runtime
    # folder are the only places to write.
    argv += ["--bind", settings.runtime, settings.runtime, "--remount-ro", "/", "--chdir", SANDBOX_HOME, "--"]
    return argv + command


def kernel_environment(settings: Settings, parent: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's whole environment, built from an allowlist: nothing else of the grader's (no passwords,
    tokens or database URLs) reaches student code. It says that the kernel is grading
    (:data:`autograder.student.progress.GRADING_VARIABLE`), for which student and whether the items vary
    (:mod:`autograder.student.parameters`). It imports the course from its view (:mod:`autograder.sandbox.kernel_view`):
    at :data:`~autograder.sandbox.kernel_view.MOUNT` in the sandbox, from the view's folder without it."""
    parent = dict(os.environ if parent is None else parent)
    home = SANDBOX_HOME if settings.use_bwrap else settings.scratch
    environment = {name: parent[name] for name in PASSED_THROUGH if name in parent}
    environment.update(
        PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        HOME=home,
        TMPDIR=home,
        USER=KERNEL_USER,
        LOGNAME=KERNEL_USER,
        LANG="C.UTF-8",
        PYTHONPATH=MOUNT if settings.use_bwrap else settings.view(),
        MPLBACKEND="Agg",
        MPLCONFIGDIR=os.path.join(home, ".matplotlib"),
        IPYTHONDIR=os.path.join(home, ".ipython"),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    environment[GRADING_VARIABLE] = "1"  # an unanswered item fails its test cell (autograder.student.progress)
    # The varied items' parameters are drawn from the submission's folder, not from what the notebook declares.
    environment[STUDENT_VARIABLE] = settings.student
    environment[ENABLED_VARIABLE] = "1" if settings.variants else "0"
    environment.setdefault("OMP_NUM_THREADS", "1")
    return environment


def kernel_command(connection_file: str) -> list[str]:
    """The kernel's command line. IPython's history is off: it keeps it in an SQLite file, whose byte-range locks
    the sandbox refuses (:mod:`autograder.sandbox.seccomp`), and SQLite then waits out its busy timeout, three
    times, before IPython falls back to memory: 15 seconds of every kernel's start, for a history that a graded
    notebook never reads (``In`` and ``Out`` stay)."""
    return [sandboxed_python(), "-m", "ipykernel_launcher", "-f", connection_file, "--HistoryManager.enabled=False"]


@functools.cache
def bwrap_problem() -> str | None:
    """Why bwrap cannot run a Python kernel here, or None when it can; checked once per process, with the
    real sandbox (the student's side of the course imported from the kernel's view, torch aside)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    runtime = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))  # any folder that exists
    settings = Settings(scratch=runtime, runtime=runtime, limits=Limits(tmp_mb=16))
    modules = ", ".join(["ipykernel", *(name for name in STUDENT_IMPORTS if name != "posenc_ref")])
    try:
        argv = bwrap_argv(settings, [sandboxed_python(), "-c", f"import {modules}"])
    except (OSError, ValueError) as error:
        return f"the kernel's view of the course cannot be built ({error})"
    try:
        completed = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=False, env=kernel_environment(settings)
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap could not start ({error})"
    if completed.returncode != 0:
        return f"bwrap cannot create a sandbox here ({completed.stderr.strip()[-300:] or completed.returncode})"
    return None


def _processes_of_this_user() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


KERNEL_OPEN_FILES = 256  # a kernel with torch and a figure opens 66; each socket or pipe holds buffers (seccomp.buffer_bound)
# Queued signals count per user, machine-wide, against every process of the grader's account: a kernel queues
# none of its own (sigqueue and POSIX timers get EAGAIN; kill's signals, alarms and SIGCHLD are still delivered).
KERNEL_PENDING_SIGNALS = 0
FIXED_LIMITS = (
    (resource.RLIMIT_CORE, 0),
    (resource.RLIMIT_NOFILE, KERNEL_OPEN_FILES),
    (resource.RLIMIT_MSGQUEUE, 0),  # POSIX message queues: none (they count per user, like the signals)
    (resource.RLIMIT_SIGPENDING, KERNEL_PENDING_SIGNALS),
)


def apply_limits(limits: Limits) -> None:
    """Set this process's resource limits (inherited by what it executes), each as soft and hard limit alike:
    the kernel's code cannot raise one back (a soft limit under a higher hard one is only advice).

    The process limit counts beyond the processes this user already runs, and binds no process of root (the
    kernel's control group holds the count there). Besides ``limits``: no core files, :data:`FIXED_LIMITS`.
    """
    pairs = [
        (resource.RLIMIT_AS, limits.memory_mb * MEGABYTE),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * MEGABYTE),
    ]
    if limits.processes:
        pairs.append((resource.RLIMIT_NPROC, limits.processes + _processes_of_this_user()))
    for kind, value in (*FIXED_LIMITS, *((kind, value) for kind, value in pairs if value)):
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))


def _redirect_output(log: str) -> None:
    """Standard input from /dev/null, standard output and error into the kernel's own log file."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    handle = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    for fd in (null, handle):
        if fd > 2:
            os.close(fd)


def main(argv: list[str]) -> None:
    """``python -m autograder.sandbox.launcher CONNECTION_FILE``: start a student's kernel in its sandbox."""
    connection_file = argv[0]
    text = os.environ.pop(ENVIRONMENT_VARIABLE, None)
    if text is None:  # not started by the grader (e.g. `python -m autograder check`): a plain kernel
        command = kernel_command(connection_file)
        os.execv(command[0], command)
    settings = Settings.from_json(text)
    _redirect_output(settings.log)
    # The client may have written the connection file where the sandbox hides it (nbclient: a temporary file).
    visible = os.path.join(settings.runtime, os.path.basename(connection_file))
    if os.path.abspath(connection_file) != visible:
        shutil.copyfile(connection_file, visible)
    if settings.cgroup is not None:
        for folder in settings.cgroup[1]:
            with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
    if settings.writable and os.getuid() == 0 and accounts.kernel_account_mapped():
        # The kernel's account of its own (autograder.sandbox.accounts): what it reads made readable, then the switch.
        empty_cover_file(settings.writable)
        os.chmod(visible, 0o644)
        accounts.become_kernel_account()
    apply_limits(settings.limits)
    try:
        seccomp.install()
    except (OSError, ValueError) as error:
        # Within a control group the kernel's memory is counted whatever holds it; without one, refuse to start.
        print(f"autograder: the kernel's seccomp filter could not be installed: {error}", file=sys.stderr)
        if settings.cgroup is None:
            sys.exit(70)
    environment = kernel_environment(settings)
    command = kernel_command(visible)
    if settings.use_bwrap:
        command = bwrap_argv(settings, command)
        command[1:1] = ["--add-seccomp-fd", str(_allowlist_filter_descriptor())]
    else:
        _install_allowlist_filter(settings)
        os.chdir(settings.scratch)
    os.execve(command[0], command, environment)


def _allowlist_filter_descriptor() -> int:
    """A descriptor that bwrap reads the kernel's second filter from (:func:`seccomp.allowlist_program`): a
    pipe holding the program whole (a few kilobytes, within a pipe's buffer), closed behind it, left open
    across exec."""
    program = seccomp.allowlist_program()
    read_end, write_end = os.pipe()
    os.write(write_end, program)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end


def _install_allowlist_filter(settings: Settings) -> None:
    """Without bwrap, the kernel's second filter is installed here, beside the first."""
    try:
        seccomp.install(program=seccomp.allowlist_program())
    except (OSError, ValueError) as error:
        print(f"autograder: the kernel's allowlist filter could not be installed: {error}", file=sys.stderr)
        if settings.cgroup is None:
            sys.exit(70)


if __name__ == "__main__":
    main(sys.argv[1:])
