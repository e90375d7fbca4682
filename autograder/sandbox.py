"""The sandbox of a student's kernel: bubblewrap, resource limits, and the fallback when bwrap cannot run.

The kernelspec written by :func:`autograder.course.write_kernelspec` starts ``python -m autograder.sandbox
CONNECTION_FILE``; this module reads its settings from the environment variable ``AUTOGRADER_SANDBOX`` (JSON,
set by the grader's worker for each submission), sets the resource limits, then replaces itself with

    bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --unshare-user --die-with-parent
          --new-session --tmpfs <every hidden path> --bind <scratch> --bind <runtime> --chdir <scratch>
          python -m ipykernel_launcher -f CONNECTION_FILE

(the empty tmpfs over /tmp and the hidden folders then remounted read-only) so that the kernel sees a read-only
file system but for its own scratch folder (and the folder of its
connection file and sockets), has no network (the kernel talks to nbgrader over Unix sockets: the grader
sets ``KernelManager.transport = "ipc"``), sees no other process, and cannot see the gradebook, ``source/``,
the other submissions, the outputs or the tests (each mounted over by an empty tmpfs).

Limits (``setrlimit``, inherited by the kernel and its children): address space (memory), CPU seconds,
processes (counted over the sandbox's real user, so the grader adds the processes that user already runs),
file size. Output is capped on the grader's side, in bytes per cell (:mod:`autograder.execute`), then in lines
by nbgrader's ``LimitOutput``.

Fallback: where bwrap cannot run (a container without user namespaces, or bwrap not installed), the kernel
runs with the limits only, and the grader writes a warning into ``report.txt``.
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

ENVIRONMENT_VARIABLE = "AUTOGRADER_SANDBOX"
MEGABYTE = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Resource limits of a student's kernel; ``0`` means no limit."""

    memory_mb: int = 4096  # address space; importing torch takes about 700 MB of it
    cpu_seconds: int = 600
    processes: int = 64  # beyond those the sandbox's user already runs
    file_size_mb: int = 64
    output_kb: int = 1024  # output a cell may send to the grader (autograder.execute); the rest is cut


@dataclass(frozen=True)
class Settings:
    """What the launcher needs for one kernel (serialized into ``AUTOGRADER_SANDBOX``)."""

    scratch: str
    runtime: str
    hidden: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    use_bwrap: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        data = json.loads(text)
        return cls(
            scratch=str(data["scratch"]),
            runtime=str(data["runtime"]),
            hidden=tuple(str(path) for path in data.get("hidden", ())),
            limits=Limits(**data.get("limits", {})),
            use_bwrap=bool(data.get("use_bwrap", True)),
        )


BASE_OPTIONS = (
    *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"),
    *("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"),
)


@functools.cache
def bwrap_problem() -> str | None:
    """Why bwrap cannot run here (None when it can), checked once per process with a trivial sandbox."""
    executable = shutil.which("bwrap")
    if executable is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    try:
        completed = subprocess.run(
            [executable, *BASE_OPTIONS, "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap could not start ({error})"
    if completed.returncode != 0:
        return f"bwrap cannot create a sandbox here ({completed.stderr.strip()[:200] or completed.returncode})"
    return None


REPOSITORY = os.path.realpath(os.path.join(os.path.dirname(__file__), os.pardir))


def _needed_under_tmp() -> list[str]:
    """What the kernel needs to start and lies under /tmp, which the sandbox replaces with an empty file
    system: the Python environment and the two packages it imports from the repository (not the rest of the
    repository), bound back read-only before the hidden folders are covered (autograder/source stays hidden)."""
    packages = (os.path.join(REPOSITORY, "posenc_ref"), os.path.join(REPOSITORY, "autograder"))
    needed = {os.path.realpath(path) for path in (sys.prefix, sys.base_prefix, *packages)}
    return sorted(path for path in needed if os.path.commonpath([path, "/tmp"]) == "/tmp")


def bwrap_argv(settings: Settings, command: list[str]) -> list[str]:
    """The bwrap command line that runs ``command`` in the sandbox described by ``settings``."""
    argv = [shutil.which("bwrap") or "bwrap", *BASE_OPTIONS]
    for path in _needed_under_tmp():
        argv += ["--ro-bind", path, path]
    for path in settings.hidden:
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
        elif os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in (settings.scratch, settings.runtime):
        argv += ["--bind", path, path]
    # The empty file systems over /tmp and the hidden folders are made read-only last, once the mount points
    # of the scratch and runtime folders exist in them; the scratch folder is the only place to write.
    for path in (*[path for path in settings.hidden if os.path.isdir(path)], "/tmp"):
        argv += ["--remount-ro", path]
    argv += ["--chdir", settings.scratch, "--setenv", "HOME", settings.scratch, "--"]
    return argv + command


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


def apply_limits(limits: Limits) -> None:
    """Set this process's resource limits (inherited by what it executes)."""
    pairs = [
        (resource.RLIMIT_AS, limits.memory_mb * MEGABYTE),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * MEGABYTE),
    ]
    if limits.processes:
        pairs.append((resource.RLIMIT_NPROC, _processes_of_this_user() + limits.processes))
    for kind, value in pairs:
        if value:
            _, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value if hard == resource.RLIM_INFINITY else hard))


def kernel_command(connection_file: str) -> list[str]:
    return [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]


def main(argv: list[str]) -> None:
    """``python -m autograder.sandbox CONNECTION_FILE``: start a student's kernel in its sandbox."""
    connection_file = argv[0]
    text = os.environ.pop(ENVIRONMENT_VARIABLE, None)
    if text is None:  # not started by the grader (e.g. `python -m autograder check`): a plain kernel
        command = kernel_command(connection_file)
        os.execv(command[0], command)
    settings = Settings.from_json(text)
    # The client may have written the connection file where the sandbox hides it (nbclient: a temporary file).
    visible = os.path.join(settings.runtime, os.path.basename(connection_file))
    if os.path.abspath(connection_file) != visible:
        shutil.copyfile(connection_file, visible)
    command = kernel_command(visible)
    for variable, name in (("IPYTHONDIR", ".ipython"), ("MPLCONFIGDIR", ".matplotlib")):
        os.environ[variable] = os.path.join(settings.scratch, name)
    os.environ["HOME"] = settings.scratch
    os.environ["TMPDIR"] = settings.scratch
    apply_limits(settings.limits)
    if settings.use_bwrap:
        # In its own PID namespace the kernel's parent is bwrap's init (PID 1), which ipykernel would take for
        # a dead parent; bwrap's --die-with-parent ends the kernel with the grader instead.
        os.environ.pop("JPY_PARENT_PID", None)
        command = bwrap_argv(settings, command)
    else:
        os.chdir(settings.scratch)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
