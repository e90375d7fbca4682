"""A real dask.distributed cluster on loopback for the grader's tests: credentials made and a scheduler and workers
started as the instructors' guide starts them (``python -m autograder cluster-credentials``, ``dask scheduler
--protocol tls ...``, ``dask worker tls://ADDRESS --no-nanny --nthreads 1 ...``), each its own process over
mutual TLS; and, for the fault tests, a task function that ends its worker on purpose."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from planted import ROOT, command_environment

DASK = str(Path(sys.executable).parent / "dask")
# As the guide starts every end: the HTTP server that each starts beside its dashboard serves no route.
NO_HTTP_ROUTES = {"DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]", "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]"}
START_SECONDS = 60


class Cluster:
    """``dask scheduler`` and ``dask worker`` processes; ``stop()`` ends them all."""

    def __init__(self, folder: Path, workers: int = 2, *, scheduler_environment: dict | None = None) -> None:
        self.folder = folder
        self.processes: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        scheduler_file = folder / "scheduler.json"
        self.credentials = folder / "credentials"
        subprocess.run([sys.executable, "-m", "autograder", "cluster-credentials", "--out", str(self.credentials)],
                       cwd=ROOT, env=command_environment(), check=True, capture_output=True)
        environment = {**command_environment(), **(scheduler_environment or {}), **NO_HTTP_ROUTES}
        # The scheduler unpickles the tasks: it imports their functions too (planted.cluster's among them).
        environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
        self.scheduler = self._start(
            [DASK, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--dashboard-address", "127.0.0.1:0", *self.tls_options(), "--scheduler-file", str(scheduler_file)],
            environment, "scheduler",
        )
        deadline = time.monotonic() + START_SECONDS
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.address = json.loads(scheduler_file.read_text())["address"]
        for _ in range(workers):
            self.add_worker()

    def tls_options(self) -> list[str]:
        folder = self.credentials
        return ["--tls-ca-file", str(folder / "ca.pem"), "--tls-cert", str(folder / "node.pem"),
                "--tls-key", str(folder / "node.key")]

    def _start(self, argv: list[str], environment: dict, name: str) -> subprocess.Popen:
        log = open(self.folder / f"{name}-{len(self.processes)}.log", "w")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(argv, env=environment, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        self.processes.append(process)
        return process

    def add_worker(self, *, code: Path = ROOT) -> subprocess.Popen:
        """A worker whose course is the one in ``code`` (a copy of the repository, for a worker out of date)."""
        environment = {**command_environment(), **NO_HTTP_ROUTES}
        environment["PYTHONPATH"] = os.pathsep.join([str(code), str(ROOT / "tests")])
        # the course each worker unpacks, and its tasks' folders, under the test's folder (removed with it), not /tmp
        scratch = self.folder / f"worker-tmp-{len(self.workers)}"
        scratch.mkdir(exist_ok=True)
        environment["TMPDIR"] = str(scratch)
        worker = self._start(
            [DASK, "worker", self.address, "--no-nanny", "--nthreads", "1", "--host", "127.0.0.1",
             "--no-dashboard", "--dashboard-address", "127.0.0.1:0", *self.tls_options()], environment, "worker",
        )
        self.workers.append(worker)
        self.wait_for_workers(sum(process.poll() is None for process in self.workers))
        return worker

    def wait_for_workers(self, count: int) -> None:
        from distributed import Client

        from autograder.executors.credentials import cluster_security

        with Client(self.address, timeout=START_SECONDS, set_as_default=False,
                    security=cluster_security(self.credentials)) as client:
            client.wait_for_workers(count, timeout=START_SECONDS)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


DIE_FOR = "dies_on_the_worker"


def grade_or_die(course_key, task, notebook):
    """The worker's task function, but the task of the student :data:`DIE_FOR` ends its worker process."""
    from autograder.executors.dask import grade_on_worker

    if task.student == DIE_FOR:
        os._exit(1)
    return grade_on_worker(course_key, task, notebook)
