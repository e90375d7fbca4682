"""The student edition's README, followed as written on a machine that has nothing of the course: its commands
make a virtual environment in the edition, install it, serve its notebooks in JupyterLab and check one. Then the
students' guide's hand-in through nbgrader's exchange (book/guide_students.md, "Handing in") runs with the
edition's own `nbgrader`, against an exchange where the instructor released 04_relative with the course's.

The edition is published into a temporary folder outside this checkout; every ```bash block of its README is run
in order in one bash shell there, with a PATH holding no virtual environment. `jupyter lab notebooks/` starts a
server, so it is started apart: as the README writes it, with `--allow-root` when the test runs as root (as the
README tells root to), `--no-browser` and a port of its own, and the server must list the notebooks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from autograder.authoring.publish import publish

BASH_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)
LAB = "jupyter lab notebooks/"
ROOT = Path(__file__).resolve().parents[1]
STUDENTS_GUIDE = ROOT / "book" / "guide_students.md"
HANDED_IN = "04_relative"


def readme_commands(readme: str) -> list[str]:
    """The README's shell commands, one per line, comments dropped, in order."""
    commands = []
    for block in BASH_BLOCK.findall(readme):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def _plain_environment() -> dict[str, str]:
    """A shell without this course's virtual environment: no VIRTUAL_ENV, no PYTHON* variable, no .venv on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(part for part in os.environ.get("PATH", "").split(os.pathsep) if part != venv_bin)
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    return environment | {"PATH": path or "/usr/bin:/bin", "HOME": environment.get("HOME", "/root")}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def hand_in_commands(guide: str) -> list[str]:
    """The students' guide's exchange commands (fetch, submit, fetch feedback), as written."""
    section = guide.split("(guide-students-hand-in)=", 1)[1].split("\n## ", 2)[1]
    return readme_commands(section.split("**Any other way**", 1)[0])


def test_the_readme_commands_are_found():
    commands = readme_commands((Path(__file__).parents[1] / "autograder" / "student_edition" / "README.md").read_text())
    assert commands[:2] == ["python -m venv .venv", "source .venv/bin/activate"]
    assert "pip install -r requirements.txt" in commands and LAB in commands
    assert "python -m autograder check notebooks/02_sinusoidal.ipynb" in commands
    assert hand_in_commands(STUDENTS_GUIDE.read_text(encoding="utf-8")) == [
        f"nbgrader {step} {HANDED_IN} --course posenc" for step in ("fetch_assignment", "submit", "fetch_feedback")]


@pytest.mark.slow
def test_the_editions_readme_works_on_its_own(tmp_path):
    edition = tmp_path / "edition"
    publish(edition)
    commands = readme_commands((edition / "README.md").read_text(encoding="utf-8"))
    before_lab = commands[:commands.index(LAB)]
    after_lab = commands[commands.index(LAB) + 1:]
    environment = _plain_environment()
    # "With Python 3.11 or newer": the interpreter this course's environment was made from, as `python`.
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python").symlink_to(sys._base_executable)
    environment["PATH"] = f"{shims}{os.pathsep}{environment['PATH']}"

    def bash(lines: list[str], timeout: int) -> subprocess.CompletedProcess:
        script = "set -e\n" + "\n".join(lines) + "\n"
        return subprocess.run(["bash", "-c", script], cwd=edition, env=environment, capture_output=True,
                              text=True, timeout=timeout, check=False)

    installed = bash(before_lab, timeout=1500)
    assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]
    assert (edition / ".venv" / "bin" / "jupyter").is_file()

    port = _free_port()
    lab = f"{LAB} --no-browser --port={port}" + (" --allow-root" if os.geteuid() == 0 else "")
    server = subprocess.Popen(["bash", "-c", f"source .venv/bin/activate && exec {lab}"], cwd=edition,
                              env=environment | {"JUPYTER_TOKEN": "edition-test"}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        listing = None
        for _ in range(120):
            time.sleep(1)
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents/",
                                                 headers={"Authorization": "token edition-test"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    listing = json.load(response)
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
        assert listing is not None, "JupyterLab did not answer within two minutes"
        names = {entry["name"] for entry in listing["content"]}
        assert {f"{n}.ipynb" for n in ("01_permutation", "06_comparison")} <= names, names
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)

    checked = bash(["source .venv/bin/activate", *after_lab], timeout=900)
    output = checked.stdout + checked.stderr
    # Nothing is answered in a fresh edition: check runs every test cell and exits 1, saying so per item.
    assert checked.returncode == 1 and "NOT ANSWERED" in checked.stdout, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert shlex.split(after_lab[-1])[:3] == ["python", "-m", "autograder"]

    # Handing in through the exchange, as the students' guide writes it, with the edition's nbgrader. The
    # instructor releases with the course's own; the exchange's place is the machine's configuration (a folder
    # of Jupyter configuration standing in for /etc/jupyter).
    exchange, configuration, home = tmp_path / "exchange", tmp_path / "etc-jupyter", tmp_path / "home"
    for folder in (exchange, configuration, home):
        folder.mkdir()
    (configuration / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n")
    course = tmp_path / "course"
    made = subprocess.run([sys.executable, "-m", "autograder", "course", "--out", str(course)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert made.returncode == 0, made.stderr[-3000:]
    released = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "release_assignment", HANDED_IN], cwd=course,
        env=os.environ | {"JUPYTER_CONFIG_DIR": str(configuration)}, capture_output=True, text=True, timeout=600,
        check=False)
    assert released.returncode == 0, released.stderr[-3000:]
    fetch, submit, _ = hand_in_commands(STUDENTS_GUIDE.read_text(encoding="utf-8"))
    student = environment | {"HOME": str(home), "JUPYTER_CONFIG_DIR": str(configuration)}
    handed_in = subprocess.run(
        ["bash", "-c", (f"set -e\nsource {edition}/.venv/bin/activate\ncd ~\n{fetch}\n{submit}\n"
                        "jupyter labextension list 2>&1\njupyter server extension list 2>&1\n")],
        env=student, capture_output=True, text=True, timeout=600, check=False)
    output = handed_in.stdout + handed_in.stderr
    assert handed_in.returncode == 0, output[-4000:]
    assert (home / HANDED_IN / f"{HANDED_IN}.ipynb").is_file()  # fetched into the home
    (inbound,) = (exchange / "posenc" / "inbound").iterdir()
    assert inbound.name.split("+")[1] == HANDED_IN and (inbound / f"{HANDED_IN}.ipynb").is_file(), inbound
    # JupyterLab's Nbgrader menu (Assignment List) is the edition's too.
    assert re.search(r"@jupyter/nbgrader\b.*enabled", output), output[-4000:]
    assert re.search(r"nbgrader\.server_extensions\.assignment_list\b.*enabled", output), output[-4000:]
