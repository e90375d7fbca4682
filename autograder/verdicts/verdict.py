"""Grades decided outside the student's kernel: the kernel reports values, the grader compares them.

A hidden test written in ``source/`` mixes three things: inputs and calls of the student's code (they must run
in the student's kernel), the expected values and known mistakes (constants), and the checks
(``check_close``, ``check_expressions``, ``if ...: raise AnswerError(...)``). Student code runs first in the same
kernel and can patch builtins, :mod:`autograder.student.answers`, torch or numpy, rewrite the cells that follow or
hide their errors, so neither the constants nor the checks may run there.

:func:`split_hidden_tests` cuts a hidden section, at grading time, into

- the *kernel part*: the statements that call the student's code, with a reporter injected before every check:
  it displays one line ``<marker> {"step": i, "values": {...}}`` holding, as JSON of plain numbers and strings,
  the values the check needs, as display data of its own MIME type (a student's answer is encoded by exact type: ``int``, ``float``, ``str``,
  ``bool``, ``None``, lists, tuples, dicts with ``str`` keys, sets, numpy numbers and arrays, torch tensors;
  exact numbers (``Fraction``, ``Decimal``, sympy numbers, and the :class:`autograder.student.answers.ExactNumber`
  a coercion wraps them in) as the text of :func:`autograder.student.answers.exact_text` with the name of their
  entry, never as a float computed in the kernel; anything else is reported as unreadable);
- the *grader part*: the constants and the checks, which :func:`decide` runs in the grader's process on the
  values parsed strictly from the kernel's output (:func:`parse_reports`); the text of an exact number is
  read there too, into a float (:func:`autograder.student.answers.reported_number_value`). The expected constants
  never enter the kernel; a kernel that lies must know the right values to gain anything.

A hidden section whose checks need an object that cannot be reported (a module, a tensor kept for its
identity) cannot be cut: :func:`split_hidden_tests` returns ``None`` for it, the grader lists it in its
report, and a test of the course fails, so that no exercise is released in that shape (report plain values
instead: a parameter's name rather than its identity, an exception's class names rather than a ``try``
around the check).

The reported values are the student's, so a check on them can be slow or hungry however carefully
:mod:`autograder.student.answers` bounds its inputs (sympy's ``simplify`` on twelve nested ``sin`` never ends).
:func:`decide` therefore runs the grader part of each test cell in a child process, limited to
:data:`CHECK_SECONDS` of wall-clock time and :data:`CHECK_MEMORY_MB` of address space, and killed when it
runs over: the answer then fails with a message that says which limit it hit. The children are forked by
multiprocessing's fork server, a single-threaded process started once that has imported sympy and this
module, so that a child costs a fork and no imports, and forking is safe in a grader that holds threads.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import multiprocessing
import re
import resource
import secrets
import signal
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autograder.student import answers

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
CHECKS = frozenset({"check_close", "check_expressions"})
COERCIONS = frozenset(name for name in answers.__all__ if name.startswith("as_"))
SECRET_PREFIXES = ("EXPECTED", "MISTAKES")
MAX_REPORT_CHARS = 2_000_000  # per cell: the largest honest report is a few kilobytes
MAX_DEPTH = 8
# What a wrong answer reads while answers are withheld (``grade --withhold-answers``): feedback released while
# resubmission is open must not turn each resubmission into a query for the right value.
WITHHELD = (
    "not right yet; while the assignment is open the feedback does not say why (a named mistake or the right "
    "value would give the answer away); the full feedback comes after the last collection"
)
SAFE_BUILTINS = (
    *("abs", "all", "any", "bool", "dict", "enumerate", "float", "frozenset", "int", "isinstance", "len"),
    *("list", "max", "min", "range", "round", "set", "sorted", "str", "sum", "tuple", "type", "zip"),
)
_SET_TAG = "__set__"
_UNREADABLE_TAG = "__unreadable__"
_EXACT_TAG = "__exact__"
MAX_NAME = 200  # characters of an exact number's name kept from a report
REPORT_MIME = "text/x-autograder-report"  # not a stream: nbgrader's LimitOutput leaves it whole
CHECK_SECONDS = 20.0  # wall-clock time of the grader part of one test cell; the course's take well under 1 s
CHECK_MEMORY_MB = 1024  # address space of the process that runs it; with sympy loaded it starts at ~70 MB
MAX_MESSAGE = 10_000  # characters of a verdict's message that cross back from the child
# Imported once, by the fork server, so that no child imports them. ``__main__`` is the main script, if any:
# a script run directly must keep its work under ``if __name__ == "__main__":``, as for any forkserver or
# spawn child.
_PRELOADED = ["__main__", "autograder.verdicts.verdict"]
# sympy, and what its simplify imports on its first call (~70 ms in every child): 0.3 s of CPU, which the fork
# server spends only for checks that name a function of :mod:`autograder.student.answers` that builds sympy
# values (:data:`SYMPY_CHECKS`). A child that needs sympy all the same (a student reported an exact number)
# imports it itself.
_PRELOADED_SYMPY = ["sympy", "sympy.combinatorics", "sympy.physics.units", "sympy.sets.setexpr", "sympy.tensor.tensor"]
SYMPY_CHECKS = frozenset({"check_expressions", "parse_expression", "same_value", "rounded_from"})


def uses_sympy(splits: Iterable[Split]) -> bool:
    """Whether a check of ``splits`` names one of :data:`SYMPY_CHECKS`."""
    return any(name in step.source for split in splits for step in split.steps for name in SYMPY_CHECKS)


def _preloaded(sympy: bool = True) -> list[str]:
    """:data:`_PRELOADED` (with :data:`_PRELOADED_SYMPY` if ``sympy``), and the main module when it was run by
    name (``python -m autograder.bench``, ``dask worker``): multiprocessing runs such a main module again in every
    child, which costs only its own lines once the fork server has imported it and what it imports (and seconds
    per child otherwise)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    runnable = name and name != "__main__" and not name.endswith(".__main__")
    preloaded = _PRELOADED + (_PRELOADED_SYMPY if sympy else [])
    return [*preloaded, name] if runnable else preloaded


def new_marker() -> str:
    """A marker for one grading run, which no student can know in advance."""
    return f"AUTOGRADER-REPORT-{secrets.token_hex(16)}"


def reported_text(cell: Any) -> str:
    """The reporter's lines in a cell's outputs (display data of :data:`REPORT_MIME` only)."""
    lines = []
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
        text = data.get(REPORT_MIME)
        if isinstance(text, list):
            text = "".join(item for item in text if isinstance(item, str))
        if isinstance(text, str):
            lines.append(text)
    return "\n".join(lines)


@dataclass(frozen=True)
class GraderStep:
    """A check run in the grader: its source and the kernel values it needs, reported under ``step``."""

    step: int
    source: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Split:
    """A hidden section cut in two: the code for the kernel and the checks for the grader."""

    kernel_source: str
    constants: str  # literal constant assignments, run in the grader before the steps
    steps: tuple[GraderStep, ...]


class Unreadable:
    """A value the kernel could not report as plain data; every coercion rejects it."""

    def __repr__(self) -> str:
        return f"<an object of type {type(self).__module__}.{type(self).__qualname__}>"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Its class is made at run time, so pickle (on the way to decide's child) rebuilds it by name.
        return unreadable, (f"{type(self).__module__}.{type(self).__qualname__}",)


def unreadable(type_name: str) -> Unreadable:
    """An :class:`Unreadable` whose type carries the name the kernel gave, so that messages name it."""
    module, _, qualname = type_name[:80].rpartition(".")
    kind = type("Unreadable", (Unreadable,), {"__module__": module or "builtins", "__qualname__": qualname})
    return kind()


# ---------------------------------------------------------------------------------------------------------
# Cutting a hidden section
# ---------------------------------------------------------------------------------------------------------


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # a line and its end, as the parser counts lines


class SourceSegments:
    """``ast.get_source_segment(source, node)`` for many nodes of one source, each in time linear in its own
    length: the source is cut into lines once (``get_source_segment`` cuts the whole source at every call,
    which made cutting a hidden section with large constants quadratic). Offsets are UTF-8 bytes, as the
    parser gives them:

        segment = line[lineno][col_offset:] + lines between + line[end_lineno][:end_col_offset]
    """

    def __init__(self, source: str) -> None:
        self.lines = [line.encode() for line in _LINE.findall(source)]

    def __call__(self, node: ast.AST) -> str | None:
        end_lineno, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_lineno is None or end_col is None:
            return None
        first, last = node.lineno - 1, end_lineno - 1
        if first == last:
            return self.lines[first][node.col_offset:end_col].decode()
        pieces = [self.lines[first][node.col_offset:], *self.lines[first + 1:last], self.lines[last][:end_col]]
        return b"".join(pieces).decode()


def _loaded_names(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)}


def _stored_names(node: ast.AST) -> set[str]:
    stored = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.arg):
            stored.add(sub.arg)
        if isinstance(sub, ast.FunctionDef | ast.Lambda | ast.ClassDef) and hasattr(sub, "name"):
            stored.add(sub.name)
    return stored


def _called_names(node: ast.AST) -> set[str]:
    return {
        sub.func.id for sub in ast.walk(node) if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
    }


def _is_check(statement: ast.stmt) -> bool:
    for sub in ast.walk(statement):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in CHECKS:
            return True
        if isinstance(sub, ast.Raise) and sub.exc is not None:
            target = sub.exc.func if isinstance(sub.exc, ast.Call) else sub.exc
            if isinstance(target, ast.Name) and target.id == "AnswerError":
                return True
    return False


def _literal_constant(statement: ast.stmt) -> str | None:
    """The name of an ``UPPER = <literal>`` assignment (``frozenset("abg")`` included), else None."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    target = statement.targets[0]
    if not (isinstance(target, ast.Name) and target.id.isupper()):
        return None
    value = statement.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "frozenset":
        value = value.args[0] if len(value.args) == 1 and not value.keywords else None
    literal_nodes = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.BinOp, ast.UnaryOp, ast.operator,
                     ast.unaryop, ast.Load)
    if value is None or not all(isinstance(node, literal_nodes) for node in ast.walk(value)):
        return None
    return target.id


def _is_plain_expression(node: ast.expr, plain: set[str]) -> bool:
    """Whether ``node`` evaluates to plain data: a coercion's result, a constant, or built from those."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id in COERCIONS
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in plain
    if isinstance(node, ast.Subscript):
        return _is_plain_expression(node.value, plain)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_is_plain_expression(element, plain) for element in node.elts)
    if isinstance(node, ast.ListComp | ast.SetComp):
        return _is_plain_expression(node.elt, plain | _stored_names(node))
    if isinstance(node, ast.DictComp):
        inner = plain | _stored_names(node)
        return _is_plain_expression(node.key, inner) and _is_plain_expression(node.value, inner)
    return False


def split_hidden_tests(hidden: str) -> Split | None:
    """Cut the code between the hidden-test markers in two (see the module's docstring); None if it cannot be."""
    try:
        tree = ast.parse(hidden)
    except SyntaxError:
        return None
    statements = tree.body
    segment_of = SourceSegments(hidden)
    constants = {name: index for index, s in enumerate(statements) if (name := _literal_constant(s))}
    # A literal constant binds its name and holds no name, call or raise: its (often large) value is not walked.
    is_constant = [False] * len(statements)
    for index in constants.values():
        is_constant[index] = True
    bound_in_code = set(constants).union(
        *(_stored_names(s) for index, s in enumerate(statements) if not is_constant[index])
    )
    imported = set()
    for statement in statements:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            imported |= {alias.asname or alias.name.split(".")[0] for alias in statement.names}
    grader_names = set(answers.__all__) - {"call"} | set(SAFE_BUILTINS) | {"math"}
    is_grader = [
        not is_constant[index] and _is_check(s) and not isinstance(s, ast.Import | ast.ImportFrom)
        for index, s in enumerate(statements)
    ]
    # A statement that reads a secret constant runs in the grader too.
    for index, statement in enumerate(statements):
        if is_constant[index] or isinstance(statement, ast.Import | ast.ImportFrom):
            continue
        secrets_read = [name for name in _loaded_names(statement) if name.startswith(SECRET_PREFIXES)]
        if any(name in constants for name in secrets_read):
            is_grader[index] = True
    plain: set[str] = set()
    grader_bound: set[str] = set()
    kernel_lines: list[str] = []
    steps: list[GraderStep] = []
    used_by_kernel: set[str] = set()
    for index, statement in enumerate(statements):
        if is_constant[index]:
            continue
        segment = segment_of(statement) or ""
        if isinstance(statement, ast.Import | ast.ImportFrom):
            kernel_lines.append(segment)
            continue
        if not is_grader[index]:
            kernel_lines.append(segment)
            used_by_kernel |= _loaded_names(statement)
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
                if isinstance(target, ast.Name):
                    (plain.add if _is_plain_expression(statement.value, plain) else plain.discard)(target.id)
            else:
                plain -= _stored_names(statement)
            continue
        local = _stored_names(statement)
        needed = []
        for name in sorted(_loaded_names(statement) - local - grader_bound - set(constants) - grader_names):
            student_answer = name not in bound_in_code and name not in imported and not hasattr(builtins, name)
            if name in _called_names(statement) or not (name in plain or student_answer):
                return None  # the check needs an object that only the kernel holds
            needed.append(name)
        if any(name in grader_bound for name in used_by_kernel & local):
            return None
        step = len(steps)
        kernel_lines.append(f"_autograder_report({step}, {{{', '.join(f'{n!r}: {n}' for n in needed)}}})")
        steps.append(GraderStep(step, segment, tuple(needed)))
        grader_bound |= local
    if not steps:
        return None
    # A last, empty report says the kernel part ran to its end (a statement after the last check can fail too).
    kernel_lines.append(f"_autograder_report({len(steps)}, {{}})")
    steps.append(GraderStep(len(steps), "", ()))
    needed_constants = {name for name in constants if name in used_by_kernel}
    if any(name.startswith(SECRET_PREFIXES) for name in needed_constants):
        return None
    constant_sources = [segment_of(statements[index]) or "" for index in constants.values()]
    kernel_constants = [segment_of(statements[constants[name]]) or "" for name in sorted(needed_constants)]
    return Split("\n".join([*kernel_constants, *kernel_lines]), "\n".join(constant_sources), tuple(steps))


# ---------------------------------------------------------------------------------------------------------
# The reporter injected into the kernel, and the strict reading of what it printed
# ---------------------------------------------------------------------------------------------------------

REPORTER = '''
def _autograder_report(step, values, _marker={marker!r}):
    import json as _json
    import sys as _sys

    from autograder.student import answers as _answers

    def plain(value, path, depth=0):
        kind = type(value)
        if depth > {depth}:
            return {{{unreadable!r}: "too deeply nested"}}
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value if value == value and abs(value) != float("inf") else {{{unreadable!r}: repr(value)}}
        if kind is _answers.ExactNumber:
            return {{{exact_tag!r}: [value.name, *_answers.exact_text(value.number)]}}
        if _answers.exact_kind(value) is not None:
            return {{{exact_tag!r}: [path, *_answers.exact_text(value)]}}
        if kind in (list, tuple):
            return [plain(item, f"{{path}}[{{index}}]", depth + 1) for index, item in enumerate(value)]
        if kind in (set, frozenset):
            items = [plain(item, "an element of " + path, depth + 1) for item in value]
            return {{{set_tag!r}: sorted(items, key=repr)}}
        if kind is dict and all(type(key) is str for key in value):
            return {{key: plain(item, f"{{path}}[{{key!r}}]", depth + 1) for key, item in value.items()}}
        numpy, torch = _sys.modules.get("numpy"), _sys.modules.get("torch")
        if numpy is not None and (kind is numpy.ndarray or kind in set(numpy.sctypeDict.values())):
            return plain(value.tolist(), path, depth)
        if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
            return plain(value.detach().cpu().tolist(), path, depth)
        return {{{unreadable!r}: kind.__module__ + "." + kind.__qualname__}}

    from IPython.display import display as _display

    line = _json.dumps({{"step": step, "values": {{key: plain(item, key) for key, item in values.items()}}}})
    _display({{{mime!r}: _marker + " " + line}}, raw=True)
'''


def reporter_source(marker: str) -> str:
    """The reporter function put at the top of every split hidden section."""
    return REPORTER.format(
        marker=marker,
        depth=MAX_DEPTH,
        unreadable=_UNREADABLE_TAG,
        set_tag=_SET_TAG,
        exact_tag=_EXACT_TAG,
        mime=REPORT_MIME,
    )


def kernel_cell_source(cell_source: str, split: Split, marker: str) -> str:
    """The test cell as the kernel runs it: the visible tests, the reporter and the kernel part."""
    visible = cell_source.split(HIDDEN_BEGIN)[0]
    return f"{visible}{HIDDEN_BEGIN}\n{reporter_source(marker)}\n{split.kernel_source}\n{HIDDEN_END}\n"


def hidden_section(cell_source: str) -> str | None:
    """The code between the hidden-test markers of a cell, or None."""
    if HIDDEN_BEGIN not in cell_source or HIDDEN_END not in cell_source:
        return None
    return cell_source.split(HIDDEN_BEGIN, 1)[1].split(HIDDEN_END, 1)[0]


def _decode(value: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH + 1:
        raise ValueError("too deeply nested")
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError("a number that is not finite")
        return value
    if type(value) is list:
        return [_decode(item, depth + 1) for item in value]
    if type(value) is dict:
        if set(value) == {_SET_TAG} and type(value[_SET_TAG]) is list:
            items = [_decode(item, depth + 1) for item in value[_SET_TAG]]
            if not all(type(item) in (bool, int, float, str) for item in items):
                return unreadable("set")
            return frozenset(items)
        if set(value) == {_UNREADABLE_TAG}:
            return unreadable(str(value[_UNREADABLE_TAG]))
        if set(value) == {_EXACT_TAG}:
            return _exact(value[_EXACT_TAG])
        return {key: _decode(item, depth + 1) for key, item in value.items()}
    raise ValueError(f"a value of type {type(value).__name__}")


def _exact(fields: Any) -> answers.ReportedNumber:
    """An exact number's ``[name, kind, text]`` from a report, checked for form only (read in :func:`decide`)."""
    if not (type(fields) is list and len(fields) == 3 and all(type(field) is str for field in fields)):
        raise ValueError("an exact number that is not [name, kind, text]")
    name, kind, text = fields
    if kind not in answers.EXACT_KINDS:
        raise ValueError(f"an exact number of an unknown kind ({kind[:20]!r})")
    return answers.ReportedNumber(name[:MAX_NAME], kind, text[: answers.MAX_EXACT_TEXT + 1])


def _with_numbers_read(value: Any) -> Any:
    """``value`` with every :class:`~autograder.student.answers.ReportedNumber` read into a number, or into an
    :class:`~autograder.student.answers.UnreadableNumber` that fails any check with the reason."""
    if type(value) is answers.ReportedNumber:
        try:
            return answers.reported_number_value(value)
        except answers.AnswerError as error:
            return answers.UnreadableNumber(str(error))
    if type(value) is list:
        return [_with_numbers_read(item) for item in value]
    if type(value) is dict:
        return {key: _with_numbers_read(item) for key, item in value.items()}
    return value


def _reject_constant(text: str) -> Any:
    raise ValueError(f"{text} is not allowed")


def parse_reports(text: str, marker: str, split: Split) -> tuple[dict[int, dict[str, Any]], str | None]:
    """The values reported for each step, read from the cell's report outputs (:func:`reported_text`); and a problem, if any.

    Only lines starting with ``marker`` count; each must be the JSON of ``{"step": i, "values": {...}}`` with
    the steps in order, each once, and exactly the names that step needs. Anything else is a problem: the
    steps read before it are kept, the others are missing (their checks fail).
    """
    reports: dict[int, dict[str, Any]] = {}
    if len(text) > MAX_REPORT_CHARS:
        return reports, "the test printed more than the grader reads"
    for line in text.splitlines():
        if not line.startswith(marker + " "):
            continue
        try:
            data = json.loads(line[len(marker) + 1 :], parse_constant=_reject_constant)
            step = data["step"] if type(data) is dict and set(data) == {"step", "values"} else None
            if type(step) is not int or step != len(reports) or step >= len(split.steps):
                return reports, "the test's report is out of order"
            values = data["values"]
            if type(values) is not dict or set(values) != set(split.steps[step].names):
                return reports, "the test's report does not hold the values asked for"
            reports[step] = {name: _decode(value) for name, value in values.items()}
        except (ValueError, KeyError, RecursionError) as error:
            return reports, f"the test's report could not be read ({error})"
    return reports, None


def _grader_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {name: getattr(answers, name) for name in answers.__all__ if name != "call"}
    namespace["math"] = math
    namespace["__builtins__"] = {name: getattr(builtins, name) for name in SAFE_BUILTINS}
    return namespace


def _decide_here(
    split: Split, reports: dict[int, dict[str, Any]], kernel_error: str | None, withhold: bool = False
) -> tuple[bool, str]:
    """The grader part run in this process, with no limit: what :func:`decide` runs in its child."""
    namespace = _grader_namespace()
    try:
        exec(compile(split.constants, "<expected values>", "exec"), namespace)  # noqa: S102 (source/ is trusted)
    except Exception as error:  # noqa: BLE001
        return False, f"the grader could not load the expected values ({type(error).__name__})"
    for step in split.steps:
        if step.step not in reports:
            return False, kernel_error or "the test did not report its values"
        try:
            namespace.update({name: _with_numbers_read(value) for name, value in reports[step.step].items()})
            exec(compile(step.source, "<check>", "exec"), namespace)  # noqa: S102 (source/ is trusted)
        except answers.FormError as error:
            return False, str(error)
        except answers.AnswerError as error:
            return False, WITHHELD if withhold else str(error)
        except MemoryError:
            raise
        except Exception as error:  # noqa: BLE001 (an unreadable report is a failed check, not a crash)
            return False, f"the answer could not be checked ({type(error).__name__}: {error})"[:600]
    return True, ""


def _memory_message(memory_mb: int) -> str:
    return f"the answer could not be checked within the grader's memory limit ({memory_mb} MB)"


def _time_message(seconds: float) -> str:
    return f"the answer could not be checked within {seconds:g} seconds"


def _limit_this_process(seconds: float, memory_mb: int) -> None:
    """Address space and CPU time of the child; no core file when a limit kills it."""
    limits = {
        resource.RLIMIT_AS: memory_mb * 1024 * 1024,
        # A backstop: it ends the child should the grader die before it can kill it.
        resource.RLIMIT_CPU: math.ceil(seconds) + 1,
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in limits.items():
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, hard))


def _decide_in_child(writer, split, reports, kernel_error, seconds: float, memory_mb: int, withhold: bool) -> None:
    """The child's side: limits, the grader part, and its verdict sent back as JSON ``[passed, message]``."""
    try:
        _limit_this_process(seconds, memory_mb)
        passed, message = _decide_here(split, reports, kernel_error, withhold)
    except MemoryError:
        passed, message = False, _memory_message(memory_mb)
    except Exception as error:  # noqa: BLE001 (the grader's own failure, told as such)
        passed, message = False, f"the grader could not run its check ({type(error).__name__}: {error})"
    writer.send_bytes(json.dumps([passed, message[:MAX_MESSAGE]]).encode())  # ASCII: at most 12 bytes a character


def _verdict(data: bytes) -> tuple[bool, str] | None:
    """``(passed, message)`` from the child's JSON, or None if it is anything else."""
    try:
        verdict = json.loads(data)
    except ValueError:
        return None
    if type(verdict) is list and len(verdict) == 2 and type(verdict[0]) is bool and type(verdict[1]) is str:
        return verdict[0], verdict[1]
    return None


def _stopped_message(exitcode: int | None, seconds: float) -> str:
    """The message for a child that ended without a verdict."""
    if exitcode is None or exitcode >= 0:
        return f"the answer could not be checked: the grader's check ended without a verdict (exit code {exitcode})"
    if -exitcode == signal.SIGXCPU:
        return _time_message(seconds)
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    cause = " (the machine may have run out of memory)" if -exitcode == signal.SIGKILL else ""
    return f"the answer could not be checked: the grader's check was stopped by {name}{cause}"


def decide(
    split: Split, reports: dict[int, dict[str, Any]], kernel_error: str | None, *, withhold: bool = False,
    preload_sympy: bool = True,
) -> tuple[bool, str]:
    """Run the grader part on the reported values: (passed, message). Never raises.

    The grader part runs in a child process forked by multiprocessing's fork server, limited to
    :data:`CHECK_SECONDS` seconds of wall-clock time and :data:`CHECK_MEMORY_MB` of address space; a child
    that runs over is killed and the answer fails with a message naming the limit. Safe to call from any
    thread (the limit is a timed wait, not a signal), but not from a daemonic process, which multiprocessing
    forbids to have children (the answer then fails and the message says so).

    With ``withhold``, a wrong answer's message is :data:`WITHHELD` instead of the check's own (which may name
    the mistake, the right value or the right letter); a malformed answer keeps its message
    (:class:`autograder.student.answers.FormError`), and so does an answer the student's code failed to produce.

    ``preload_sympy``: whether the fork server, if this call starts it, imports sympy (:func:`uses_sympy` of the
    checks the process will decide tells); it changes the time a check takes, never its verdict.
    """
    try:
        return _decide_in_child_process(split, reports, kernel_error, CHECK_SECONDS, CHECK_MEMORY_MB, withhold,
                                        preload_sympy)
    except Exception as error:  # noqa: BLE001 (never raises: a grader that cannot check fails the answer)
        return False, f"the grader could not run its check ({type(error).__name__}: {error})"[:600]


def _decide_in_child_process(
    split, reports, kernel_error, seconds: float, memory_mb: int, withhold: bool = False, preload_sympy: bool = True
) -> tuple[bool, str]:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_preloaded(preload_sympy))  # read when the fork server starts: the first child
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(
        target=_decide_in_child,
        args=(writer, split, reports, kernel_error, seconds, memory_mb, withhold),
        name="autograder-check",
        daemon=True,
    )
    try:
        child.start()  # the fork server's start and imports, on the first call only, are not timed
        writer.close()  # the child holds the only writer now: its end, killed or not, is an end of file here
        if not reader.poll(seconds):
            return False, _time_message(seconds)
        try:
            verdict = _verdict(reader.recv_bytes(12 * MAX_MESSAGE + 100))
        except (EOFError, OSError):
            verdict = None
        if verdict is not None:
            return verdict
        child.join(seconds)
        return False, _stopped_message(child.exitcode, seconds)
    finally:
        _end(child, reader, writer)


def _end(child, reader, writer) -> None:
    """Kill the child if it still runs, wait for it and free its pipe and process handles."""
    for connection in (reader, writer):
        connection.close()
    if child.pid is None:
        return  # never started
    if child.exitcode is None:
        child.kill()  # past its limit, or done and on its way out: either way nothing more is read from it
    child.join()
    child.close()
