"""A control group per student kernel: memory (shared memory included), processes and an equal CPU share.

Resource limits set with ``setrlimit`` are per process and do not all bind root; a control group holds a
kernel and every process it starts, whatever their user, session or name:

- memory: ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1), in bytes of resident memory, page cache and
  shared memory (files in ``/dev/shm`` and ``/tmp`` are charged to the group that wrote them); swap is off;
- processes: ``pids.max``, processes and threads together;
- CPU: every kernel's group has the same weight (``cpu.weight`` 100 in v2, ``cpu.shares`` 1024 in v1), so a
  kernel that starts sixty busy processes gets the same share of the cores as a neighbour that starts one;
  the folder that holds the groups weighs as many ordinary processes as it holds groups (one per worker:
  :func:`weigh_kernels_folder`), so that against the machine's other processes each worker's sandbox gets the
  share of one process, as a kernel outside any group would (with the folder's default weight, all the
  workers together had the share of one process: two workers beside one busy process got half the cores,
  not two thirds);
- disk I/O, where the ``io`` (v2) or ``blkio`` (v1) controller is there: reads and writes that reach the
  disks behind the system, the Python installation, the course and the temporary folder (each whole disk:
  :func:`throttled_devices`) at most :data:`READ_BYTES_PER_SECOND`, :data:`WRITE_BYTES_PER_SECOND` and
  :data:`OPERATIONS_PER_SECOND` each way (``io.max``, ``blkio.throttle.*``). Reads from the page cache are
  not counted; a kernel that reads past it (``O_DIRECT``, or files larger than its memory read again and
  again) waits instead of taking the disk from its neighbours.

Where the groups live: under the grader's own group in each hierarchy (``/proc/self/cgroup``), or under
``AUTOGRADER_CGROUP``: a cgroup v2 folder delegated to the grader's user, or ``self`` when the grader's own
group is delegated to it (``systemd-run --scope -p Delegate=yes``, see book/guide_instructors.md); the grader's processes then
move into a leaf of it, ``autograder-grader``, since cgroup v2 hands controllers down only from a group that
holds no process. cgroup v2 is used when its unified hierarchy offers the three controllers, else the v1
hierarchies ``memory``, ``pids`` and ``cpu``. :func:`problem` says why neither can be used; the grader then
writes that into ``report.txt``.
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
DELEGATED_VARIABLE = "AUTOGRADER_CGROUP"
CONTROLLERS = ("memory", "pids", "cpu")  # required
IO_CONTROLLERS = {2: "io", 1: "blkio"}  # used where there
READ_BYTES_PER_SECOND = 64 * 1024 * 1024  # a kernel's disk reads (cold imports of torch: seconds, once per boot)
WRITE_BYTES_PER_SECOND = 32 * 1024 * 1024
OPERATIONS_PER_SECOND = 1000
KERNELS_FOLDER = "autograder-kernels"
GRADER_FOLDER = "autograder-grader"


@dataclass(frozen=True)
class Hierarchy:
    """Where kernel groups are made: one folder per controller (v1: :data:`CONTROLLERS`, then ``blkio`` when
    ``io``) or one folder for all (v2); ``io``: whether the I/O controller is there."""

    version: int
    parents: tuple[Path, ...]
    io: bool = False


def _whole_disk(device: int) -> str | None:
    """``MAJ:MIN`` of the whole disk that holds the block device ``device`` (itself, or a partition's disk);
    None for a file system on no block device (tmpfs, overlay)."""
    major, minor = os.major(device), os.minor(device)
    if major == 0:
        return None
    block = Path(f"/sys/dev/block/{major}:{minor}")
    try:
        block = block.resolve(strict=True)
        disk = block.parent if (block / "partition").exists() else block
        return (disk / "dev").read_text().strip()
    except OSError:
        return None


@functools.cache
def throttled_devices() -> tuple[str, ...]:
    """The disks a kernel reads from and writes to, as ``MAJ:MIN``: those behind ``/``, the Python installation,
    the course and the temporary folder."""
    import sys
    import tempfile

    paths = ["/", sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]), tempfile.gettempdir()]
    found = set()
    for path in paths:
        try:
            disk = _whole_disk(os.stat(os.path.realpath(path)).st_dev)
        except OSError:
            continue
        if disk is not None:
            found.add(disk)
    return tuple(sorted(found))


def _own_paths() -> dict[str, str]:
    """The grader's group in each hierarchy: ``{"": path}`` for v2, ``{controller: path}`` for v1."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _enable_controllers(folder: Path, io: bool = False) -> None:
    wanted = " ".join(f"+{name}" for name in (*CONTROLLERS, *(["io"] if io else [])))
    (folder / "cgroup.subtree_control").write_text(wanted)


def _v2_hierarchy(base: Path, *, move_own: bool = False) -> Hierarchy:
    """Kernel groups under ``base/autograder-kernels``, with the three controllers enabled down to them.

    cgroup v2 lets a group hand controllers to its children only while it holds no process itself: this works
    when ``base`` is the root of the hierarchy or holds no process; with ``move_own`` (``base`` is delegated to
    the grader, and every process in it is the grader's) the processes in ``base`` move into the leaf
    ``base/autograder-grader`` first.
    """
    available = set((base / "cgroup.controllers").read_text().split())
    missing = [name for name in CONTROLLERS if name not in available]
    if missing:
        raise OSError(f"the cgroup v2 folder {base} does not offer the controller(s) {', '.join(missing)}")
    io = "io" in available and bool(throttled_devices())
    try:
        _enable_controllers(base, io)
    except OSError as error:
        if not (move_own and error.errno == errno.EBUSY):
            raise
        leaf = base / GRADER_FOLDER
        leaf.mkdir(exist_ok=True)
        for pid in (base / "cgroup.procs").read_text().split():
            (leaf / "cgroup.procs").write_text(pid)
        _enable_controllers(base, io)
    kernels = base / KERNELS_FOLDER
    kernels.mkdir(exist_ok=True)
    _enable_controllers(kernels, io)
    return Hierarchy(2, (kernels,), io)


def _v1_hierarchy(own: dict[str, str]) -> Hierarchy:
    parents = []
    for controller in CONTROLLERS:
        mount = ROOT / controller
        if controller not in own or not (mount / "cgroup.procs").exists():
            raise OSError(f"the cgroup v1 controller {controller} is not mounted at {mount}")
        parent = mount / own[controller].lstrip("/") / KERNELS_FOLDER
        parent.mkdir(exist_ok=True)
        parents.append(parent)
    blkio = ROOT / "blkio"
    io = "blkio" in own and (blkio / "blkio.throttle.read_bps_device").exists() and bool(throttled_devices())
    if io:
        parent = blkio / own["blkio"].lstrip("/") / KERNELS_FOLDER
        parent.mkdir(exist_ok=True)
        parents.append(parent)
    return Hierarchy(1, tuple(parents), io)


@functools.cache
def hierarchy() -> Hierarchy | str:
    """The hierarchy kernel groups are made in, or why there is none (checked once per process)."""
    delegated = os.environ.get(DELEGATED_VARIABLE)
    errors = []
    try:
        own = _own_paths()
        unified = ROOT if (ROOT / "cgroup.controllers").exists() else ROOT / "unified"
        if delegated == "self":
            base = unified / own.get("", "").lstrip("/")
            found = _v2_hierarchy(base, move_own=True)
            os.environ[DELEGATED_VARIABLE] = str(base)  # for the workers, whose own group is now the leaf
            return found
        if delegated:
            return _v2_hierarchy(Path(delegated), move_own=True)
        if "" in own and (unified / "cgroup.controllers").exists():
            try:
                return _v2_hierarchy(unified / own[""].lstrip("/"))
            except OSError as error:
                errors.append(f"cgroup v2: {error.strerror or error}")
        return _v1_hierarchy(own)
    except OSError as error:
        errors.append(f"{error.strerror or error}" + (f" ({error.filename})" if error.filename else ""))
        return "; ".join(errors)


def problem() -> str | None:
    """Why kernels cannot get control groups here (None when they can)."""
    found = hierarchy()
    if isinstance(found, str):
        return found
    try:
        group = KernelGroup.create(memory_bytes=64 * 1024 * 1024, processes=8)
    except OSError as error:
        return f"a control group could not be made ({error.strerror or error})"
    group.remove()
    return None


DEFAULT_WEIGHT = {2: 100, 1: 1024}  # an ordinary process's: cpu.weight (v2), cpu.shares (v1)
MAX_WEIGHT = {2: 10000, 1: 262144}
GROUP_PREFIX = "kernel-"


def _holds_processes(folder: Path) -> bool:
    """Whether a process is in ``folder``'s group or in a group inside it."""
    for inner, _, _ in os.walk(folder):
        try:
            if (Path(inner) / "cgroup.procs").read_text().strip():
                return True
        except OSError:
            continue
    return False


def weigh_kernels_folder(version: int, cpu_parent: Path, new_group: str = "") -> int:
    """Give the kernels' folder ``cpu_parent`` the weight of as many ordinary processes as it holds groups in
    use (a group that holds a process, in it or in a group inside it, and ``new_group``, just made):

        weight = DEFAULT_WEIGHT x max(1, groups in use),  at most MAX_WEIGHT

    Called whenever a group is made in it or removed from it, by any grader: the count is read, not kept, so
    a grader that died, its empty groups left behind, is corrected by the next one. Returns the weight
    written, 0 when it could not be written (the groups then share one process's weight: slower, no less
    safe)."""
    try:
        groups = sum(
            1 for entry in cpu_parent.iterdir()
            if entry.is_dir() and entry.name.startswith(GROUP_PREFIX)
            and (entry.name == new_group or _holds_processes(entry))
        )
        weight = min(MAX_WEIGHT[version], DEFAULT_WEIGHT[version] * max(1, groups))
        (cpu_parent / ("cpu.weight" if version == 2 else "cpu.shares")).write_text(str(weight))
    except OSError:
        return 0
    return weight


def _cpu_parent(found: Hierarchy) -> Path:
    return found.parents[0] if found.version == 2 else found.parents[CONTROLLERS.index("cpu")]


@dataclass(frozen=True)
class KernelGroup:
    """The control group(s) of one kernel: one folder in v2, one per controller in v1."""

    version: int
    folders: tuple[Path, ...]
    io: bool = False  # the I/O controller is there: disk reads and writes are throttled

    @classmethod
    def create(cls, *, memory_bytes: int, processes: int) -> KernelGroup:
        """Make a new group with these limits (0: none) and an equal CPU weight; OSError if it cannot."""
        found = hierarchy()
        if isinstance(found, str):
            raise OSError(found)
        name = f"{GROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        folders = tuple(parent / name for parent in found.parents)
        for folder in folders:
            folder.mkdir()
        group = cls(found.version, folders, found.io)
        try:
            group._write_limits(memory_bytes, processes)
        except OSError:
            group.remove()
            raise
        weigh_kernels_folder(found.version, _cpu_parent(found), new_group=name)
        return group

    def child(self, name: str, *, memory_bytes: int = 0, processes: int = 0) -> KernelGroup:
        """A group inside this one, with limits of its own (0: none but this one's); OSError if it cannot be
        made. cgroup v2 hands the controllers down to it; a group with children holds no process itself."""
        if self.version == 2:
            _enable_controllers(self.folders[0], self.io)
        folders = tuple(folder / name for folder in self.folders)
        for folder in folders:
            folder.mkdir()
        group = KernelGroup(self.version, folders, self.io)
        try:
            group._write_limits(memory_bytes, processes)
        except OSError:
            group.remove()
            raise
        return group

    def _file(self, v2_name: str, v1_name: str) -> Path:
        if self.version == 2:
            return self.folders[0] / v2_name
        controller = v1_name.split(".", 1)[0]
        index = len(CONTROLLERS) if controller == "blkio" else CONTROLLERS.index(controller)
        return self.folders[index] / v1_name

    def _write_limits(self, memory_bytes: int, processes: int) -> None:
        if memory_bytes:
            self._file("memory.max", "memory.limit_in_bytes").write_text(str(memory_bytes))
            swap = self._file("memory.swap.max", "memory.memsw.limit_in_bytes")
            if swap.exists():
                swap.write_text("0" if self.version == 2 else str(memory_bytes))
        if processes:
            self._file("pids.max", "pids.max").write_text(str(processes))
        self._file("cpu.weight", "cpu.shares").write_text(str(DEFAULT_WEIGHT[self.version]))
        if self.io:
            self._write_io_limits()

    def _write_io_limits(self) -> None:
        for device in throttled_devices():
            if self.version == 2:
                self.folders[0].joinpath("io.max").write_text(
                    f"{device} rbps={READ_BYTES_PER_SECOND} wbps={WRITE_BYTES_PER_SECOND} "
                    f"riops={OPERATIONS_PER_SECOND} wiops={OPERATIONS_PER_SECOND}")
                continue
            for name, value in (("read_bps_device", READ_BYTES_PER_SECOND), ("write_bps_device", WRITE_BYTES_PER_SECOND),
                                ("read_iops_device", OPERATIONS_PER_SECOND),
                                ("write_iops_device", OPERATIONS_PER_SECOND)):
                self._file("", f"blkio.throttle.{name}").write_text(f"{device} {value}")

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` (0: this one) into the group; its children will be born there."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid or os.getpid()))

    def pids(self) -> set[int]:
        found = set()
        for folder in self.folders:
            try:
                found |= {int(line) for line in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        return found

    def memory_limit_hits(self) -> int:
        """How many processes of the group the kernel's out-of-memory killer ended at the group's limit."""
        try:
            events_file = self._file("memory.events", "memory.oom_control")
            events = dict(line.split()[:2] for line in events_file.read_text().splitlines() if line.strip())
            return int(events.get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def weigh_folder(self) -> int:
        """Weigh the kernels' folder again (:func:`weigh_kernels_folder`), once this group holds its processes:
        groups made at the same moment by several workers each counted only itself, the others holding no process
        yet, and the folder kept the weight of one. Returns the weight written (0: none)."""
        cpu_folder = self._file("cpu.weight", "cpu.shares").parent
        return weigh_kernels_folder(self.version, cpu_folder.parent) if cpu_folder.parent.name == KERNELS_FOLDER else 0

    def remove(self) -> None:
        """Kill every process left in the group, then remove its folders. Never raises."""
        kill = self.folders[0] / "cgroup.kill"
        for _ in range(50):
            remaining = self.pids()
            if not remaining:
                break
            if self.version == 2 and kill.exists():
                try:
                    kill.write_text("1")
                except OSError:
                    pass
            for pid in remaining:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
            time.sleep(0.02)
        for folder in self.folders:
            try:
                folder.rmdir()
            except OSError:
                continue
        cpu_folder = self._file("cpu.weight", "cpu.shares").parent
        if cpu_folder.parent.name == KERNELS_FOLDER:  # a worker's group, not a group inside one
            weigh_kernels_folder(self.version, cpu_folder.parent)
