"""The kernel's sandbox (autograder.sandbox.launcher), its control group (autograder.sandbox.cgroups) and the caps on what it
sends (autograder.sandbox.execute), each checked on its own with real processes where the machine allows them."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from planted import sandbox_missing

from autograder.sandbox import cgroups
from autograder.sandbox.execute import MAX_TRACEBACK_LINES, REPORT_BYTES_PER_CELL, CappedExecute
from autograder.sandbox.launcher import (
    PASSED_THROUGH,
    Limits,
    Settings,
    _redirect_output,
    apply_limits,
    bwrap_argv,
    kernel_environment,
    sandboxed_python,
)
from autograder.verdicts.verdict import REPORT_MIME

REPOSITORY = Path(__file__).resolve().parents[1]

NO_BWRAP = sandbox_missing()
NO_CGROUP = cgroups.problem()
ALLOWED_ENVIRONMENT = {
    *PASSED_THROUGH,
    *("PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "PYTHONPATH", "MPLBACKEND", "MPLCONFIGDIR"),
    *("IPYTHONDIR", "PYDEVD_DISABLE_FILE_VALIDATION", "PWD", "AUTOGRADER_GRADING"),
    *("AUTOGRADER_STUDENT_ID", "AUTOGRADER_VARIANTS"),  # whose parameters the varied items use (autograder.variants)
}


def _settings(tmp_path: Path, **changes) -> Settings:
    runtime = tmp_path / "runtime"
    runtime.mkdir(exist_ok=True)
    return Settings(scratch=str(tmp_path), runtime=str(runtime), **changes)


# ------------------------------------------------------------------------------------------ the file system


def test_the_sandbox_is_built_from_an_allowlist_not_from_the_whole_machine(tmp_path):
    argv = bwrap_argv(_settings(tmp_path, limits=Limits(tmp_mb=16)), ["python"])
    text = " ".join(argv)
    assert "--ro-bind / /" not in text
    bound = [argv[index + 1] for index, word in enumerate(argv) if word in ("--ro-bind", "--bind", "--ro-bind-try")]
    for forbidden in ("/home", "/run", "/var", "/srv", "/mnt", "/opt", "/etc/passwd", "/etc/shadow"):
        assert not any(path == forbidden or path.startswith(forbidden + "/") for path in bound), forbidden
    # The course is the kernel's view of it, at /course; nothing of the checkout is bound.
    assert "/course" in [argv[index + 2] for index, word in enumerate(argv) if word == "--ro-bind"]
    venv = Path(sandboxed_python()).parents[1]  # a checkout's own .venv is bound; nothing else of the checkout
    bound_outside_venv = [path for path in bound if not Path(path).is_relative_to(venv)]
    assert not any(path == str(REPOSITORY) or path.startswith(f"{REPOSITORY}/") for path in bound_outside_venv)
    assert f"--size {16 * 1024 * 1024} --tmpfs /tmp" in text and f"--size {16 * 1024 * 1024} --tmpfs /dev/shm" in text
    assert "--unshare-all" in text and "--cap-drop ALL" in text and "--uid 65534 --gid 65534" in text
    assert argv[-1] == "python"


def test_the_kernel_environment_is_an_allowlist(tmp_path):
    parent = {"PGPASSWORD": "hunter2", "JUPYTERHUB_API_TOKEN": "token", "AWS_SECRET_ACCESS_KEY": "key",
              "OPENBLAS_CORETYPE": "Haswell", "PATH": "/somewhere/else"}
    environment = kernel_environment(_settings(tmp_path), parent)
    assert set(environment) <= ALLOWED_ENVIRONMENT
    assert "hunter2" not in json.dumps(environment) and "/somewhere/else" not in environment["PATH"]
    assert environment["OPENBLAS_CORETYPE"] == "Haswell"  # kept: numerics on some processors depend on it
    assert environment["AUTOGRADER_GRADING"] == "1"  # unanswered items fail their test cells (autograder.student.progress)
    assert (environment["AUTOGRADER_STUDENT_ID"], environment["AUTOGRADER_VARIANTS"]) == ("", "1")
    named = kernel_environment(_settings(tmp_path, student="ana", variants=False), parent)
    assert (named["AUTOGRADER_STUDENT_ID"], named["AUTOGRADER_VARIANTS"]) == ("ana", "0")


PROBE = """
import json, os, socket, sys
seen = {"uid": os.getuid(), "root": sorted(os.listdir("/")), "environment": sorted(os.environ)}
readable = []
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as handle:
            readable.append(path)
    except OSError:
        pass
seen["readable"] = readable
connected = []
for path in sys.argv[1:]:
    try:
        client = socket.socket(socket.AF_UNIX)
        client.connect(path)
        connected.append(path)
    except OSError:
        pass
seen["connected"] = connected
wrote = []
for path in ("/pwned", "/usr/pwned", "/etc/pwned", os.path.join(os.environ["PYTHONPATH"], "pwned"),
             os.path.join(os.environ["PYTHONPATH"], "posenc_ref", "pwned")):
    try:
        open(path, "w").close()
        wrote.append(path)
    except OSError:
        pass
seen["wrote"] = wrote
try:
    socket.create_connection(("127.0.0.1", int(os.environ.get("PROBE_PORT", "22"))), timeout=2)
    seen["tcp"] = True
except OSError:
    seen["tcp"] = False
written = 0
try:
    with open("/dev/shm/hoard", "wb") as handle:
        for _ in range(64):
            handle.write(b"0" * 1024 * 1024)
            written += 1
except OSError:
    pass
seen["shm_mb"] = written
print(json.dumps(seen))
"""


@pytest.fixture
def host_secrets():
    """A mode-600 file and a listening Unix socket where the machine keeps such things (/var/tmp), outside the
    test's /tmp, which the sandbox replaces anyway."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-test-", dir="/var/tmp"))
    secret = folder / "secret.txt"
    secret.write_text("secret")
    secret.chmod(0o600)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "host.sock"))
    server.listen()
    yield [secret, folder / "host.sock"]
    server.close()
    shutil.rmtree(folder)


@pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap cannot run here: {NO_BWRAP}")
def test_the_kernel_sees_no_secret_file_socket_or_variable(tmp_path, host_secrets):
    targets = [*map(str, host_secrets), "/etc/shadow", "/etc/passwd", "/var/run/postgresql/.s.PGSQL.5432",
               str(REPOSITORY / "autograder" / "source" / "01_permutation" / "01_permutation.ipynb"),
               str(REPOSITORY / "tests" / "test_grader_sandbox.py"), str(REPOSITORY / ".git" / "HEAD")]
    settings = _settings(tmp_path, limits=Limits(tmp_mb=16))
    listener = socket.create_server(("127.0.0.1", 0))
    environment = kernel_environment(settings, {**os.environ, "PGPASSWORD": "hunter2"})
    environment["PROBE_PORT"] = str(listener.getsockname()[1])
    completed = subprocess.run(
        bwrap_argv(settings, [sandboxed_python(), "-c", PROBE, *targets]),
        capture_output=True, text=True, timeout=120, check=False, env=environment,
    )
    listener.close()
    assert completed.returncode == 0, completed.stderr
    seen = json.loads(completed.stdout)
    # Only the kernel's own new /tmp is writable (a checkout under /tmp has its folders made there to hold the
    # read-only binds); nothing reaches the machine's files.
    assert [path for path in seen["wrote"] if not path.startswith("/tmp/")] == [] and seen["tcp"] is False
    assert not (REPOSITORY / "pwned").exists() and not (REPOSITORY / "posenc_ref" / "pwned").exists()
    assert seen["uid"] == 65534
    assert set(seen["root"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "sbin", "tmp",
                                 "usr", "course", *Path(sandboxed_python()).parts[1:2],
                                 *Path(sys.base_prefix).resolve().parts[1:2]}
    assert seen["readable"] == [] and seen["connected"] == []
    assert set(seen["environment"]) <= ALLOWED_ENVIRONMENT | {"PROBE_PORT"}
    assert seen["shm_mb"] == 16  # the size of its /dev/shm, then "no space left"


def test_the_kernel_writes_into_its_own_log_not_the_worker_s_output(tmp_path):
    log = tmp_path / "kernel.log"
    code = (
        "import os, sys\n"
        f"from autograder.sandbox.launcher import _redirect_output\n_redirect_output({str(log)!r})\n"
        "os.write(1, b'out\\n'); os.write(2, b'err\\n'); print(sys.stdin.read() == '')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], input="typed", capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert completed.returncode == 0 and completed.stdout == "" and completed.stderr == ""
    assert log.read_text().split() == ["out", "err", "True"]
    assert _redirect_output  # the launcher's step, imported as the launcher runs it


def test_limits_stop_an_allocation_beyond_the_memory_limit(tmp_path):
    code = (
        "from autograder.sandbox.launcher import Limits, apply_limits\n"
        "apply_limits(Limits(memory_mb=1024, cpu_seconds=30, processes=0, file_size_mb=1))\n"
        "try:\n    bytearray(2 * 1024 ** 3)\nexcept MemoryError:\n    print('refused')\n"
        "try:\n    open('big', 'wb').write(b'0' * 2 * 1024 ** 2)\nexcept OSError:\n    print('too big')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert completed.stdout.split() == ["refused", "too", "big"], completed.stderr
    assert (tmp_path / "big").stat().st_size == 1024**2  # cut at the 1 MiB file-size limit
    assert apply_limits  # the function the launcher calls


def test_the_kernels_code_cannot_raise_a_limit_back():
    # A soft limit under a higher hard one is advice: the kernel's code could raise it to the hard value.
    code = (
        "import json, resource\n"
        "from autograder.sandbox.launcher import Limits, apply_limits\n"
        "apply_limits(Limits(memory_mb=1024, cpu_seconds=30, processes=50, file_size_mb=1))\n"
        "names = ['AS', 'CPU', 'FSIZE', 'NPROC', 'CORE', 'NOFILE', 'MSGQUEUE', 'SIGPENDING']\n"
        "seen = {name: resource.getrlimit(getattr(resource, 'RLIMIT_' + name)) for name in names}\n"
        "raised = []\n"
        "for name in names:\n"
        "    soft, hard = seen[name]\n"
        "    try:\n"
        "        resource.setrlimit(getattr(resource, 'RLIMIT_' + name), (soft, soft + 1))\n"
        "        raised.append(name)\n"
        "    except (ValueError, OSError):\n"
        "        pass\n"
        "print(json.dumps({'seen': seen, 'raised': raised}))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    seen = {name: tuple(pair) for name, pair in result["seen"].items()}
    assert all(soft == hard for soft, hard in seen.values()), seen
    assert seen["AS"][0] == 1024 * 1024**2 and seen["CPU"][0] == 30 and seen["FSIZE"][0] == 1024**2
    assert seen["CORE"][0] == 0 and seen["MSGQUEUE"][0] == 0
    assert seen["NOFILE"][0] <= 1024 and seen["SIGPENDING"][0] <= 1024
    if os.geteuid() != 0:  # root may raise a hard limit (CAP_SYS_RESOURCE); the kernel runs without capabilities
        assert result["raised"] == []


# ------------------------------------------------------------------------------------------ control groups

GROUP_PROBE = """
import os, sys, time
for folder in sys.argv[1:]:
    with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
started = []
for _ in range(60):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.setsid()
        time.sleep(30)
        os._exit(0)
    started.append(pid)
print(len(started), flush=True)
with open(f"/proc/{started[-1]}/cgroup") as handle:
    print(handle.read().replace(chr(10), " "), flush=True)
with open("/dev/shm/autograder-test-hoard-" + str(os.getpid()), "wb") as handle:
    os.unlink(handle.name)
    for _ in range(512):
        handle.write(b"0" * 1024 * 1024)
print("hoarded 512 MB")
"""


@pytest.mark.skipif(NO_CGROUP is not None, reason=f"no control groups here: {NO_CGROUP}")
def test_a_control_group_holds_processes_in_new_sessions_and_shared_memory():
    group = cgroups.KernelGroup.create(memory_bytes=128 * 1024 * 1024, processes=16)
    try:
        completed = subprocess.run(
            [sys.executable, "-c", GROUP_PROBE, *map(str, group.folders)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        lines = completed.stdout.splitlines()
        assert int(lines[0]) == 15  # 16 processes in all, the first one included
        assert group.folders[0].name in lines[1]  # a child in a new session stays in the group
        assert "hoarded" not in completed.stdout and completed.returncode != 0  # killed at 128 MB
        assert group.memory_limit_hits() >= 1
        weight = "cpu.weight" if group.version == 2 else "cpu.shares"
        folder = group.folders[0] if group.version == 2 else group.folders[cgroups.CONTROLLERS.index("cpu")]
        assert (folder / weight).read_text().strip() == ("100" if group.version == 2 else "1024")
    finally:
        group.remove()
    assert not any(folder.exists() for folder in group.folders)
    assert not group.pids()


@pytest.mark.skipif(NO_CGROUP is not None, reason=f"no control groups here: {NO_CGROUP}")
def test_groups_made_at_once_weigh_the_kernels_folder_as_both_once_they_hold_their_processes():
    """Each worker's group makes the kernels' folder weigh one more ordinary process beside the machine's others.
    Two workers that made their groups at the same moment each counted only its own (the other held no process
    yet), and the folder kept the weight of one: beside one busy process, two workers got a core between them."""
    weight_name = {2: "cpu.weight", 1: "cpu.shares"}
    groups = [cgroups.KernelGroup.create(memory_bytes=0, processes=0) for _ in range(2)]
    sleepers = []
    try:
        version = groups[0].version
        cpu = (lambda group: group.folders[0] if version == 2 else group.folders[cgroups.CONTROLLERS.index("cpu")])
        kernels = cpu(groups[0]).parent
        assert kernels.name == cgroups.KERNELS_FOLDER
        for group in groups:
            sleepers.append(subprocess.Popen(["sleep", "120"]))
            group.join(sleepers[-1].pid)
        in_use = sum(1 for folder in kernels.iterdir()  # read here, not by the code under test
                     if folder.name.startswith(cgroups.GROUP_PREFIX) and any(
                         (Path(inner) / "cgroup.procs").read_text().strip() for inner, _, _ in os.walk(folder)))
        assert in_use >= 2
        expected = min(cgroups.MAX_WEIGHT[version], cgroups.DEFAULT_WEIGHT[version] * in_use)
        assert groups[1].weigh_folder() == expected
        assert int((kernels / weight_name[version]).read_text()) == expected
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        for group in groups:
            group.remove()


def test_cgroup_v2_limits_are_written_where_a_delegated_folder_says(tmp_path, monkeypatch):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setenv(cgroups.DELEGATED_VARIABLE, str(tmp_path))
    cgroups.hierarchy.cache_clear()
    try:
        group = cgroups.KernelGroup.create(memory_bytes=256 * 1024 * 1024, processes=32)
        kernels = tmp_path / cgroups.KERNELS_FOLDER
        assert group.version == 2 and group.folders[0].parent == kernels
        io = " +io" if cgroups.throttled_devices() else ""  # the folder offers io; a disk is behind the files
        assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids +cpu" + io
        assert (kernels / "cgroup.subtree_control").read_text() == "+memory +pids +cpu" + io
        assert (group.folders[0] / "memory.max").read_text() == str(256 * 1024 * 1024)
        assert (group.folders[0] / "pids.max").read_text() == "32"
        assert (group.folders[0] / "cpu.weight").read_text() == "100"
        if io:  # one line is written per disk: the file keeps the last
            assert (group.folders[0] / "io.max").read_text() == (
                f"{cgroups.throttled_devices()[-1]} rbps={cgroups.READ_BYTES_PER_SECOND} "
                f"wbps={cgroups.WRITE_BYTES_PER_SECOND} riops={cgroups.OPERATIONS_PER_SECOND} "
                f"wiops={cgroups.OPERATIONS_PER_SECOND}")
    finally:
        cgroups.hierarchy.cache_clear()


def test_the_kernels_folder_weighs_one_ordinary_process_per_worker_group(tmp_path, monkeypatch):
    """Each worker's sandbox gets the share of one process against the machine's others: the folder of the
    groups weighs 100 (cgroup v2's default) per group in it, counted again at every change."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setenv(cgroups.DELEGATED_VARIABLE, str(tmp_path))
    cgroups.hierarchy.cache_clear()
    kernels = tmp_path / cgroups.KERNELS_FOLDER

    def removed(group):  # a real cgroup folder's files go with it; these are plain files
        for folder in group.folders:
            for entry in folder.iterdir():
                entry.unlink() if entry.is_file() else None
        group.remove()

    def running(group, name="kernel"):  # a worker's group with a process in a group inside it
        inner = group.child(name)
        (inner.folders[0] / "cgroup.procs").write_text("99999999\n")  # no process has this ID (past PID_MAX_LIMIT)
        return inner

    try:
        first = cgroups.KernelGroup.create(memory_bytes=0, processes=0)
        assert (kernels / "cpu.weight").read_text() == "100"
        first_kernel = running(first)
        second = cgroups.KernelGroup.create(memory_bytes=0, processes=0)
        assert (kernels / "cpu.weight").read_text() == "200"  # the new group counts before its processes join
        second_kernel = running(second)
        third = cgroups.KernelGroup.create(memory_bytes=0, processes=0)
        assert (kernels / "cpu.weight").read_text() == "300"
        third_kernel = running(third)
        (kernels / "kernel-left-empty-by-a-grader-that-died").mkdir()  # not counted: it holds no process
        stage = running(second, "stage")  # a group inside a worker's is not a worker's
        assert (kernels / "cpu.weight").read_text() == "300"
        removed(stage)
        assert (kernels / "cpu.weight").read_text() == "300"
        removed(second_kernel)
        removed(second)
        assert (kernels / "cpu.weight").read_text() == "200"
        removed(first_kernel)
        removed(first)
        assert (kernels / "cpu.weight").read_text() == "100"
        removed(third_kernel)
        removed(third)
        assert (kernels / "cpu.weight").read_text() == "100"  # never below one process's weight
        for group in (first, second, third):
            assert (group.folders[0] / "cpu.weight").exists() is False
    finally:
        cgroups.hierarchy.cache_clear()


def test_the_kernels_folder_weight_stops_at_the_controller_s_maximum(tmp_path):
    for index in range(150):
        (tmp_path / f"kernel-{index}").mkdir()
        (tmp_path / f"kernel-{index}" / "cgroup.procs").write_text(f"{index + 100}\n")
    assert cgroups.weigh_kernels_folder(2, tmp_path) == 10000
    assert (tmp_path / "cpu.weight").read_text() == "10000"
    assert cgroups.weigh_kernels_folder(1, tmp_path) == 150 * 1024
    assert (tmp_path / "cpu.shares").read_text() == str(150 * 1024)
    assert cgroups.weigh_kernels_folder(1, tmp_path / "missing") == 0


DIRECT_READ = """
import mmap, os, sys, time
path = sys.argv[1]
descriptor = os.open(path, os.O_RDONLY | os.O_DIRECT)
buffer = mmap.mmap(-1, 1024 * 1024)  # page-aligned, as O_DIRECT needs
began, total = time.monotonic(), 0
while (count := os.readv(descriptor, [buffer])) > 0:
    total += count
print(total, time.monotonic() - began)
"""


@pytest.mark.skipif(NO_CGROUP is not None, reason=f"no control groups here: {NO_CGROUP}")
def test_a_kernels_reads_past_the_page_cache_wait_at_its_groups_disk_limit(tmp_path, monkeypatch):
    if not cgroups.hierarchy().io:
        pytest.skip("no I/O controller (io or blkio) here, or no disk behind the files")
    data = tmp_path / "data.bin"
    with open(data, "wb") as handle:
        handle.write(os.urandom(24 * 1024 * 1024))
        handle.flush()
        os.fsync(handle.fileno())
    monkeypatch.setattr(cgroups, "READ_BYTES_PER_SECOND", 8 * 1024 * 1024)
    group = cgroups.KernelGroup.create(memory_bytes=256 * 1024 * 1024, processes=8)
    try:
        limits = [folder / name for folder in group.folders
                  for name in ("io.max", "blkio.throttle.read_bps_device") if (folder / name).exists()]
        assert any(f"{8 * 1024 * 1024}" in path.read_text() for path in limits), limits
        completed = subprocess.run([sys.executable, "-c", DIRECT_READ, str(data)], capture_output=True, text=True,
                                   timeout=120, check=False, preexec_fn=group.join)
        total, seconds = completed.stdout.split()
    finally:
        group.remove()
    assert int(total) == 24 * 1024 * 1024, completed.stderr
    # 24 MiB at 8 MiB/s: 3 s; the throttle lets a first slice through at once, so at least 2.5 s
    assert float(seconds) >= 2.5, seconds


def test_a_folder_without_the_controllers_is_refused_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    monkeypatch.setenv(cgroups.DELEGATED_VARIABLE, str(tmp_path))
    cgroups.hierarchy.cache_clear()
    try:
        reason = cgroups.problem()
        assert reason is not None and "memory" in reason and "pids" in reason
    finally:
        cgroups.hierarchy.cache_clear()


# ------------------------------------------------------------------------------------------ output caps


def _executor(cell_bytes: int, notebook_bytes: int) -> tuple[CappedExecute, nbformat.NotebookNode]:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x") for _ in range(4)])
    executor = CappedExecute(max_output_bytes=cell_bytes, max_notebook_bytes=notebook_bytes)
    executor.nb = notebook
    executor.reset_execution_trackers()
    executor.clear_before_next_output = False  # set by nbclient when a cell starts
    executor._cell_bytes, executor._report_bytes, executor._notebook_bytes = {}, {}, 0
    executor._noticed = set()
    return executor, notebook


def _message(kind: str, content: dict, buffers=()) -> dict:
    return {"msg_type": kind, "content": content, "header": {"msg_type": kind}, "parent_header": {},
            "metadata": {}, "buffers": list(buffers)}


def _stream(text: str) -> dict:
    return _message("stream", {"name": "stdout", "text": text})


def test_outputs_are_capped_per_cell_and_per_notebook():
    executor, notebook = _executor(cell_bytes=10_000, notebook_bytes=25_000)
    for index in range(3):
        for _ in range(4):
            executor.process_message(_stream("x" * 4_000), notebook.cells[index], index)
    kept = [sum(len(output.get("text", "")) for output in cell.outputs) for cell in notebook.cells]
    assert kept[0] == 8_000 and kept[1] == 8_000  # the third message of each cell crossed 10,000 bytes
    assert kept[2] <= 8_000 and executor._notebook_bytes > 25_000
    notices = [output for cell in notebook.cells for output in cell.outputs if output.output_type == "display_data"]
    assert len(notices) == 3 and "the notebook's output" in notices[-1].data["text/plain"]


def test_widget_messages_count_and_are_dropped_past_the_notebook_cap():
    executor, notebook = _executor(cell_bytes=10_000, notebook_bytes=50_000)
    opened = _message("comm_open", {"comm_id": "c1", "target_name": "x", "data": {"state": {}}})
    executor.process_message(opened, notebook.cells[0], 0)
    for _ in range(100):
        message = _message("comm_msg", {"comm_id": "c1", "data": {"method": "update", "state": {}}}, [b"0" * 20_000])
        executor.process_message(message, notebook.cells[0], 0)
    assert 50_000 < executor._notebook_bytes < 80_000  # counted until the cap, then no longer received
    assert notebook.cells[0].outputs == []


def test_errors_always_pass_shortened_and_reports_have_their_own_budget():
    executor, notebook = _executor(cell_bytes=1_000, notebook_bytes=1_000)
    executor.process_message(_stream("x" * 5_000), notebook.cells[0], 0)  # both caps used up
    traceback = [f"line {number}" for number in range(500)]
    error = _message("error", {"ename": "E" * 10_000, "evalue": "boom", "traceback": traceback})
    executor.process_message(error, notebook.cells[1], 1)
    errors = [output for output in notebook.cells[1].outputs if output.output_type == "error"]
    assert len(errors) == 1 and len(errors[0].ename) == 2000 and len(errors[0].traceback) == MAX_TRACEBACK_LINES
    report = _message("display_data", {"data": {REPORT_MIME: "r" * 1000}, "metadata": {}})
    for _ in range(3):
        executor.process_message(report, notebook.cells[2], 2)
    assert len(notebook.cells[2].outputs) == 3  # past the output caps, within the reports' budget
    flood = _message("display_data", {"data": {REPORT_MIME: "r" * REPORT_BYTES_PER_CELL}, "metadata": {}})
    executor.process_message(flood, notebook.cells[2], 2)
    assert len(notebook.cells[2].outputs) == 3


def test_a_delegated_group_that_holds_the_grader_moves_it_into_a_leaf_first(tmp_path, monkeypatch):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.procs").write_text("4242\n4343\n")
    enabled = []

    def enable(folder, io=False):  # cgroup v2 refuses controllers below a group that holds processes (EBUSY)
        if folder == tmp_path and not (tmp_path / cgroups.GRADER_FOLDER).exists():
            raise OSError(errno.EBUSY, "Device or resource busy")
        enabled.append(folder)

    monkeypatch.setattr(cgroups, "_enable_controllers", enable)
    found = cgroups._v2_hierarchy(tmp_path, move_own=True)
    assert found.parents == (tmp_path / cgroups.KERNELS_FOLDER,)
    assert enabled == [tmp_path, tmp_path / cgroups.KERNELS_FOLDER]
    assert (tmp_path / cgroups.GRADER_FOLDER / "cgroup.procs").read_text() == "4343"  # each pid written in turn


def test_a_group_that_holds_other_processes_is_not_taken_over(tmp_path, monkeypatch):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")

    def refuse(folder, io=False):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(cgroups, "_enable_controllers", refuse)
    with pytest.raises(OSError, match="busy"):
        cgroups._v2_hierarchy(tmp_path)
    assert not (tmp_path / cgroups.GRADER_FOLDER).exists()
