"""``python -m autograder formgrader --out DIR``: JupyterLab with nbgrader's formgrader on the folder ``grade`` wrote.

DIR is an nbgrader course directory (:mod:`autograder.course_directory`): its ``nbgrader_config.py`` names the
class's gradebook and DIR as the course root, and ``autograded/`` holds the notebooks the gradebook's
submissions refer to, so the formgrader lists every submission and grades its written answers by hand into
that gradebook. JupyterLab runs from DIR (its working folder and ``root_dir``: nbgrader reads the course's
configuration there and writes its log there, never in the repository), with the folder of this interpreter
first on ``PATH`` (nbgrader runs the ``alembic`` program installed next to it), on ``--ip`` (loopback by
default) and ``--port`` (a free one by default), with a token drawn at random for each run, under a path
drawn at random for each run (``/<random>/formgrader``: its login cookies are limited to that path and signed by
a secret of this run, :func:`private_run_folder`), and with ``--allow-root`` when run as root. It answers only
connections of the grading accounts (:mod:`autograder.formgrader.peers`), and its log reaches the terminal
escaped (:func:`relay_output`).
The notebooks it shows were written by students, so the server is locked down: terminals are off (no shell in
the browser, which would be a root shell where the grader runs as root), no kernel can be started (one would
run a notebook's code as the grader's user, outside the sandbox: :mod:`autograder.formgrader.no_kernels`), its
file browser and ``/files/`` serve the grader's own files and folders only, never ``submitted/``
(:mod:`autograder.formgrader.contents`), and every response carries the
Content-Security-Policy of :mod:`autograder.formgrader.csp` (no inline script runs but the templates' own).
The formgrader's buttons that would grade, write or release feedback, or collect, with nbgrader's own commands
(Autograde, Generate Feedback, Release Feedback, Collect) are refused with the course's command that does the
job (:mod:`autograder.formgrader.refusals`). Both are server extensions that this package puts on the
server's ``PYTHONPATH``.
The server runs under the grading stage's address-space and file-size limits (:func:`server_limits`); what it
renders of a submission is bounded by the rebuild of the autograded notebook (:mod:`autograder.feedback.outputs`:
every text, code and HTML capped, and the number of cells and outputs), and each submission's view is made in a
child process under the stage's limits and a time limit (:mod:`autograder.formgrader.views`). The command prints
the formgrader's address with the token once JupyterLab alone listens on the port (:func:`served_by`: any
account can listen on a free port first, and a program that answers there would get the token), and runs until it is stopped (Ctrl-C, or a
SIGTERM), stopping JupyterLab with it; JupyterLab is also told to stop when this command's process ends in any
other way (``PR_SET_PDEATHSIG``), so that no server is left serving the class folder.
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from autograder.course_directory import configured_db_url
from autograder.formgrader.peers import tcp_sockets
from autograder.grade import configured_limits
from autograder.sandbox.launcher import MEGABYTE, Limits
from autograder.sandbox.stage import STAGE_MEMORY_MB

START_SECONDS = 120
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where the server imports its extensions
# The server extensions of this package: the peer check, the first cookie of each name, the policy on every
# response, the refusal of the formgrader's calls that would bypass the course's grader, and the submission views
# rendered under the grading stage's limits.
SERVER_EXTENSIONS = ("autograder.formgrader.peers", "autograder.formgrader.cookies", "autograder.formgrader.csp",
                     "autograder.formgrader.refusals", "autograder.formgrader.views")
# nbgrader's student-side server extensions, which its package enables for every server: off in the formgrader
# (their Validate runs a notebook in a kernel of its own, as the server's user; autograder.formgrader.refusals
# also refuses their routes).
STUDENT_SIDE_EXTENSIONS = ("nbgrader.server_extensions.validate_assignment",
                           "nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.course_list")
SERVER_EXTENSION_STATES = {**dict.fromkeys(SERVER_EXTENSIONS, True), **dict.fromkeys(STUDENT_SIDE_EXTENSIONS, False)}
# Their front-end plugins (the Assignments and Courses panels, the notebook's Validate button) are disabled in the
# page config that JupyterLab reads from this folder's labconfig/page_config.json, first on JUPYTER_CONFIG_PATH.
LAB_CONFIG_DIR = Path(__file__).resolve().parent / "jupyter_config"


def free_port(ip: str) -> int:
    with socket.socket() as probe:
        probe.bind((ip, 0))
        return probe.getsockname()[1]


def jupyterlab_command(out: Path, ip: str, open_browser: bool) -> list[str]:
    """The JupyterLab command line of the formgrader of ``out``. Neither the token nor the port is on it (both
    are in the environment, :func:`jupyterlab_environment`): every account of the machine can read a command
    line, only its owner a process's environment, and an account that knows the port can listen there
    first."""
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={out}",
        f"--ServerApp.ip={ip}",
        "--ServerApp.port_retries=0",
        "--LabApp.extension_manager=readonly",  # no package installed or removed by the server (pip, as its user)
        "--ServerApp.default_url=/formgrader",
        "--ServerApp.terminals_enabled=False",
        "--ServerApp.kernel_manager_class=autograder.formgrader.no_kernels.NoKernels",
        "--ServerApp.contents_manager_class=autograder.formgrader.contents.ServedFolders",
        f"--ServerApp.jpserver_extensions={SERVER_EXTENSION_STATES!r}",
    ]
    if os.geteuid() == 0:  # JupyterLab refuses root unless told; the grader's machines often run it as root
        command.append("--allow-root")
    return command + ([] if open_browser else ["--no-browser"])


def jupyterlab_environment(token: str, port: int, run_folder: Path | None = None) -> dict[str, str]:
    """The server's environment: its token and port (off the command line), and, with ``run_folder`` (this
    run's private folder, :func:`private_run_folder`), that folder first on its configuration path and as its
    runtime folder (where jupyter_server keeps the secret that signs its login cookies)."""
    environment = dict(os.environ)
    path = [str(Path(sys.executable).parent), *filter(None, environment.get("PATH", "").split(os.pathsep))]
    environment["PATH"] = os.pathsep.join(dict.fromkeys(path))
    python_path = [str(PACKAGE_ROOT), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(python_path))
    ours = [str(run_folder)] if run_folder is not None else []
    config_path = [*ours, str(LAB_CONFIG_DIR),
                   *filter(None, environment.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(dict.fromkeys(config_path))
    if run_folder is not None:
        environment["JUPYTER_RUNTIME_DIR"] = str(run_folder / "runtime")
        # What the server writes for its user (JupyterLab's settings and workspaces, the config service's
        # files) lands in this run's folder and goes with it, never in the instructor's home.
        environment["JUPYTER_CONFIG_DIR"] = str(run_folder / "config")
        environment["JUPYTERLAB_SETTINGS_DIR"] = str(run_folder / "settings")
        environment["JUPYTERLAB_WORKSPACES_DIR"] = str(run_folder / "workspaces")
    environment["JUPYTER_TOKEN"] = token
    environment["JUPYTER_PORT"] = str(port)  # jupyter_server's ServerApp.port, from its environment
    return environment


def private_run_folder(base_url: str) -> Path:
    """A new folder of this run, which only this user can enter (``mkdtemp``), holding the server's
    configuration of this run (``jupyter_server_config.json``: its ``base_url``) and its runtime folder: every
    run gets a new secret for its login cookies, so that a cookie of an earlier run opens no later one, and a new
    path that limits where browsers send them. (Browsers keep cookies per host, not per port; the path is no
    secret, since the server's own 404 page names it: what keeps another account's program from using a cookie it
    received is that the server answers no connection of that account, :mod:`autograder.formgrader.peers`.)"""
    folder = Path(tempfile.mkdtemp(prefix="autograder-formgrader-"))
    (folder / "runtime").mkdir(mode=0o700)
    (folder / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"base_url": base_url}}))
    return folder


def relay_output(source, stream: TextIO) -> None:
    """Copy the server's output (its log: every request line, with paths a client chose) to ``stream``, each
    line escaped as a line of ``report.txt`` (:func:`autograder.feedback.escape.report_text`): tornado refuses
    ESC and BEL in a request but passes the 8-bit controls (``\\x9b`` is a CSI to many terminals), so any
    account that reaches the port could otherwise write to the instructor's terminal."""
    from autograder.feedback.escape import report_text

    for line in source:
        stream.write(report_text(line.rstrip(b"\n").decode("utf-8", "backslashreplace")) + "\n")
        stream.flush()


def server_limits(limits: Limits) -> Callable[[], None]:
    """What the server's child runs before exec: its address space and file size held to the grading stage's
    for ``limits``, and a SIGTERM asked for when its parent (this command) ends. Its CPU time is not limited
    (it serves a whole grading session); each view is made under limits instead (:mod:`autograder.formgrader.views`)."""
    wanted = ((resource.RLIMIT_AS, (max(limits.memory_mb, 1024) + STAGE_MEMORY_MB) * MEGABYTE),
              (resource.RLIMIT_FSIZE, max(limits.file_size_mb, 64) * MEGABYTE))
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def set_limits() -> None:
        for kind, value in wanted:
            _, hard = resource.getrlimit(kind)
            resource.setrlimit(kind, (value, value) if hard == resource.RLIM_INFINITY else (min(value, hard),) * 2)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the request was made
            os.kill(os.getpid(), signal.SIGTERM)

    return set_limits


TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket (include/net/tcp_states.h)


def listening_sockets(port: int, ip: str, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the TCP sockets of this network namespace that listen on ``ip:port`` or on the port at
    every address of the same family (``0.0.0.0``, ``::``, which would take the connections to ``ip`` too):
    ``/proc/net/tcp`` and ``tcp6``, where the local address is the second column (address and port in
    hexadecimal), the state the fourth and the inode the tenth. A listener at another address of the port (``[::1]``,
    ``127.0.0.2``) takes no connection to ``ip`` and is left out."""
    wanted = ipaddress.ip_address(ip)
    return {
        inode for (local, listened), _, state, _, inode in tcp_sockets(proc)
        if state == TCP_LISTEN and listened == port
        and (local == wanted or (local.is_unspecified and local.version == wanted.version))
    }


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets that process ``pid`` holds open (its ``fd`` links read ``socket:[INODE]``)."""
    held = set()
    try:
        descriptors = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return held
    for descriptor in descriptors:
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            held.add(int(target[8:-1]))
    return held


def served_by(pid: int, ip: str, port: int) -> bool:
    """Whether ``ip:port`` is listened on, and only by sockets process ``pid`` holds: a port that another
    account took first (between the choice of a free port and JupyterLab's bind) would receive the token that
    the printed address carries, so an answer on the port proves nothing; whose socket answers does."""
    listening = listening_sockets(port, ip)
    return bool(listening) and listening <= socket_inodes(pid)


def serve(
    out: Path, *, ip: str = "127.0.0.1", port: int | None = None, open_browser: bool = True, stream: TextIO | None = None
) -> int:
    """Run JupyterLab with the formgrader of ``out`` until it stops; return its exit code.

    Raises:
        ValueError: ``out`` is not a folder that ``grade`` wrote (no ``nbgrader_config.py``), ``ip`` is not an
            address (a name would be resolved by JupyterLab, and its listener could not be checked), or ``port``
            is not between 1 and 65535.
    """
    stream = stream or sys.stdout
    out = Path(out).resolve()
    configured_db_url(out)
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {port}")
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"ip must be an address such as 127.0.0.1 or ::1, got {ip!r}") from None
    port = port or free_port(ip)
    token = secrets.token_hex(24)  # a new one each run: a token an old tab still sends opens nothing
    base_url = f"/{secrets.token_hex(8)}/"
    run_folder = private_run_folder(base_url)
    process = subprocess.Popen(
        jupyterlab_command(out, ip, open_browser), cwd=out, env=jupyterlab_environment(token, port, run_folder),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=server_limits(configured_limits()),  # noqa: PLW1509 (this process starts no threads of its own)
    )
    threading.Thread(target=relay_output, args=(process.stdout, sys.stderr), daemon=True).start()
    previous = signal.signal(signal.SIGTERM, lambda number, frame: process.terminate())
    try:
        deadline = time.monotonic() + START_SECONDS
        while process.poll() is None and not served_by(process.pid, ip, port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if process.poll() is not None:
            print(f"The formgrader did not start (JupyterLab ended with exit code {process.returncode}; another "
                  f"program may hold port {port}): run the command again", file=stream, flush=True)
            return process.returncode or 1
        if not served_by(process.pid, ip, port):
            print(f"The formgrader did not start: after {START_SECONDS} s port {port} is not JupyterLab's alone "
                  f"(another program listens on it); run the command again", file=stream, flush=True)
            return 1
        host = f"[{ip}]" if ":" in ip else ip
        print(f"The formgrader of {out}: http://{host}:{port}{base_url}formgrader?token={token}", file=stream,
              flush=True)
        print("Stop it with Ctrl-C.", file=stream, flush=True)
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGINT)  # JupyterLab asks for a confirmation on the first one
        return process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(run_folder, ignore_errors=True)
