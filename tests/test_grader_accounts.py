"""autograder.sandbox.accounts: a grader run as root grades each submission's kernel under an account of its own.

What Linux counts per account (epoll watches, pipe buffers, processes) is then the kernel's alone: a kernel that
holds all of its account's epoll watches takes none from the grader or from another student's kernel. The tests
look at the machine's side, where the kernel's user ID is its account's: the namespace's maps, and the user ID of
every kernel process seen in the machine's /proc while `grade --jobs 2` grades two students.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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


def _kernel_user_ids(seen: dict[int, int], stop: threading.Event) -> None:
    """Every process of the machine whose command line runs ipykernel, with its real user ID, until ``stop``."""
    while not stop.is_set():
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if b"ipykernel_launcher" in command and b"bwrap" not in command.split(b"\0")[0]:
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
        slow = {"attention_answer": "import time\ntime.sleep(4)\n" + answers["attention_answer"]}
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
