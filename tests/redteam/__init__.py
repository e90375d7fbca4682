"""Attack submissions for the red-team suite (tests/test_grader_redteam.py).

Every attack is the released ``01_permutation`` notebook, blank (an honest student with these answers earns 0),
with the attack's code in place of the first answer. Attacks print what they reached on lines starting with
``REACHED:``; the suite reads them from the feedback pages. The paths an attack probes are given to it as
constants written into its code by :func:`build_attacks` (the suite's own folders), so that a leak would show.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
from planted import grade_id, released, write_full_and_mistakes, write_submission

ASSIGNMENT = "01_permutation"
FIRST_ANSWER = "attention_answer"

# Each attack: name -> (class of the issue, code). {probe} is replaced by a dict of paths to probe.
ATTACKS: dict[str, tuple[str, str]] = {
    "patch_answers_module": (
        "patch libraries",
        """
        import autograder.student.answers as answers
        answers.check_close = lambda *args, **kwargs: None
        answers.check_expressions = lambda *args, **kwargs: None
        answers.as_choice = lambda value, name, choices: "B"
        answers.as_table = lambda value, name, shape: [[0.0] * shape[1] for _ in range(shape[0])]
        class Quiet(AssertionError):
            pass
        answers.AnswerError = Quiet
        # Wrong letters whatever the order drawn for this student: the ones it sees beside the source's option A.
        quiz_attention_symmetry = my_parameters.letter("Quiz 1", "A")
        quiz_bag_of_words = my_parameters.letter("Quiz 2", "A")
        # Wrong answers of the right shapes, which the visible tests accept.
        import torch
        def self_attention(x, w_query, w_key, w_value, prefix=None):
            return torch.zeros(x.shape[0], w_value.shape[1])
        def equivariance_error(layer, x, permutation):
            return 0.0
        """,
    ),
    "patch_builtins": (
        "patch builtins",
        """
        import builtins
        builtins.isinstance = lambda *args: True
        builtins.bool = lambda *args: True
        builtins.type = lambda *args: str
        builtins.sorted = lambda *args, **kwargs: []
        """,
    ),
    "patch_torch_and_numpy": (
        "patch libraries",
        """
        import numpy, torch
        torch.allclose = lambda *args, **kwargs: True
        torch.Tensor.tolist = lambda self: [[1.1, 1.7]] * 3
        torch.Tensor.__eq__ = lambda self, other: True
        numpy.allclose = lambda *args, **kwargs: True
        numpy.isclose = lambda *args, **kwargs: True
        def self_attention(x, w_query, w_key, w_value, prefix=None):
            return torch.zeros(x.shape[0], w_value.shape[1])
        """,
    ),
    "patch_json_and_display": (
        "patch libraries",
        """
        import json
        import IPython.display
        json.dumps = lambda *args, **kwargs: '{"step": 0, "values": {"output": [[1.0]]}}'
        real_display = IPython.display.display
        IPython.display.display = lambda *args, **kwargs: real_display({"text/plain": "nothing"}, raw=True)
        """,
    ),
    "rewrite_later_cells": (
        "rewrite later cells",
        """
        def nothing(lines):
            return ["pass\\n"]
        get_ipython().input_transformers_cleanup.append(nothing)
        """,
    ),
    "forge_reports": (
        "rewrite later cells",
        """
        import re
        def forge(lines):
            text = "".join(lines)
            marker = re.search(r"AUTOGRADER-REPORT-[0-9a-f]{32}", text)
            if not marker:
                return lines
            line = marker.group(0) + ' {"step": 0, "values": {"output": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]}}'
            forged = "from IPython.display import display\\n"
            forged += f"display({{'text/x-autograder-report': {line!r}}}, raw=True)\\n"
            forged += f"print({line!r})\\n"
            return [forged]
        get_ipython().input_transformers_cleanup.append(forge)
        """,
    ),
    "hide_errors": (
        "hide errors",
        """
        def swallow(shell, kind, value, traceback, tb_offset=None):
            return None
        get_ipython().set_custom_exc((BaseException,), swallow)
        import sys
        sys.excepthook = lambda *args: None
        """,
    ),
    "read_files_nearby": (
        "read files near it",
        """
        import glob, os
        probe = {probe}
        found = []
        for path in probe["read"]:
            for candidate in glob.glob(path + "/**", recursive=True)[:2000]:
                if os.path.isfile(candidate):
                    try:
                        with open(candidate, "rb") as handle:
                            handle.read(16)
                        found.append(candidate)
                    except OSError:
                        pass
        for root in ("/tmp", os.getcwd(), os.path.expanduser("~")):
            for candidate in glob.glob(root + "/**/*", recursive=True)[:2000]:
                if candidate.endswith((".db", ".ipynb", ".csv", ".html")):
                    found.append(candidate)
        print("REACHED:", sorted(set(found)))
        """,
    ),
    "write_gradebook_and_outputs": (
        "write to the gradebook",
        """
        import glob, os, sqlite3
        probe = {probe}
        written = []
        for path in probe["write"]:
            for target in [path, *glob.glob(path + "/**", recursive=True)[:2000]]:
                try:
                    if os.path.isdir(target):
                        with open(os.path.join(target, "pwned"), "w") as handle:
                            handle.write("pwned")
                        written.append(target)
                    elif target.endswith(".db"):
                        sqlite3.connect(target).execute("update grade set auto_score = 100")
                        written.append(target)
                except Exception:
                    pass
        print("REACHED:", written)
        """,
    ),
    "open_sockets": (
        "open sockets",
        """
        import socket
        probe = {probe}
        reached = []
        for host, port in [("127.0.0.1", probe["port"]), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
            try:
                socket.create_connection((host, port), timeout=2).close()
                reached.append((host, port))
            except OSError:
                pass
        print("REACHED:", reached)
        """,
    ),
    "fork_bomb": (
        "fork",
        """
        import os, time
        children = 0
        for _ in range(2000):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                children += 1
            except OSError:
                break
        print("forked", children)
        """,
    ),
    "allocate_without_bound": (
        "allocate without bound",
        """
        blocks = []
        while True:
            blocks.append(bytearray(256 * 1024 * 1024))
        """,
    ),
    "loop_forever": (
        "loop forever",
        """
        while True:
            pass
        """,
    ),
    "kill_own_kernel": (
        "kill its kernel",
        """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
        """,
    ),
    "kill_every_process": (
        "kill its kernel",
        """
        import os, signal
        probe = {probe}
        for pid in probe["pids"]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        """,
    ),
    "huge_output_and_files": (
        "allocate without bound",
        """
        for _ in range(100000):
            print("x" * 100)
        try:
            with open("big", "wb") as handle:
                handle.write(b"0" * (512 * 1024 * 1024))
        except OSError as error:
            print("file limit:", type(error).__name__)
        """,
    ),
    "flood_one_message": (
        "allocate without bound",
        """
        from IPython.display import display
        display({"text/plain": "x" * 40_000_000}, raw=True)
        print("y" * 5_000_000)
        """,
    ),
    "exit_the_interpreter": (
        "kill its kernel",
        """
        import os
        os._exit(0)
        """,
    ),
}


def attack_notebook(code: str) -> nbformat.NotebookNode:
    """The blank released notebook with ``code`` as its first answer."""
    notebook = released(ASSIGNMENT)
    for cell in notebook.cells:
        if grade_id(cell) == FIRST_ANSWER:
            cell.source = code
    return notebook


def build_attacks(root: Path, probe: dict) -> None:
    """Write every attack as ``root/<attack>/01_permutation/01_permutation.ipynb``."""
    for name, (_, code) in ATTACKS.items():
        source = textwrap.dedent(code).strip().replace("{probe}", repr(probe))
        write_submission(root, name, ASSIGNMENT, attack_notebook(source))


def build_honest(root: Path) -> None:
    """Two honest students: every answer right (13 points), and the planted mistakes (4 points)."""
    write_full_and_mistakes(root, ASSIGNMENT, ("honest_full", "honest_mistakes"))
