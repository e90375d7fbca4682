"""``python -m autograder release | grade PATH --out DIR | formgrader --out DIR | feedback --out DIR |
course --out DIR | collect ASSIGNMENT --roster FILE --out DIR | check NOTEBOOK | publish --out DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder import ASSIGNMENTS, RELEASED_DIRECTORY
from autograder.student.check import add_arguments as add_check_arguments
from autograder.student.check import positive_int

NBGRADER_EXCHANGE = "/usr/local/share/nbgrader/exchange"  # nbgrader's Exchange.root (tests/test_grader_exchange.py)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser(
        "release", help="regenerate notebooks/ from autograder/source/ with nbgrader"
    )
    release.add_argument(
        "--out", type=Path, default=RELEASED_DIRECTORY, help="destination (default: notebooks/)"
    )
    release.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a notebook differs from a fresh generation",
    )
    release.add_argument(
        "assignments", nargs="*", metavar="ASSIGNMENT", help=f"default: all of {', '.join(ASSIGNMENTS)}"
    )

    grade = commands.add_parser(
        "grade", help="grade a folder or zip of <student>/<assignment>/<notebook>.ipynb"
    )
    grade.add_argument("path", type=Path, help="folder or zip of submissions")
    grade.add_argument(
        "--out", type=Path, required=True, help="folder for grades.csv, items.csv and feedback/"
    )
    grade.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="local worker processes (default: one per core, no more than the memory holds kernels of --memory-mb)",
    )
    grade.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="grade on the dask.distributed cluster of this scheduler, e.g. tls://host:8786 (see book/guide_instructors.md, 'Grading on a cluster')",
    )
    grade.add_argument(
        "--cluster-credentials",
        metavar="DIR",
        type=Path,
        default=None,
        help="the cluster's TLS credentials, made by `python -m autograder cluster-credentials --out DIR` (needed with --scheduler)",
    )
    grade.add_argument(
        "--regrade",
        action="store_true",
        help="grade every submission again, even one whose result is kept from an earlier run into --out",
    )
    grade.add_argument(
        "--variants",
        choices=("on", "off"),
        default=None,
        help="per-student parameters of the numerical items (on), or one answer key for every student (off) "
        "(default: c.AutograderVariants.enabled of nbgrader_config.py)",
    )
    grade.add_argument(
        "--withhold-answers",
        action="store_true",
        help="a wrong answer's feedback says only that it is wrong, not why (for feedback released while "
        "resubmission is open; see book/guide_instructors.md, 'When to release feedback')",
    )
    grade.add_argument(
        "--max-class-mb",
        type=positive_int,
        default=None,
        help="most MB of the class's files copied for grading (default: 2048); a file past it, or past the "
        "temporary folder's free space, is not copied and its submission gets 0 with the reason",
    )
    grade.add_argument(
        "--timeout",
        type=positive_int,
        default=None,
        help="seconds a cell may run (default: nbgrader_config.py)",
    )

    for option, unit in (
        ("--memory-mb", "address space of each kernel, in MB"),
        ("--cpu-seconds", "CPU seconds of each kernel"),
        ("--processes", "processes and threads each kernel may add"),
        ("--file-size-mb", "largest file a kernel may write, in MB"),
        ("--output-kb", "output a cell may send the grader, in KB (the rest is cut)"),
        ("--notebook-output-kb", "output and widget messages a notebook may send the grader in all, in KB"),
        ("--tmp-mb", "size of each kernel's /tmp and of its /dev/shm, in MB"),
        ("--notebook-seconds", "wall-clock seconds a whole notebook may run; the cells after are not run"),
    ):
        grade.add_argument(option, type=positive_int, default=None, help=f"{unit} (default: nbgrader_config.py)")
    grade.add_argument(
        "--db",
        metavar="URL",
        default=None,
        help="the class's nbgrader gradebook, e.g. postgresql://user@host/name (default: sqlite:///OUT/gradebook.db)",
    )
    grade.add_argument(
        "--no-progress", action="store_true", help="no progress bar (by default one when stderr is a terminal)"
    )
    grade.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run kernels without bubblewrap (limits only); report.txt says so",
    )

    formgrader = commands.add_parser(
        "formgrader", help="JupyterLab with nbgrader's formgrader on the folder grade wrote, to grade by hand"
    )
    formgrader.add_argument("--out", type=Path, required=True, help="the --out folder of grade")
    formgrader.add_argument("--ip", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    formgrader.add_argument("--port", type=positive_int, default=None, help="port (default: a free one)")
    formgrader.add_argument("--no-browser", action="store_true", help="do not open a browser")

    feedback = commands.add_parser(
        "feedback", help="hand grades from the gradebook into grades.csv, items.csv, report.txt and the feedback pages"
    )
    feedback.add_argument("--out", type=Path, required=True, help="the --out folder of grade")

    course = commands.add_parser(
        "course", help="an nbgrader course directory for the exchange: configuration, source/ and release/"
    )
    course.add_argument("--out", type=Path, required=True, help="the course directory (created if needed)")

    _add_collect_arguments(
        commands.add_parser(
            "collect",
            help="each student's newest submission from nbgrader's exchange, checked against a roster of accounts",
        )
    )

    credentials = commands.add_parser(
        "cluster-credentials",
        help="a certificate authority and a certificate for a Dask cluster that only the instructor's ends may join",
    )
    credentials.add_argument("--out", type=Path, required=True, help="a new folder for the credentials (made 0700)")

    add_check_arguments(commands.add_parser("check", help="run a notebook's visible tests in a fresh kernel"))

    publish = commands.add_parser(
        "publish", help="the student edition: the repository students clone, with nothing of the answer key"
    )
    publish.add_argument("--out", type=Path, required=True, help="a new or empty folder outside autograder/")
    return parser


def _grade_output_problem(out: Path) -> str | None:
    """What is wrong with ``grade --out``, in one line naming it (None when it is a folder ``grade`` may write):
    a file, a folder that cannot be created, or a place inside the course's packages, which the student edition
    and the kernels copy (a student's notebook must never land there)."""
    from autograder import COURSE_DIRECTORY, REPOSITORY
    from autograder.course_directory import private_folder

    resolved = Path(out).resolve()
    for package in (COURSE_DIRECTORY, REPOSITORY / "posenc_ref"):
        if resolved.is_relative_to(package):
            return f"--out must lie outside {package} (the course's packages), got {out}"
    if resolved.exists() and not resolved.is_dir():
        return f"--out must be a folder (new or existing), got {out}, which is a file"
    try:
        private_folder(resolved)  # the instructor's alone when new (warned about above when it exists)
    except OSError as error:
        return f"--out {out} cannot be created: {error.strerror or error}"
    return None


def _db_password_problem(db_url: str | None) -> str | None:
    """Why ``grade --db`` must not carry a password: a command line is readable by every account of the machine
    (``/proc/PID/cmdline``) for as long as the command runs, and with the gradebook's password any student with
    an account could rewrite every grade. None when the URL names none (or is no URL: grade says so)."""
    if not db_url:
        return None
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(db_url)
    except ArgumentError:
        return None
    in_query = sorted(key for key in url.query if "password" in key.lower())  # libpq's password, sslpassword
    if url.password is None and not in_query:
        return None
    shown = url.render_as_string(hide_password=True)
    if in_query:
        shown = f"{shown.split('?', 1)[0]}?{'&'.join(f'{key}=***' for key in in_query)}..."
    query = {key: value for key, value in url.query.items() if key not in in_query}
    without = URL.create(url.drivername, url.username, None, url.host, url.port, url.database, query)
    return (f"--db {shown} holds a password, which every account of this machine can read on grade's command line "
            f"while it runs; leave it out of the URL ({without.render_as_string()}) and give it through "
            "PGPASSWORD or ~/.pgpass (the database's own ways)")


def _add_collect_arguments(collect: argparse.ArgumentParser) -> None:
    collect.add_argument("assignment", choices=ASSIGNMENTS, metavar="ASSIGNMENT", help=", ".join(ASSIGNMENTS))
    collect.add_argument(
        "--roster",
        type=Path,
        required=True,
        help="CSV file with the header student_id,account: the account that must own each student's submissions",
    )
    collect.add_argument(
        "--out", type=Path, required=True, help="the course's submitted/ folder (it must not hold source/)"
    )
    collect.add_argument(
        "--exchange",
        type=Path,
        default=Path(NBGRADER_EXCHANGE),
        help=f"nbgrader's exchange folder (default: nbgrader's, {NBGRADER_EXCHANGE})",
    )
    collect.add_argument("--course", default="posenc", help="the course id (default: posenc)")
    collect.add_argument(
        "--deadline",
        default=None,
        help="refuse submissions after this time, e.g. '2026-12-01 23:59:00 UTC' (default: none)",
    )
    collect.add_argument(
        "--allow-late", action="store_true", help="accept submissions after --deadline (the newest is taken)"
    )


def _collect_command(arguments: argparse.Namespace) -> int:
    """``collect``: print each student collected and each inbound folder refused, with its reason."""
    from autograder.feedback.escape import report_text
    from autograder.intake.exchange import collect, parse_utc, read_roster

    try:
        deadline = None if arguments.deadline is None else parse_utc(arguments.deadline)
        collected = collect(
            arguments.exchange,
            arguments.course,
            arguments.assignment,
            read_roster(arguments.roster),
            arguments.out,
            deadline=deadline,
            allow_late=arguments.allow_late,
        )
    except (FileNotFoundError, ValueError) as error:
        print(report_text(f"collect: {error}"), file=sys.stderr)
        return 2
    for warning in collected.warnings:
        print(report_text(f"warning: {warning}"))
    for student, name in sorted(collected.accepted.items()):
        late = collected.late.get(student)
        print(report_text(f"collected {student}: {name}" + (f" (LATE: {late} after the deadline)" if late else "")))
    for name, reason in collected.refused:
        print(report_text(f"refused {name}: {reason}"))
    print(
        f"collected {len(collected.accepted)} submission(s) of {arguments.assignment} into {arguments.out}; "
        f"refused {len(collected.refused)}"
    )
    return 1 if collected.no_room else 0  # the grader's own failure: a run from cron or at shows it


# The commands that write the instructor's side into --out: the answer key and hidden tests, the gradebook,
# every student's work, nbgrader's secrets (autograder.course_directory.private_folder).
PRIVATE_COMMANDS = ("grade", "collect", "course", "feedback", "formgrader")


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.command in PRIVATE_COMMANDS:
        from autograder.course_directory import private_folder
        from autograder.feedback.escape import report_text

        # course makes its --out here; grade and collect check what they are given before they make theirs;
        # formgrader and feedback read grade's.
        try:
            for warning in private_folder(arguments.out, create=arguments.command == "course"):
                print(report_text(f"{arguments.command}: {warning}"), file=sys.stderr)
        except OSError as error:
            print(report_text(f"{arguments.command}: --out {arguments.out} cannot be made: {error}"), file=sys.stderr)
            return 2
    if arguments.command == "release":
        from autograder.authoring.release import release, stale

        assignments = tuple(arguments.assignments) or ASSIGNMENTS
        unknown = [assignment for assignment in assignments if assignment not in ASSIGNMENTS]
        if unknown:
            print(
                f"unknown assignment {', '.join(unknown)}; known: {', '.join(ASSIGNMENTS)}", file=sys.stderr
            )
            return 2
        if arguments.check:
            differing = stale(arguments.out, assignments)
            for assignment in differing:
                print(f"{arguments.out / assignment}.ipynb differs from a fresh generation", file=sys.stderr)
            return 1 if differing else 0
        for path in release(arguments.out, assignments):
            print(f"wrote {path}")
        return 0
    if arguments.command == "grade":
        from tqdm import tqdm

        from autograder.executors.dask import SchedulerLost
        from autograder.feedback.escape import report_text
        from autograder.grade import grade

        def report(result) -> None:
            status = f" (not graded: {result.reason})" if result.reason else ""
            line = f"{result.student}/{result.assignment}: {result.score:g} / {result.max_score:g}{status}"
            tqdm.write(report_text(line), file=sys.stdout)

        from dataclasses import replace

        from autograder.grade import configured_limits

        limits = configured_limits()
        chosen = {
            name: getattr(arguments, name)
            for name in limits.__dataclass_fields__
            if getattr(arguments, name) is not None
        }
        if problem := _grade_output_problem(arguments.out) or _db_password_problem(arguments.db):
            print(report_text(f"grade: {problem}"), file=sys.stderr)
            return 2
        try:
            results = grade(
                arguments.path,
                arguments.out,
                jobs=arguments.jobs,
                timeout=arguments.timeout,
                report=report,
                limits=replace(limits, **chosen),
                sandbox=not arguments.no_sandbox,
                db_url=arguments.db,
                progress=not arguments.no_progress and sys.stderr.isatty(),
                scheduler=arguments.scheduler,
                cluster_credentials=arguments.cluster_credentials,
                regrade=arguments.regrade,
                variants=None if arguments.variants is None else arguments.variants == "on",
                withhold_answers=arguments.withhold_answers,
                max_class_mb=arguments.max_class_mb,
            )
        except (FileNotFoundError, ValueError) as error:
            print(report_text(f"cannot grade {arguments.path}: {error}"), file=sys.stderr)
            return 2
        except SchedulerLost as error:
            print(report_text(f"grading stopped: {error}"), file=sys.stderr)  # it names the students recorded
            return 3
        if not results:
            print(
                f"no <student>/<assignment>/ folder found in {arguments.path}; see report.txt",
                file=sys.stderr,
            )
        written = "grades.csv, items.csv, report.txt, feedback/, logs/ and autograded/ (the formgrader's)"
        if arguments.db:
            from sqlalchemy.engine import make_url

            gradebook = make_url(arguments.db).render_as_string(hide_password=True)
        else:
            gradebook = str(arguments.out / "gradebook.db")
        print(f"wrote {written} in {arguments.out}; the gradebook is {gradebook}")
        return 0
    if arguments.command == "publish":
        from autograder.authoring.publish import publish

        try:
            written = publish(arguments.out)
        except ValueError as error:
            print(f"publish: {error}", file=sys.stderr)
            return 2
        except OSError as error:  # a folder that cannot be created there, a disk that is full
            print(f"publish: --out {arguments.out} cannot be written: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"wrote the student edition ({len(written)} files) into {arguments.out}; see its README.md")
        return 0
    if arguments.command == "collect":
        return _collect_command(arguments)
    if arguments.command == "cluster-credentials":
        from autograder.executors.credentials import make_credentials

        try:
            written = make_credentials(arguments.out)
        except ValueError as error:
            print(f"cluster-credentials: {error}", file=sys.stderr)
            return 2
        print(f"wrote {', '.join(path.name for path in written)} in {arguments.out}: copy the folder without ca.key "
              "to each machine of the cluster, readable by its account alone")
        return 0
    if arguments.command in ("formgrader", "feedback", "course"):
        return _instructor_command(arguments)
    from autograder.student.check import check

    return check(arguments.notebook, timeout=arguments.timeout)


def _instructor_command(arguments: argparse.Namespace) -> int:
    """``formgrader``, ``feedback`` and ``course``: the folder an instructor grades in by hand."""
    try:
        if arguments.command == "formgrader":
            from autograder.formgrader.server import serve

            return serve(
                arguments.out, ip=arguments.ip, port=arguments.port, open_browser=not arguments.no_browser
            )
        if arguments.command == "feedback":
            from autograder.feedback.handgraded import has_hand_grade, refresh

            results = refresh(arguments.out)
            hand_graded = sum(has_hand_grade(result) for result in results)
            print(
                f"wrote grades.csv, items.csv and report.txt in {arguments.out}, and the feedback pages of the "
                f"{hand_graded} submission(s) with a hand grade"
            )
            return 0
        from autograder.course_directory import start_course

        for path in start_course(arguments.out):
            print(f"wrote {path}")
        print(f"{arguments.out} is an nbgrader course directory; see book/guide_instructors.md, "
              "'The whole loop: nbgrader's exchange'")
        return 0
    except ValueError as error:
        from autograder.feedback.escape import report_text

        print(report_text(f"{arguments.command}: {error}"), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
