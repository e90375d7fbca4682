"""autograder.sandbox.accounts: a grader run as root grades each submission's kernel under an account of its own.

What Linux counts per account (epoll watches, pipe buffers, processes) is then the kernel's alone: a kernel that
holds all of its account's epoll watches takes none from the grader or from another student's kernel. The tests
look at the machine's side, where the kernel's user ID is its account's: the namespace's maps, and the user ID of
every kernel process seen in the machine's /proc while `grade --jobs 2` grades two students.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autograder.sandbox import accounts
from autograder.sandbox.launcher import Limits, bwrap_problem

needs_root_and_bwrap = pytest.mark.skipif(
    not accounts.can_map_accounts() or bwrap_problem() is not None,
    reason="only a grader run as root, with bwrap, maps the kernel's account",
)
ASSIGNMENT = "01_permutation"
# Run in the kernel: the IDs under which its /proc (the stage's, bound) opens a process or thread outside the
# kernel's own process namespace (one ID only on its NSpid line): the stage's. By ID, not by the listing, which
# leaves threads out.
LOOK_AROUND = """_foreign = []
for _id in range(1, 4096):
    try:
        _status = open(f"/proc/{_id}/status").read()
    except OSError:
        continue
    if any(line.startswith("NSpid:") and len(line.split()) == 2 for line in _status.splitlines()):
        _foreign.append(_id)
print("other users' processes and threads seen:", _foreign)
"""


@needs_root_and_bwrap
def test_the_stage_s_namespace_maps_its_root_and_the_kernel_s_account_and_nothing_else():
    account = accounts.kernel_account(4321)
    assert account == 2_000_004_321
    descriptor = accounts.user_namespace(account)
    try:
        shown = subprocess.run(
            [shutil.which("bwrap"), "--userns", str(descriptor), "--ro-bind", "/", "/", "--proc", "/proc", "--",
             "sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map; id -u"],
            capture_output=True, text=True, pass_fds=(descriptor,), check=True,
        ).stdout.split("\n")
    finally:
        os.close(descriptor)
    maps = [line.split() for line in shown[:4]]
    assert maps == [["0", "0", "1"], ["65534", str(account), "1"]] * 2
    assert shown[4] == "0"  # the stage itself is root in it, as it was


STAGE_SCRIPT = """
import os, subprocess, sys, threading, time
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print("capabilities", status["CapEff"].strip(), status["CapPrm"].strip(), flush=True)
started = threading.Event()
def _wait():
    started.set()
    time.sleep(30)
threading.Thread(target=_wait, daemon=True).start()  # a thread the stage starts after its /proc was set
started.wait()
stage_ids = [os.getpid(), *(int(name) for name in os.listdir("/proc/self/task") if int(name) != os.getpid())]
# as the kernel's launcher does: a program the stage starts, which becomes the kernel's account
subprocess.run([sys.executable, "-c", LAUNCHED, *map(str, stage_ids)], check=True)
"""
LAUNCHED = """
import os, sys
from autograder.sandbox import accounts
accounts.become_kernel_account()
seen = []
for number in sys.argv[1:]:
    try:
        open(f"/proc/{number}/status").close()
        seen.append(number)
    except OSError:
        pass
print("kernel account", os.getuid(), "sees", len(seen), "of", len(sys.argv) - 1, flush=True)
"""


@needs_root_and_bwrap
def test_in_a_stage_with_the_kernel_s_account_its_processes_and_threads_are_hidden_from_that_account(tmp_path):
    """The stage keeps CAP_KILL (effective), CAP_SETUID and CAP_SETGID (permitted) and nothing else; a process
    that became the kernel's account sees none of the stage's processes and threads in /proc, not even a thread
    started after the stage entered."""
    from autograder.sandbox import stage

    jupyter = tmp_path / "jupyter"
    jupyter.mkdir()
    descriptor = accounts.user_namespace(accounts.kernel_account())
    try:
        argv = stage.bwrap_stage_argv(tmp_path, jupyter, user_namespace=descriptor)[:-3]
        prologue = "from autograder.sandbox.stage import enter\nfrom autograder.sandbox.launcher import Limits\nenter(Limits(), 100)\n"
        done = subprocess.run(
            [*argv, sys.executable, "-c", prologue + f"LAUNCHED = {LAUNCHED!r}\n" + STAGE_SCRIPT], env=stage.stage_environment(jupyter, stage.HOME),
            capture_output=True, text=True, timeout=180, check=False, pass_fds=(descriptor,),
        )
    finally:
        os.close(descriptor)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    kill, setuid, setgid = 1 << 5, 1 << 7, 1 << 6
    assert lines[0] == f"capabilities {kill:016x} {kill | setuid | setgid:016x}"
    words = lines[1].split()
    assert words[:3] == ["kernel", "account", "65534"] and words[4] == "0" and int(words[6]) >= 2, lines[1]


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare(1), as root")
def test_a_grader_in_a_process_namespace_of_its_own_maps_no_account_and_says_why():
    """In a container, process IDs repeat from one container to the next, and so would the accounts made of
    them: two classes' kernels would share one account. There the kernels keep the grader's."""
    code = "from autograder.sandbox import accounts; print(accounts.account_problem())"
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    contained = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert here == "None"
    assert contained.startswith("the grader runs in a process namespace of its own (a container)")


def test_the_kernel_s_proc_covers_each_thread_of_the_stage_s_processes(tmp_path):
    """/proc lists processes, not their threads, yet opens /proc/<thread ID>: a thread of the stage is covered
    like its process."""
    from autograder.sandbox.launcher import stage_proc_covers

    proc = tmp_path / "proc"
    for pid, threads in (("7", ("7", "9", "12")), ("30", ("30",))):
        for thread in threads:
            (proc / pid / "task" / thread).mkdir(parents=True)
    (proc / "self").symlink_to("30")
    argv = stage_proc_covers(str(tmp_path / "empty"), proc=str(proc))
    covered = {argv[index + 1] for index, word in enumerate(argv) if word == "--tmpfs"}
    assert covered == {"/proc/7", "/proc/9", "/proc/12", "/proc/30"}


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether the machine's process ``pid`` is ``ancestor`` or one of its descendants (parents read in /proc)."""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's ID
    return False


def _kernel_user_ids(seen: dict[int, int], stop: threading.Event, ancestor: int | None = None) -> None:
    """Every process of the machine whose command line runs ipykernel, below ``ancestor`` (default: this test's
    process; the kernels of other work on the machine are not the grader's), with its real user ID, until
    ``stop``."""
    ancestor = os.getpid() if ancestor is None else ancestor
    while not stop.is_set():
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if (b"ipykernel_launcher" in command and b"bwrap" not in command.split(b"\0")[0]
                    and _descends_from(int(entry), ancestor)):
                seen[int(entry)] = int(re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE).group(1))
        time.sleep(0.05)


@pytest.mark.slow
@needs_root_and_bwrap
def test_each_kernel_runs_under_its_worker_s_account_never_the_grader_s(tmp_path):
    from planted import filled, solutions, write_submission

    from autograder.grade import grade

    root = tmp_path / "class"
    answers = solutions(ASSIGNMENT)
    for student in ("s1", "s2"):  # each kernel sleeps, so that the two overlap and can be seen
        slow = {"attention_answer": LOOK_AROUND + "import time\ntime.sleep(4)\n" + answers["attention_answer"]}
        write_submission(root, student, ASSIGNMENT, filled(ASSIGNMENT, {**answers, **slow}))
    seen: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_kernel_user_ids, args=(seen, stop), daemon=True)
    watcher.start()
    try:
        results = grade(root, tmp_path / "out", jobs=2, timeout=300, limits=Limits(), regrade=True)
    finally:
        stop.set()
        watcher.join()
    assert [result.score for result in results] == [result.max_score for result in results]
    user_ids = set(seen.values())
    assert user_ids and os.getuid() not in user_ids and 0 not in user_ids, seen
    assert all(accounts.KERNEL_ACCOUNTS_BASE < uid < accounts.KERNEL_ACCOUNTS_BASE + 2**22 for uid in user_ids)
    # each log names its kernel's account, and the two kernels, graded side by side, had two
    named = set()
    for student in ("s1", "s2"):
        log = (tmp_path / "out" / "logs" / student / f"{ASSIGNMENT}.log").read_text()
        (number,) = re.findall(r"the kernel runs under the machine's user ID (\d+), an account of its own", log)
        named.add(int(number))
    assert named <= user_ids and len(named) == 2, (named, user_ids)
    # and neither kernel saw a process or thread of its stage (the stage's /proc hides another user's)
    for student in ("s1", "s2"):
        (notebook,) = (tmp_path / "out" / "autograded" / student / ASSIGNMENT).glob("*.ipynb")
        assert "other users' processes and threads seen: []" in notebook.read_text(), student


def test_a_range_of_kernel_accounts_is_read_and_a_bad_one_is_refused_naming_the_variable():
    assert accounts.account_range("70000-70003") == range(70000, 70004)
    assert accounts.account_range("4294967294-4294967294") == range(4294967294, 4294967295)
    assert accounts.account_range("") is None
    for bad in ("70000", "70003-70000", "1000-2000", "65535-70000", "70000-4294967295", "a-b", "70000 -70001",
                "-70000", "70000-70001-70002", "\u0667\u0660\u0660\u0660\u0660-70001"):
        with pytest.raises(ValueError) as refused:
            accounts.account_range(bad)
        assert f"AUTOGRADER_KERNEL_ACCOUNTS={bad!r}" in str(refused.value), bad
        assert "between 65536 and 4294967294" in str(refused.value)
    # The accounts that graders outside containers make of their process IDs (2,000,000,000 + at most 2**22).
    for overlapping in ("2000000000-2004194304", "1999999999-2000000000", "2004194304-2004194400",
                        "2000001234-2000001234", "65536-4294967294"):
        with pytest.raises(ValueError, match="outside 2000000000-2004194304: the accounts that graders in the"):
            accounts.account_range(overlapping)
    assert accounts.account_range("1999999000-1999999999") == range(1999999000, 2000000000)
    assert accounts.account_range("2004194305-2004194305") == range(2004194305, 2004194306)


def test_the_grade_command_refuses_more_workers_than_accounts_and_starts_no_more_by_default(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    environment = {**os.environ, "AUTOGRADER_KERNEL_ACCOUNTS": "70000-70001"}
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(tmp_path / "class"),
                           "--out", str(tmp_path / "out"), "--jobs", "3"], env=environment, capture_output=True,
                          text=True, timeout=300, check=False, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 2, done.stderr
    assert "jobs=3 is more workers than the 2 accounts of AUTOGRADER_KERNEL_ACCOUNTS='70000-70001'" in done.stderr
    assert not (tmp_path / "out" / "grades.csv").exists()
    from autograder.grade import default_jobs

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setenv("AUTOGRADER_KERNEL_ACCOUNTS", "70000-70001")
    assert default_jobs(Limits(memory_mb=0)) == 2
    monkeypatch.delenv("AUTOGRADER_KERNEL_ACCOUNTS")
    assert default_jobs(Limits(memory_mb=0)) == 8


@pytest.mark.slow
@needs_root_and_bwrap
def test_a_worker_that_finds_every_account_claimed_starts_no_kernel_and_keeps_no_grade(tmp_path):
    """Another grader of the same container holds the range's one account: this worker's submission is the
    grader's failure (never kept, graded by the next run), and no kernel runs under root's account instead."""
    from planted import filled, solutions, write_submission

    from autograder.grade import grade

    account = 3_000_000_300
    write_submission(tmp_path / "class", "s1", ASSIGNMENT, filled(ASSIGNMENT, solutions(ASSIGNMENT)))
    holder = subprocess.Popen(
        [sys.executable, "-c", CLAIMER.replace("range(70000, 70002)", f"range({account}, {account + 1})"),
         str(accounts.CLAIMS_FOLDER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    seen: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_kernel_user_ids, args=(seen, stop), daemon=True)
    try:
        assert holder.stdout.readline().strip() == str(account)
        watcher.start()
        os.environ["AUTOGRADER_KERNEL_ACCOUNTS"] = f"{account}-{account}"
        (result,) = grade(tmp_path / "class", tmp_path / "out", jobs=1, timeout=300, limits=Limits(), regrade=True)
    finally:
        os.environ.pop("AUTOGRADER_KERNEL_ACCOUNTS", None)
        stop.set()
        if watcher.is_alive():
            watcher.join()
        holder.communicate("")
    assert result.grader_failure and result.score == 0
    assert "could not give the kernel an account of its own" in result.reason
    assert "is claimed by another worker" in result.reason
    assert seen == {}  # no kernel started, under any account
    log = (tmp_path / "out" / "logs" / "s1" / f"{ASSIGNMENT}.log").read_text()
    assert "no kernel was started" in log


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare(1), as root")
def test_report_txt_says_when_root_s_kernels_run_under_root_s_account():
    code = ("from autograder.grade import _enforcement_warnings; from autograder.sandbox.launcher import Limits\n"
            "print('\\n'.join(_enforcement_warnings(None, None, Limits())))")
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    contained = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
                               capture_output=True, text=True, check=True).stdout
    assert "kernels ran under the grader's own account, root" not in here
    assert ("kernels ran under the grader's own account, root, not accounts of their own: the grader runs in a "
            "process namespace of its own (a container)") in contained


def test_the_grade_command_refuses_a_range_that_is_not_one(tmp_path):
    (tmp_path / "class").mkdir()
    environment = {**os.environ, "AUTOGRADER_KERNEL_ACCOUNTS": "70000-6"}
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(tmp_path / "class"),
                           "--out", str(tmp_path / "out")], env=environment, capture_output=True, text=True,
                          timeout=300, check=False, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 2, done.stderr
    assert "AUTOGRADER_KERNEL_ACCOUNTS='70000-6'" in done.stderr
    assert not (tmp_path / "out" / "grades.csv").exists()


CLAIMER = """
import sys
from pathlib import Path
from autograder.sandbox import accounts
try:
    print(accounts.claim_account(range(70000, 70002), Path(sys.argv[1])), flush=True)
except OSError as error:
    print("refused:", error, flush=True)
    sys.exit(0)
assert accounts.claim_account(range(70000, 70002), Path(sys.argv[1])) == accounts._claim[1]  # claims once
sys.stdin.read()  # hold the account until the test closes the pipe
"""


def test_workers_claim_different_accounts_of_the_range_and_free_theirs_when_they_end(tmp_path):
    """Two workers hold the two accounts of a range of two; a third is refused and says why; once a worker ends,
    its account is claimed again."""

    def claimer():
        process = subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path / "claims")], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        return process, process.stdout.readline().strip()

    first, first_account = claimer()
    second, second_account = claimer()
    third, third_says = claimer()
    try:
        assert {first_account, second_account} == {"70000", "70001"}
        assert third_says.startswith("refused: every account of AUTOGRADER_KERNEL_ACCOUNTS (70000-70001) is claimed")
        first.stdin.close()
        first.wait(timeout=60)
        fourth, fourth_account = claimer()
        assert fourth_account == first_account
        fourth.stdin.close()
        fourth.wait(timeout=60)
    finally:
        for process in (first, second, third):
            if process.stdin and not process.stdin.closed:
                process.stdin.close()
            process.wait(timeout=60)


def test_a_forked_child_claims_an_account_of_its_own_and_frees_its_parent_s_when_the_parent_ends(tmp_path):
    code = """
import os, subprocess, sys
from pathlib import Path
from autograder.sandbox import accounts
folder = Path(sys.argv[1])
parent = accounts.claim_account(range(70000, 70002), folder)
read, write = os.pipe()
child_ready, parent_gone = os.pipe(), os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, str(accounts.claim_account(range(70000, 70002), folder)).encode())
    os.write(child_ready[1], b"1")
    os.read(parent_gone[0], 1)  # the parent's lock is dropped: another process may claim its account
    claimer = "from pathlib import Path; from autograder.sandbox import accounts; "
    claimer += f"print(accounts.claim_account(range(70000, 70002), Path({str(folder)!r})))"
    os.write(write, b" " + subprocess.run([sys.executable, "-c", claimer], capture_output=True).stdout.strip())
    os._exit(0)
os.read(child_ready[0], 1)
os.close(accounts._claim[2])  # as the parent's end does, while the child lives on
os.write(parent_gone[1], b"1")
os.waitpid(pid, 0)
print(parent, os.read(read, 64).decode())
"""
    shown = subprocess.run([sys.executable, "-c", code, str(tmp_path / "claims")], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).resolve().parents[1]).stdout.split()
    parent, child, after_parent = shown
    assert sorted((parent, child)) == ["70000", "70001"]
    assert after_parent == parent  # the child did not keep the parent's account


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare(1), as root")
def test_a_grader_in_a_container_with_a_range_of_its_own_maps_accounts_from_it():
    code = "from autograder.sandbox import accounts; print(accounts.account_problem())"
    environment = {**os.environ, "AUTOGRADER_KERNEL_ACCOUNTS": "3000000000-3000000007"}
    contained = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        capture_output=True, text=True, check=True, env=environment,
    ).stdout.strip()
    assert contained == "None"


GRADE_IN_CONTAINER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from autograder.grade import grade
from autograder.sandbox.launcher import Limits
results = grade(Path(sys.argv[1]), Path(sys.argv[2]), jobs=2, timeout=300, limits=Limits(), regrade=True)
print("scores", [(result.score, result.max_score) for result in results])
"""


@pytest.mark.slow
@needs_root_and_bwrap
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_in_a_container_each_kernel_runs_under_an_account_of_the_container_s_range(tmp_path):
    """`grade --jobs 2` in a process namespace of its own (as in a container), given a range of two accounts: the
    machine's /proc shows every kernel under an account of that range, and the two workers under two of them."""
    from planted import filled, solutions, write_submission

    root = tmp_path / "class"
    answers = solutions(ASSIGNMENT)
    for student in ("s1", "s2"):
        slow = {"attention_answer": "import time\ntime.sleep(4)\n" + answers["attention_answer"]}
        write_submission(root, student, ASSIGNMENT, filled(ASSIGNMENT, {**answers, **slow}))
    given = range(3_000_000_100, 3_000_000_102)
    environment = {**os.environ, "AUTOGRADER_KERNEL_ACCOUNTS": f"{given.start}-{given.stop - 1}"}
    seen: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_kernel_user_ids, args=(seen, stop), daemon=True)
    watcher.start()
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", GRADE_IN_CONTAINER, str(root),
             str(tmp_path / "out"), str(Path(__file__).resolve().parent)],
            capture_output=True, text=True, env=environment, timeout=900, check=False,
            cwd=Path(__file__).resolve().parents[1],
        )
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-3000:]
    scores = re.search(r"scores (\[.*\])", done.stdout).group(1)
    assert all(score == best for score, best in ast.literal_eval(scores)), scores
    user_ids = set(seen.values())
    assert user_ids and user_ids <= set(given), (seen, given)
    named = set()
    for student in ("s1", "s2"):
        log = (tmp_path / "out" / "logs" / student / f"{ASSIGNMENT}.log").read_text()
        (number,) = re.findall(r"the kernel runs under the machine's user ID (\d+), an account of its own", log)
        named.add(int(number))
    assert named == set(given), named


def test_an_id_that_names_a_group_or_lies_in_a_person_s_subordinate_ids_is_never_claimed(tmp_path):
    import grp
    import pwd

    users = {entry.pw_uid for entry in pwd.getpwall()}
    group = next((entry for entry in grp.getgrall() if entry.gr_gid not in users), None)
    if group is not None:  # the kernel's ID is its group's too
        with pytest.raises(OSError, match=f"the machine's group {group.gr_name!r}"):
            accounts.claim_account(range(group.gr_gid, group.gr_gid + 1), tmp_path / "claims")
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("alice:3100000000:65536\nbroken line\nbob:x:5\n")
    subgid.write_text("carol:3200000000:10\n")
    files = (subuid, subgid)
    assert accounts.account_holder(3100000000, files) == (
        f"in the subordinate IDs 3100000000-3100065535 of 'alice' ({subuid})")
    assert accounts.account_holder(3100065535, files).startswith("in the subordinate IDs 3100000000-3100065535")
    assert accounts.account_holder(3200000009, files) == f"in the subordinate IDs 3200000000-3200000009 of 'carol' ({subgid})"
    assert accounts.account_holder(3100065536, files) is None and accounts.account_holder(3200000010, files) is None
    assert accounts.account_holder(0, files) == "the machine's account 'root'"


def test_an_account_the_machine_names_is_never_claimed(tmp_path):
    with pytest.raises(OSError, match="AUTOGRADER_KERNEL_ACCOUNTS holds 0, the machine's account 'root'"):
        accounts.claim_account(range(1), tmp_path / "claims")
