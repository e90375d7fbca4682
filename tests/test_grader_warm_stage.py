"""The warm grading stage (autograder.sandbox.warm_stage): a server per worker, a fresh sandbox per submission.

What one submission's stage leaves, a later one of the same server must not find: files, shared memory,
processes, sockets, the server itself. Each test runs code where a submission's stage runs (after
:func:`autograder.sandbox.stage.enter`), in a server started as the worker starts it, with a test's ``grade``.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.sandbox import accounts, stage
from autograder.sandbox.launcher import Limits, bwrap_problem
from autograder.sandbox.stage import bwrap_stage_argv, private_devices, stage_environment
from autograder.sandbox.warm_stage import WarmStage

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap cannot run here: {bwrap_problem()}")

# A server whose children run the script they are given on standard input, once in their stage's folders.
SCRIPT_SERVER = (
    "import sys\n"
    "from autograder.sandbox.warm_stage import serve\n"
    "def run(received):\n"
    "    from autograder.sandbox.launcher import Limits\n"
    "    from autograder.sandbox.stage import enter\n"
    "    import os\n"
    "    enter(Limits(tmp_mb=4), 100)\n"
    "    exec(sys.stdin.read(), {'RECEIVED': received[0]})\n"
    "serve(int(sys.argv[2]), grade=run)\n"
)


EFFECTIVE = {"one user": 0, "the kernel's account": 1 << 5}  # CAP_KILL, for nbgrader to stop that account's kernel


@pytest.fixture(params=list(EFFECTIVE))
def server(request, tmp_path):
    """A server as the worker starts it: under the grader's user alone, or (a root grader) in the namespace
    that maps the kernel's account (autograder.sandbox.accounts)."""
    descriptor = None
    if request.param == "the kernel's account":
        if os.geteuid() != 0 or accounts.account_problem() is not None:
            pytest.skip(f"kernels have no account of their own here: {accounts.account_problem() or 'not root'}")
        descriptor = accounts.user_namespace(accounts.kernel_account())
    jupyter = tmp_path / "jupyter"
    jupyter.mkdir()
    try:
        devices = private_devices(tmp_path / "devices")  # as the worker gives them (a root grader)
        argv = bwrap_stage_argv(tmp_path, jupyter, user_namespace=descriptor, devices=devices)[:-3]
        started = WarmStage.start(
            ("test",), [*argv, sys.executable, "-c", SCRIPT_SERVER], stage_environment(jupyter, stage.HOME),
            Limits(), pass_fds=() if descriptor is None else (descriptor,),
        )
    finally:
        if descriptor is not None:
            os.close(descriptor)
    started.effective = EFFECTIVE[request.param]
    yield started
    started.close()


def _run(server: WarmStage, tmp_path: Path, script: str, seconds: float = 120):
    notebook = tmp_path / "notebook.ipynb"
    notebook.write_text("{}")
    return server.grade(script.encode(), notebook, seconds)


def _observed(outcome) -> dict:
    assert outcome.stopped is None and outcome.returncode == 0, outcome.errors.decode()[-3000:]
    return json.loads(outcome.response.decode().splitlines()[-1])


LOOK = """
    import json, os, socket
    seen = {"pid": os.getpid(), "grading": sorted(os.listdir("/grading")), "shm": sorted(os.listdir("/dev/shm")),
            "processes": sorted(int(name) for name in os.listdir("/proc") if name.isdigit()),
            "descriptors": sorted(int(name) for name in os.listdir("/proc/self/fd"))}
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
    seen["capabilities"] = [status[name].strip() for name in ("CapEff", "CapPrm", "CapBnd")]
    seen["dumpable_nnp"] = status["NoNewPrivs"].strip()
    for place in ("/tmp/x", "/dev/x", "/proc/sys/kernel/hostname"):
        try:
            with open(place, "w") as handle:
                handle.write("x")
            seen[place] = "written"
        except OSError as error:
            seen[place] = error.errno
    # The machine's places in /proc (bwrap's covers): opened for writing, never written.
    seen["proc_opened"] = []
    for place in ("/proc/sysrq-trigger", "/proc/irq/default_smp_affinity", "/proc/bus/pci/devices"):
        try:
            os.close(os.open(place, os.O_WRONLY))
            seen["proc_opened"].append(place)
        except OSError:
            pass
    # The notebook: a sealed copy, not the grader's file.
    try:
        with open(f"/proc/self/fd/{RECEIVED}", "r+b") as handle:
            handle.write(b"changed")
        seen["notebook"] = "written"
    except OSError as error:
        seen["notebook"] = error.errno
    seen["notebook_text"] = os.pread(RECEIVED, 100, 0).decode()
    seen["received"] = RECEIVED
    # The machine's device files and entries of /proc (one mode for every /proc of the machine): each set to the
    # mode it has, so that nothing changes even where it is allowed.
    import stat as stat_module
    for key, folder, names in (("devices", "/dev", ("null", "zero", "urandom", "tty")),
                               ("proc_modes", "/proc", ("meminfo", "cpuinfo", "stat", "sys/kernel"))):
        seen[key] = []
        for name in names:
            try:
                os.chmod(f"{folder}/{name}", stat_module.S_IMODE(os.stat(f"{folder}/{name}").st_mode))
                seen[key].append("changed")
            except OSError as error:
                seen[key].append(error.errno)
    # Pseudo-terminals: none.
    seen["ptmx"] = os.path.exists("/dev/pts/ptmx") or os.path.exists("/dev/ptmx")
    # Keyrings: the user's would be the next submission's too.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    stored = libc.syscall(248 if os.uname().machine == "x86_64" else 217, b"user", b"left", b"x", 1, -4)
    seen["key"] = ctypes.get_errno() if stored < 0 else "stored"
    for name, address, family in (("abstract", "\\0warm-TOKEN", socket.AF_UNIX), ("tcp", ("127.0.0.1", PORT), socket.AF_INET)):
        with socket.socket(family) as probe:
            try:
                probe.connect(address)
                seen[name] = "connected"
            except OSError as error:
                seen[name] = error.errno
"""


@needs_bwrap
def test_a_later_submission_finds_nothing_an_earlier_one_left(server, tmp_path):
    token = secrets.token_hex(4)
    port = 20000 + secrets.randbelow(20000)
    look = textwrap.dedent(LOOK).replace("TOKEN", token).replace("PORT", str(port))
    first = _observed(_run(server, tmp_path, look + textwrap.dedent(f"""
    open("/grading/left-behind", "w").write("x")
    open("/dev/shm/left-behind", "w").write("x")
    sleeper = os.fork()
    if sleeper == 0:  # a process that leaves its session and holds two listening sockets
        os.setsid()
        held = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_INET)]
        held[0].bind("\\0warm-{token}"); held[0].listen()
        held[1].bind(("127.0.0.1", {port})); held[1].listen()
        for kept in held:
            kept.set_inheritable(True)  # held across exec
        os.execvp("sleep", ["warm-{token}", "300"])
    import time
    time.sleep(0.5)
    seen["sleeper"] = os.path.exists(f"/proc/{{sleeper}}")
    for name, address, family in (("abstract_now", "\\0warm-{token}", socket.AF_UNIX),
                                  ("tcp_now", ("127.0.0.1", {port}), socket.AF_INET)):
        with socket.socket(family) as probe:
            probe.connect(address)  # the control: while the first submission lives, its sockets answer
            seen[name] = "connected"
    print(json.dumps(seen))
    """)))
    second = _observed(_run(server, tmp_path, look + "\nprint(json.dumps(seen))\n"))
    for seen in (first, second):
        assert seen["pid"] == 1  # the first process of a namespace of its own
        assert int(seen["capabilities"][0], 16) == server.effective and seen["dumpable_nnp"] == "1"
        assert seen["/tmp/x"] != "written" and seen["/dev/x"] != "written"
        assert seen["/proc/sys/kernel/hostname"] != "written"
        # The standard three, the notebook's copy and the listing's own: nothing of the server's.
        assert seen["descriptors"][:3] == [0, 1, 2] and len(seen["descriptors"]) == 5
        assert seen["received"] in seen["descriptors"]
        assert seen["proc_opened"] == []
        assert seen["notebook"] != "written" and seen["notebook_text"] == "{}"
        assert seen["key"] == 1  # EPERM
        assert seen["devices"] == [1, 1, 1, 1]  # EPERM: not the stage's to change
        assert seen["proc_modes"] == [30, 30, 30, 30] and not seen["ptmx"]  # EROFS
    assert first["processes"] == [1]
    assert first["sleeper"] and first["abstract_now"] == first["tcp_now"] == "connected"
    assert second["grading"] == ["home", "kernel"] and second["shm"] == []
    assert second["processes"] == [1]  # the first one's process ended with it
    assert second["abstract"] != "connected" and second["tcp"] != "connected"
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"warm-{token}"], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", "a process of the first submission outlived it"


@needs_bwrap
def test_a_signal_to_a_submissions_process_group_does_not_reach_the_server(server, tmp_path):
    outcome = _run(server, tmp_path, "import os, signal\nos.killpg(0, signal.SIGKILL)\n")
    assert outcome.stopped is None and outcome.response == b""
    assert server.alive()
    assert _observed(_run(server, tmp_path, "import json\nprint(json.dumps({'after': True}))\n")) == {"after": True}


@needs_bwrap
def test_a_submission_reaches_its_own_loopback(server, tmp_path):
    seen = _observed(_run(server, tmp_path, textwrap.dedent("""
    import json, socket
    with socket.socket() as listening, socket.socket() as client:
        listening.bind(("127.0.0.1", 0)); listening.listen()
        client.connect(listening.getsockname())
        print(json.dumps({"connected": True}))
    """)))
    assert seen == {"connected": True}


@needs_bwrap
def test_a_submission_past_its_wall_clock_ends_the_server_with_everything_in_it(server, tmp_path):
    token = secrets.token_hex(4)
    outcome = _run(server, tmp_path, textwrap.dedent(f"""
    import os, time
    if os.fork() == 0:
        os.setsid()
        os.execvp("sleep", ["warm-{token}", "300"])
    time.sleep(300)
    """), seconds=3)
    assert outcome.stopped == "grading took longer than 3 seconds in all and was stopped"
    assert not server.alive()
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"warm-{token}"], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == ""


def test_the_server_binds_no_students_file(tmp_path):
    # What the sandbox binds: the system, Python, the course's packages and the batch's folders, named by the
    # worker; a submission's notebook comes to a stage as an open file, never as a path in the sandbox.
    template, jupyter, view = tmp_path / "course", tmp_path / "jupyter", tmp_path / "view"
    argv = bwrap_stage_argv(template, jupyter, extra=(view,))
    bound = {argv[index + 2] for index, word in enumerate(argv) if word in ("--ro-bind", "--bind")}
    batch = {str(path) for path in (template, jupyter, view)}
    assert batch <= bound
    assert not any(str(tmp_path) in path for path in bound - batch)


def test_the_worker_restores_what_a_stage_can_change_of_the_kernel_groups_file(tmp_path):
    # Round 25: the kernel group's cgroup.procs, writable by every stage of a server, lasts for the worker's
    # submissions: a stage that made it unwritable stopped every later kernel; its attributes carried data.
    from autograder.pipeline import ServerContext

    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    procs.chmod(0o644)
    context = ServerContext(None, (), procs_modes={str(procs): 0o644})
    procs.chmod(0o444)
    try:
        os.setxattr(procs, "user.left", b"for the next one")
    except OSError:
        pass  # a file system without user attributes: the mode alone
    context.restore_procs()
    assert stat.S_IMODE(procs.stat().st_mode) == 0o644
    assert os.listxattr(procs) == []
