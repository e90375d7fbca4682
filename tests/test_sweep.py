"""posenc_ref.lab.sweep: results saved as they finish, resumed, in job order; bad keys named."""

import json
from pathlib import Path

import pytest
import torch

from posenc_ref.lab import sweep


def square(job):
    return {"job": job, "square": job * job}


def test_results_come_back_in_job_order_and_saved_runs_are_not_run_again(tmp_path):
    finished = []
    results = sweep.run_sweep([3, 1, 2], square, folder=tmp_path, key=lambda job: f"job{job}", progress=False,
                              on_result=lambda job, result: finished.append(job))
    assert [result["square"] for result in results] == [9, 1, 4] and finished == [3, 1, 2]
    assert json.loads((tmp_path / "runs" / "job1.json").read_text()) == {"job": 1, "square": 1}
    (tmp_path / "runs" / "job3.json").write_text(json.dumps({"job": 3, "square": "kept"}))
    (tmp_path / "runs" / "job2.json").unlink()
    finished.clear()
    results = sweep.run_sweep([3, 1, 2], square, folder=tmp_path, key=lambda job: f"job{job}", progress=False,
                              on_result=lambda job, result: finished.append(job))
    assert [result["square"] for result in results] == ["kept", 1, 4] and finished == [2]


def test_a_failing_run_keeps_the_results_before_it(tmp_path):
    def fails_on_two(job):
        if job == 2:
            raise RuntimeError("run 2 failed")
        return job

    with pytest.raises(RuntimeError, match="run 2 failed"):
        sweep.run_sweep([1, 2, 3], fails_on_two, folder=tmp_path, key=str, progress=False)
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["1.json"]


def test_worker_processes_give_the_same_results(tmp_path):
    results = sweep.run_sweep(list(range(5)), square, folder=tmp_path, key=lambda job: f"n{job}", jobs=2,
                              progress=False)
    assert [result["square"] for result in results] == [0, 1, 4, 9, 16]


@pytest.mark.parametrize(("keys", "match"), [
    (["a", "a"], "distinct; repeated: \\['a'\\]"), (["a/b", "c"], "file name"), ([".hidden", "c"], "file name"),
])
def test_bad_keys_are_named(tmp_path, keys, match):
    with pytest.raises(ValueError, match=match):
        sweep.run_sweep([0, 1], square, folder=tmp_path, key=lambda job: keys[job], progress=False)


def test_provenance_adds_up_the_invocations(tmp_path):
    first = sweep.provenance(tmp_path, command=["python", "-m", "x"], settings={"a": 1}, device="cpu", jobs=2,
                             threads=1, started=0.0, runs=4, runs_this_invocation=3)
    assert first["command"] == "python -m x" and len(first["invocations"]) == 1
    second = sweep.provenance(tmp_path, command=["python", "-m", "x"], settings={"a": 1}, device="cpu", jobs=2,
                              threads=1, started=10.0, runs=4, runs_this_invocation=1)
    assert [entry["runs_computed"] for entry in second["invocations"]] == [3, 1]
    assert second["wall_seconds"] == pytest.approx(sum(entry["wall_seconds"] for entry in second["invocations"]))
    assert second["commit"] is None or len(second["commit"]) == 40


def test_an_invocation_that_computed_nothing_leaves_the_record_as_it_was(tmp_path):
    sweep.provenance(tmp_path, command=["python", "-m", "x"], settings={"a": 1}, device="cpu", jobs=2, threads=1,
                     started=0.0, runs=4, runs_this_invocation=4, version=("a" * 40, False))
    before = (tmp_path / "provenance.json").read_bytes()
    again = sweep.provenance(tmp_path, command=["python", "-m", "x", "--resume"], settings={"a": 1}, device="cpu",
                             jobs=2, threads=1, started=10.0, runs=4, runs_this_invocation=0,
                             version=("b" * 40, False))
    assert (tmp_path / "provenance.json").read_bytes() == before
    assert again["commit"] == "a" * 40 and len(again["invocations"]) == 1


def test_each_invocation_keeps_its_own_command_commit_and_machine(tmp_path):
    sweep.provenance(tmp_path, command=["python", "-m", "x", "--jobs", "2"], settings={"a": 1}, device="cpu", jobs=2,
                     threads=1, started=0.0, runs=4, runs_this_invocation=3, version=("a" * 40, False))
    record = sweep.provenance(tmp_path, command=["python", "-m", "x", "--jobs", "1"], settings={"a": 1}, device="cpu",
                              jobs=1, threads=1, started=10.0, runs=4, runs_this_invocation=1,
                              version=("b" * 40, True))
    first, second = record["invocations"]
    assert (first["commit"], first["uncommitted_changes"], first["command"]) == ("a" * 40, False, "python -m x --jobs 2")
    assert (second["commit"], second["uncommitted_changes"]) == ("b" * 40, True)
    assert record["commit"] == "b" * 40 and record["command"] == "python -m x --jobs 1"  # the latest's
    assert second["versions"]["torch"] == torch.__version__ and second["versions"]["torch_git"]
    machine = second["machine"]
    assert machine["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(machine["cpu_flags"]) <= set(sweep.VECTOR_FLAGS) and machine["cpu_flags"] == sorted(machine["cpu_flags"])
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():  # read here, apart from the package: every flag recorded is one the CPU lists
        listed = {flag for line in cpuinfo.read_text().splitlines() if line.startswith(("flags", "Features"))
                  for flag in line.split(":", 1)[1].split()}
        assert set(machine["cpu_flags"]) == listed & set(sweep.VECTOR_FLAGS)


def test_one_invocation_recorded_twice_is_one_entry(tmp_path):
    for runs_done in (1, 2):
        record = sweep.provenance(tmp_path, command=["x"], settings={}, device="cpu", jobs=1, threads=1,
                                  started=100.0, runs=3, runs_this_invocation=runs_done)
    assert [entry["runs_computed"] for entry in record["invocations"]] == [2]
