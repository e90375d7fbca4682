"""``grade --scheduler``: a class graded on a real dask.distributed cluster on loopback (tests/planted/cluster.py),
compared with the same class graded by local processes; a worker killed mid-batch, a worker out of date, a
task that ends its worker, and a scheduler that goes away, then a run that resumes."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from planted import (
    OTHER_MISTAKES,
    ROOT,
    filled,
    released,
    sandbox_missing,
    solutions,
    with_mistakes,
    write_submission,
)
from planted.cluster import DIE_FOR, Cluster, grade_or_die

from autograder import grade as grade_module
from autograder.executors import dask as dask_executor
from autograder.executors.bridge import NO_CHECKED_WORKER
from autograder.executors.credentials import cluster_security, make_credentials
from autograder.executors.dask import SchedulerLost
from autograder.grade import grade

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sandbox_missing() is not None, reason=f"bubblewrap cannot run here: {sandbox_missing()}"),
]

ASSIGNMENT = "04_relative"  # its kernel never imports torch: the quickest notebook to grade
STUDENTS = ("ada", "bob", "cy", "dan")


def _class(root: Path, students=STUDENTS) -> Path:
    answers = solutions(ASSIGNMENT)
    notebooks = {
        "ada": filled(ASSIGNMENT, answers),
        "bob": with_mistakes(ASSIGNMENT, OTHER_MISTAKES[ASSIGNMENT]),
        "cy": released(ASSIGNMENT),
        "dan": filled(ASSIGNMENT, answers),
        DIE_FOR: filled(ASSIGNMENT, answers),
    }
    for student in students:
        write_submission(root, student, ASSIGNMENT, notebooks[student])
    return root


def _summary(results) -> dict:
    return {
        (r.student, r.assignment): (r.score, r.reason, [(i.grade_id, i.score, i.status, i.message) for i in r.items])
        for r in results
    }


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    results = grade(_class(root / "class"), root / "out", jobs=2)
    return _summary(results)


@pytest.fixture
def cluster(tmp_path):
    started = Cluster(tmp_path)
    yield started
    started.stop()


def test_a_class_graded_on_the_cluster_equals_the_local_grades(local, cluster, tmp_path):
    out = tmp_path / "out"
    results = grade(_class(tmp_path / "class"), out, scheduler=cluster.address, cluster_credentials=cluster.credentials)
    assert _summary(results) == local
    assert local["ada", ASSIGNMENT][0] == 13.0  # the written answers wait for an instructor
    for student in STUDENTS:
        assert (out / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").stat().st_size > 10_000
        assert (out / "logs" / student / f"{ASSIGNMENT}.log").exists()


def test_a_worker_killed_mid_batch_loses_nothing(local, cluster, tmp_path):
    killed = []

    def kill_a_worker(result):
        if not killed:
            victim = cluster.workers[0]
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)

    results = grade(_class(tmp_path / "class"), tmp_path / "out", scheduler=cluster.address, cluster_credentials=cluster.credentials, report=kill_a_worker)
    assert killed
    assert _summary(results) == local
    assert len(results) == len(STUDENTS)  # each submission recorded once


def test_a_worker_out_of_date_gets_no_task_and_is_named(local, cluster, tmp_path):
    stale = tmp_path / "stale-checkout"
    for package in ("autograder", "posenc_ref"):
        shutil.copytree(ROOT / package, stale / package, ignore=shutil.ignore_patterns("__pycache__"))
    (stale / "posenc_ref" / "__init__.py").write_text((ROOT / "posenc_ref" / "__init__.py").read_text() + "\n# old\n")
    cluster.add_worker(code=stale)
    out = tmp_path / "out"
    results = grade(_class(tmp_path / "class"), out, scheduler=cluster.address, cluster_credentials=cluster.credentials)
    assert _summary(results) == local
    report = (out / "report.txt").read_text()
    assert "got no task: its course version is" in report
    assert sum("got no task" in line for line in report.splitlines()) == 1


def test_a_task_that_ends_its_worker_gets_zero_and_the_batch_completes(tmp_path, monkeypatch):
    # No second chance: the first worker the task ends is one too many. (Other tasks that a dying worker
    # held are run again elsewhere: test_a_worker_killed_mid_batch_loses_nothing.)
    cluster = Cluster(tmp_path, scheduler_environment={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    try:
        monkeypatch.setattr(grade_module, "run_dask", _with_remote(grade_or_die))
        results = grade(_class(tmp_path / "class", (DIE_FOR,)), tmp_path / "out", scheduler=cluster.address, cluster_credentials=cluster.credentials)
        alive = sum(worker.poll() is None for worker in cluster.workers)
    finally:
        cluster.stop()
    [result] = results
    assert result.score == 0 and result.reason == "grading it ended 1 worker(s), more than the scheduler allows (0)"
    assert alive == 1  # it ended one worker, and no other
    page = (tmp_path / "out" / "feedback" / DIE_FOR / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "grading it ended 1 worker(s)" in page


def test_a_batch_whose_checked_workers_are_all_gone_ends_with_a_reason_for_each_submission_left(tmp_path, monkeypatch):
    # The scheduler's default lets a task end 4 workers: here it ends both, and every task is bound to the workers
    # that passed the batch's check. The batch ends (it waited for ever before) and no grade is kept.
    cluster = Cluster(tmp_path)
    try:
        monkeypatch.setattr(grade_module, "run_dask", _with_remote(grade_or_die))
        results = grade(_class(tmp_path / "class", (DIE_FOR, "ada")), tmp_path / "out", scheduler=cluster.address,
                        cluster_credentials=cluster.credentials)
        alive = sum(worker.poll() is None for worker in cluster.workers)
    finally:
        cluster.stop()
    assert alive == 0
    by_student = {result.student: result for result in results}
    assert by_student[DIE_FOR].reason == NO_CHECKED_WORKER and by_student[DIE_FOR].grader_failure
    assert by_student["ada"].reason in (None, NO_CHECKED_WORKER)  # graded before the workers were gone, or not


def _with_remote(remote):
    def run(*args, **kwargs):
        return dask_executor.run_dask(*args, **kwargs, remote=remote)

    return run


def test_a_lost_scheduler_ends_the_command_and_the_next_run_resumes(local, tmp_path, monkeypatch):
    submissions, out = _class(tmp_path / "class"), tmp_path / "out"
    (tmp_path / "first").mkdir()
    first = Cluster(tmp_path / "first", workers=1)

    def stop_the_scheduler(result):
        if first.scheduler.poll() is None:
            first.scheduler.send_signal(signal.SIGKILL)

    try:
        with pytest.raises(SchedulerLost, match=r"went away .* of 4 submissions were recorded"):
            grade(submissions, out, scheduler=first.address, cluster_credentials=first.credentials, report=stop_the_scheduler)
    finally:
        first.stop()
    recorded = {path.parent.name for path in (out / ".autograder-records").glob("*/*") if (path / "result.json").exists()}
    assert recorded and not (out / "grades.csv").exists()  # nothing published from an unfinished batch
    submitted = []

    def spy(tasks, *args, **kwargs):
        submitted.extend(task.student for task in tasks)
        return dask_executor.run_dask(tasks, *args, **kwargs)

    monkeypatch.setattr(grade_module, "run_dask", spy)
    (tmp_path / "second").mkdir()
    second = Cluster(tmp_path / "second", workers=1)
    try:
        results = grade(submissions, out, scheduler=second.address, cluster_credentials=second.credentials)
    finally:
        second.stop()
    assert _summary(results) == local
    assert sorted(submitted) == sorted(set(STUDENTS) - recorded)  # what was recorded is not graded again
    assert os.path.exists(out / "grades.csv")


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(dask_executor, "CONNECT_SECONDS", 3)
    credentials = make_credentials(tmp_path / "credentials")[0].parent
    with pytest.raises(ValueError, match=r"scheduler 'tls://127.0.0.1:9' cannot be reached"):
        grade(_class(tmp_path / "class", ("ada",)), tmp_path / "out", scheduler="tls://127.0.0.1:9",
              cluster_credentials=credentials)


def test_a_tcp_scheduler_missing_or_open_credentials_are_refused_before_anything_runs(tmp_path):
    submissions = _class(tmp_path / "class", ("ada",))
    with pytest.raises(ValueError, match=r"--scheduler must be a tls:// address .*got 'tcp://127.0.0.1:8786'"):
        grade(submissions, tmp_path / "out", scheduler="tcp://127.0.0.1:8786", cluster_credentials=tmp_path)
    with pytest.raises(ValueError, match=r"--scheduler needs --cluster-credentials DIR"):
        grade(submissions, tmp_path / "out", scheduler="tls://127.0.0.1:8786")
    assert not (tmp_path / "out").exists()
    credentials = make_credentials(tmp_path / "credentials")[0].parent
    os.chmod(credentials / "node.key", 0o644)
    with pytest.raises(ValueError, match=r"the key .*node.key must be this account's and readable by it alone"):
        cluster_security(credentials)
    os.chmod(credentials / "node.key", 0o600)
    os.chmod(credentials, 0o777)
    with pytest.raises(ValueError, match=r"must be this account's, not a link, and not writable by other accounts"):
        cluster_security(credentials)
    os.chmod(credentials, 0o700)
    other = 1 if os.getuid() != 1 else 2
    if os.geteuid() == 0:  # an authority another account could have swapped in
        os.chown(credentials / "ca.pem", other, -1)
        with pytest.raises(ValueError, match=rf"ca.pem must be this account's.*owned by uid {other}"):
            cluster_security(credentials)
    (tmp_path / "premade").mkdir()  # a folder made before (by whoever): never used
    with pytest.raises(ValueError, match=r"--out must be a new folder .*which exists"):
        make_credentials(tmp_path / "premade")


def test_no_end_of_the_cluster_serves_anything_over_http(cluster):
    """The scheduler's and the workers' HTTP servers (beside the dashboards that are off) answer no route."""
    import urllib.error
    import urllib.request

    from distributed import Client

    with Client(cluster.address, timeout=10, set_as_default=False,
                security=cluster_security(cluster.credentials)) as client:
        info = client.scheduler_info()
    ports = [info["services"].get("dashboard")] + [worker["services"].get("dashboard")
                                                   for worker in info["workers"].values()]
    assert len(ports) == 3 and all(ports), info["services"]
    for port in ports:
        for route in ("json/identity.json", "metrics", "health", "info/main/workers.html"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/{route}", timeout=10)
            assert refused.value.code == 404, (port, route)


def test_only_an_end_with_the_instructors_certificate_joins_the_cluster(cluster, tmp_path):
    """A student's client: over plain TCP, or over TLS with credentials of an authority of its own; both are
    refused, while the grader's credentials connect."""
    from distributed import Client

    with Client(cluster.address, timeout=10, set_as_default=False,
                security=cluster_security(cluster.credentials)) as client:
        assert len(client.scheduler_info()["workers"]) == 2
    plain = cluster.address.replace("tls://", "tcp://")
    strangers = cluster_security(make_credentials(tmp_path / "strangers")[0].parent)
    for address, security in ((plain, None), (cluster.address, strangers)):
        with pytest.raises((OSError, TimeoutError, ValueError)):
            Client(address, timeout=5, set_as_default=False, security=security).close()


def test_the_guide_starts_the_cluster_with_the_options_the_tests_start_it_with(tmp_path):
    guide = (ROOT / "book" / "guide_instructors.md").read_text()
    block = guide.split("(guide-instructors-dask)=", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].split() for line in block.strip().splitlines()]
    credentials, scheduler, worker, grading = lines
    from planted.cluster import NO_HTTP_ROUTES

    for line, role in ((scheduler, "SCHEDULER"), (worker, "WORKER")):
        variable = f"DASK_DISTRIBUTED__{role}__HTTP__ROUTES"
        assert line.pop(0) == f"{variable}='[]'" and NO_HTTP_ROUTES[variable] == "[]"
        assert line[line.index("--dashboard-address") + 1] == "127.0.0.1:0"
    assert credentials[:4] == ["python", "-m", "autograder", "cluster-credentials"]
    folder = credentials[credentials.index("--out") + 1].rstrip("/")
    tls = ["--tls-ca-file", f"{folder}/ca.pem", "--tls-cert", f"{folder}/node.pem", "--tls-key", f"{folder}/node.key"]
    assert scheduler[:2] == ["dask", "scheduler"] and scheduler[-6:] == tls
    assert {"--protocol", "tls", "--no-dashboard"} <= set(scheduler)
    assert worker[:3] == ["dask", "worker", "tls://SCHEDULER:8786"] and worker[-6:] == tls
    assert {"--no-nanny", "--no-dashboard"} <= set(worker) and worker[worker.index("--nthreads") + 1] == "1"
    assert grading[grading.index("--scheduler") + 1].startswith("tls://")
    assert grading[grading.index("--cluster-credentials") + 1].rstrip("/") == folder
    from planted.cluster import Cluster

    started = Cluster.__new__(Cluster)
    started.credentials = Path(folder)
    assert started.tls_options() == tls  # the tests' cluster is started with the same options
