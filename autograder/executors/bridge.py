"""The cluster's bridge: the one process that talks to Dask, sandboxed, sending the grader JSON only.

``dask.distributed`` unpickles what its peers send: a task's result, a task's exception, and any message part
a peer marks as pickled, whatever the client's ``deserializers``. A worker runs students' kernels (sandboxed)
and holds the cluster's credentials; were one compromised, whatever unpickles its messages would run its code.
So the grader's own process never connects to the cluster. It starts this module's program,
``python -m autograder.executors.bridge``, in a sandbox (:func:`bridge_argv`: bubblewrap, the network but no
other namespace of the host, a read-only system, the Python installation and the course's code, ``nobody``
with no capability, a private ``/tmp``, an environment from an allowlist), and:

1. writes to its standard input, pickled (the grader's own data, which the bridge trusts), the job: the
   scheduler's address, the credentials' bytes, the course's version and archive, the function to run, then
   every task with its notebook's bytes, and closes it;
2. reads its standard output, one JSON message a line (:func:`read_messages`), and trusts nothing in it:
   :func:`parse_result` accepts a result only when it is the task's student and assignment and its items are
   the assignment's (the released layout's grade ids and points, each score between 0 and its points), and
   bytes only as base64 of bounded size. A line that does not parse ends the batch with a
   :class:`BridgeBroken`.

The bridge (:func:`main`) connects with the credentials written to its private ``/tmp``, checks the workers,
installs the course, submits the tasks and sends each outcome as it arrives: ``warn`` (a worker that got no
task), ``result``, ``failed`` (the task's failure, with its reason), ``lost`` (the scheduler went away) or
``error`` (the batch cannot start). Messages it makes from peers' text are cut to :data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from autograder import REPOSITORY
from autograder.sandbox.stage import MAX_RESPONSE_BYTES
from autograder.types import Item, Result, Task

MAX_TEXT = 2000  # characters of a message's text that a peer decides (reasons, warnings)
# A feedback page, log or autograded notebook, decoded, and a whole message: the grading stage's response holds
# all three within MAX_RESPONSE_BYTES; the worker adds a few lines of its own.
MAX_BYTES = MAX_RESPONSE_BYTES + 4 * 1024 * 1024
MAX_LINE = MAX_BYTES * 4 // 3 + 1024 * 1024  # the three files in base64, and the result
STATUSES = frozenset({"passed", "failed", "manual", "not graded"})
NAME_RESOLUTION = ("hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf")
PASSED_THROUGH = ("LANG", "LC_ALL", "TZ")  # and every DASK_* variable (the cluster's configuration)


class BridgeBroken(RuntimeError):
    """The bridge ended, or sent what is not one of its messages: no more results can be trusted from it."""


@dataclasses.dataclass(frozen=True)
class Job:
    """What the grader hands the bridge before the tasks."""

    scheduler: str
    credentials: dict[str, bytes]  # file name -> bytes (ca.pem, node.pem, node.key)
    version: str
    archive: bytes
    remote: Any  # the function the workers run (autograder.executors.dask.grade_on_worker)
    connect_seconds: float
    tasks: int


# ---------------------------------------------------------------------------------------------------------
# The grader's side
# ---------------------------------------------------------------------------------------------------------


def bridge_environment() -> dict[str, str]:
    """The bridge's whole environment: no password, token or database address of the grader's."""
    environment = {"PATH": os.defpath, "HOME": "/tmp", "PYTHONPATH": str(REPOSITORY), "PYTHONDONTWRITEBYTECODE": "1"}
    for name, value in os.environ.items():
        if name in PASSED_THROUGH or name.startswith("DASK_"):
            environment[name] = value
    return environment


def bridge_argv() -> list[str]:
    """bubblewrap's command line for the bridge: every namespace new but the network's, ``nobody`` with no
    capability, the system, the Python installation and the package ``autograder`` read-only (not the rest of
    the checkout), a private ``/tmp``."""
    from autograder.sandbox.launcher import (
        BASE_OPTIONS,
        NO_PTYS,
        PROC_SYS_READ_ONLY,
        readable_folders,
        sandboxed_python,
        system_binds,
    )

    argv = [shutil.which("bwrap") or "bwrap", *BASE_OPTIONS, "--share-net"]
    argv += ["--proc", "/proc", *PROC_SYS_READ_ONLY, "--dev", "/dev", *NO_PTYS, "--tmpfs", "/tmp"]
    argv += system_binds()
    for name in NAME_RESOLUTION:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # the package alone, not the checkout: a course folder kept there (the guide's exchange loop) holds every
    # student's raw notebook, the gradebook and the roster
    package = os.path.realpath(REPOSITORY / "autograder")
    for folder in dict.fromkeys([*readable_folders(), package]):
        argv += ["--ro-bind", folder, folder]
    argv += ["--remount-ro", "/", "--chdir", "/tmp", "--"]
    return argv + [sandboxed_python(), "-m", "autograder.executors.bridge"]


@contextlib.contextmanager
def started_bridge(job: Job, tasks: list[tuple[Task, bytes]]) -> Iterator[Iterator[dict]]:
    """Start the bridge, hand it ``job`` and ``tasks``, and yield its messages as they come; stop it after."""
    import cloudpickle

    module = sys.modules.get(getattr(job.remote, "__module__", ""), None)
    if module is not None and not module.__name__.startswith("autograder."):
        cloudpickle.register_pickle_by_value(module)  # a function of the tests: the bridge cannot import it
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(bridge_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                   env=bridge_environment())
        try:
            try:
                cloudpickle.dump(job, process.stdin)
                for task, notebook in tasks:
                    pickle.dump((task, notebook), process.stdin)
                process.stdin.close()
            except BrokenPipeError:
                pass  # the bridge ended early: its messages (or their absence) say why
            yield read_messages(process.stdout, process, errors)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()


def read_messages(stream: IO[bytes], process: subprocess.Popen, errors: IO[bytes]) -> Iterator[dict]:
    """The bridge's messages, one JSON object a line, each with a ``kind``; :class:`BridgeBroken` for anything
    else, and when the bridge ends without its ``done``."""
    while line := stream.readline(MAX_LINE + 1):
        if len(line) > MAX_LINE:
            raise BridgeBroken(f"the cluster's bridge sent a line longer than {MAX_LINE} bytes")
        try:
            message = json.loads(line)
        except ValueError:
            raise BridgeBroken("the cluster's bridge sent a line that is not JSON") from None
        if not isinstance(message, dict) or message.get("kind") not in ("warn", "result", "failed", "lost", "error",
                                                                          "done"):
            raise BridgeBroken("the cluster's bridge sent a message of no known kind")
        if message["kind"] == "done":
            return
        yield message
    process.wait()
    errors.seek(0)
    tail = _text(errors.read()[-MAX_TEXT:].decode("utf-8", "replace"))
    raise BridgeBroken(f"the cluster's bridge ended (exit status {process.returncode}) before its last message: "
                       f"{tail or 'it wrote nothing on standard error'}")


def _text(value: object) -> str:
    """A peer's text for the grader's messages: a string, its control characters escaped, cut to MAX_TEXT."""
    from autograder.feedback.escape import report_text

    if not isinstance(value, str):
        raise BridgeBroken("the cluster's bridge sent a text that is not a string")
    return report_text(value[:MAX_TEXT])


def text_of(message: dict, name: str) -> str:
    return _text(message.get(name))


def index_of(message: dict, count: int) -> int:
    index = message.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
        raise BridgeBroken(f"the cluster's bridge named a task that does not exist ({str(index)[:20]})")
    return index


def bytes_of(message: dict, name: str) -> bytes:
    value = message.get(name, "")
    if not isinstance(value, str) or len(value) > MAX_BYTES * 4 // 3 + 4:
        raise BridgeBroken(f"the cluster's bridge sent {name} that is not base64 of at most {MAX_BYTES} bytes")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise BridgeBroken(f"the cluster's bridge sent {name} that is not base64") from None


def _number(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError("not a finite number")
    return float(value)


def parse_result(fields: object, task: Task) -> Result:
    """The result a worker sent for ``task``, accepted only in the shape the grader makes.

    Raises:
        ValueError, TypeError: naming what does not fit (another student or assignment, an item outside the
            assignment's layout or its points, a field of the wrong type).
    """
    if not isinstance(fields, dict):
        raise TypeError("the result is not an object")
    if fields.get("student") != task.student or fields.get("assignment") != task.assignment:
        raise ValueError("the result names another student or assignment")
    points = {item.grade_id: float(item.points) for item in task.layout}
    items, seen = [], set()
    for item in fields.get("items", None) or []:
        if not isinstance(item, dict) or set(item) != {"grade_id", "score", "max_score", "status", "message"}:
            raise ValueError("an item is not of the grader's shape")
        grade_id, score, max_score = item["grade_id"], _number(item["score"]), _number(item["max_score"])
        if grade_id not in points or grade_id in seen or max_score != points[grade_id] or not 0 <= score <= max_score:
            raise ValueError(f"an item does not fit the assignment's layout ({str(grade_id)[:40]!r})")
        if item["status"] not in STATUSES or not isinstance(item["message"], str):
            raise ValueError("an item's status or message is not of the grader's shape")
        seen.add(grade_id)
        items.append(Item(grade_id, score, max_score, item["status"], item["message"][:MAX_TEXT * 10]))
    notes, reason, seconds = fields.get("notes"), fields.get("reason"), fields.get("seconds", {})
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise ValueError("the notes are not a list of strings")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("the reason is not a string")
    if not isinstance(fields.get("grader_failure"), bool) or not isinstance(seconds, dict):
        raise TypeError("grader_failure or seconds is not of the grader's shape")
    return Result(task.student, task.assignment, items, [note[:MAX_TEXT] for note in notes],
                  None if reason is None else reason[:MAX_TEXT], fields["grader_failure"],
                  {str(name)[:40]: _number(value) for name, value in seconds.items()})


# ---------------------------------------------------------------------------------------------------------
# The bridge's side (in its sandbox)
# ---------------------------------------------------------------------------------------------------------


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _cut(value: object) -> str:
    return str(value)[:MAX_TEXT]


def _security(credentials: dict[str, bytes]):
    from distributed import Security

    from autograder.executors.credentials import CA, CERTIFICATE, KEY

    folder = Path(tempfile.mkdtemp(prefix="credentials-"))  # in the sandbox's own /tmp, 0700
    for name in (CA, CERTIFICATE, KEY):
        path = folder / name
        path.write_bytes(credentials[name])
        path.chmod(0o600)
    return Security(tls_ca_file=str(folder / CA), tls_client_cert=str(folder / CERTIFICATE),
                    tls_client_key=str(folder / KEY), require_encryption=True)


def run(job: Job, tasks: list[tuple[Task, bytes]]) -> None:
    """Grade ``tasks`` on the cluster, sending every outcome as a message (see the module docstring)."""
    import hashlib

    from distributed import Client, wait
    from distributed.scheduler import KilledWorker

    from autograder.executors.dask import check_worker, install_course, lost_scheduler

    try:
        client = Client(job.scheduler, timeout=job.connect_seconds, set_as_default=False,
                        security=_security(job.credentials))
    except (OSError, TimeoutError, ValueError) as error:
        _send({"kind": "error", "message": f"scheduler {job.scheduler!r} cannot be reached "
                                           f"({type(error).__name__}: {_cut(error)})"})
        return
    try:
        checks = client.run(check_worker, job.version)
        good = sorted(worker for worker, problem in checks.items() if problem is None)
        for worker, problem in sorted(checks.items()):
            if problem is not None:
                _send({"kind": "warn", "message": _cut(f"the worker {worker} got no task: {problem}")})
        if not good:
            reasons = "; ".join(f"{worker}: {problem}" for worker, problem in sorted(checks.items()))
            _send({"kind": "error", "message": _cut(f"scheduler {job.scheduler!r}: no worker passed its check "
                                                    f"({reasons or 'no worker connected'})")})
            return
        allowed = int(client.run_on_scheduler(_allowed_failures))
        course_key = hashlib.sha256(job.archive).hexdigest()
        client.run(install_course, job.archive, course_key, workers=good)
        batch = course_key[:12]  # keys unique to this course and run: a long-lived cluster grades many batches
        futures = {}
        for index, (task, notebook) in enumerate(tasks):
            future = client.submit(job.remote, course_key, task, notebook, key=f"grade-{batch}-{task.directory.name}",
                                   workers=good, allow_other_workers=False, retries=0, pure=False)
            futures[future] = index
        pending = set(futures)
        with client.as_current():
            while pending:
                try:
                    done, pending = wait(pending, timeout=WATCH_SECONDS, return_when="FIRST_COMPLETED")
                except TimeoutError:  # none done in that time (distributed's wait raises)
                    done = set()
                for future in done:
                    try:
                        _send(_outcome(future, futures[future], allowed, KilledWorker, timeout=FETCH_SECONDS))
                    except TimeoutError:  # its result was kept on a worker that is gone: made again, or failed below
                        pending.add(future)
                if pending and not set(good) & set(client.scheduler_info(n_workers=-1)["workers"]):
                    # Tasks run only on the workers that passed the check, and none is left (they died, or came
                    # back under a nanny at a new address): the rest would wait for ever.
                    for future in sorted(pending, key=futures.get):  # released when the client closes
                        _send({"kind": "failed", "index": futures[future], "reason": NO_CHECKED_WORKER})
                    pending = set()
    except Exception as error:  # noqa: BLE001 (the scheduler went away, or the batch cannot go on)
        if lost_scheduler(error):
            _send({"kind": "lost", "message": _cut(f"the scheduler {job.scheduler} went away ({type(error).__name__}: "
                                                   f"{str(error).splitlines()[0] if str(error) else ''})")})
        else:
            _send({"kind": "error", "message": _cut(f"the cluster's batch failed ({type(error).__name__}: {error})")})
        return
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=5)
    _send({"kind": "done"})


WATCH_SECONDS = 5  # how often a batch that waits for its tasks looks whether the cluster still has its workers
FETCH_SECONDS = 30  # the longest a finished task's result may take to arrive before it counts as lost with its worker
NO_CHECKED_WORKER = ("no worker that passed the batch's check is left in the cluster (each one died, or left); "
                     "the next run grades this submission")


def _allowed_failures() -> int:
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures"))


def _outcome(future, index: int, allowed: int, killed_worker: type, timeout: float | None = None) -> dict:
    """The message for a finished ``future``; TimeoutError when its result cannot be fetched within ``timeout``
    seconds (it was kept on a worker that died since: the scheduler computes it again where a worker is left)."""
    from autograder.executors.dask import lost_scheduler

    try:
        shipped = future.result(timeout=timeout)
    except TimeoutError:
        if future.status != "error":  # not the task's own error: its result is not there to fetch
            raise
        return {"kind": "failed", "index": index, "reason": "the grader's worker failed (TimeoutError)"}
    except killed_worker:
        return {"kind": "failed", "index": index,
                "reason": f"grading it ended {allowed + 1} worker(s), more than the scheduler allows ({allowed})"}
    except Exception as error:  # one task's failure stays with its submission
        if lost_scheduler(error):
            raise
        return {"kind": "failed", "index": index,
                "reason": f"the grader's worker failed ({type(error).__name__}: {str(error)[:300]})"}
    encoded = {name: base64.b64encode(getattr(shipped, name)).decode("ascii")
               for name in ("feedback", "log", "autograded")}
    return {"kind": "result", "index": index, "result": dataclasses.asdict(shipped.result), **encoded}


def main() -> None:
    import cloudpickle

    source = sys.stdin.buffer
    job = cloudpickle.load(source)
    tasks = [pickle.load(source) for _ in range(job.tasks)]
    run(job, tasks)


if __name__ == "__main__":
    main()
