r"""Answer coercion and comparison for the hidden tests of ``autograder/source``.

A hidden test runs in the same kernel as the student's code, so it never compares a student's object directly:
an object can override ``__eq__``, ``__sub__``, ``__abs__`` or ``__float__`` and pass any comparison. Every
answer is first turned into plain Python values (``int``, ``float``, ``str``, ``bool`` and lists of them) by
functions that look at the *exact* type of the object and call only methods of types they know: the built-in
scalars and containers, numpy's real scalars and arrays, and torch tensors. Anything else (a subclass of
``float`` or ``str`` included) is rejected with a message that says what was expected.

The expected values are constants written in the hidden tests; nothing here computes an answer. A check
raises :class:`AnswerError` (an ``AssertionError``, so nbgrader counts the test as failed) whose message is
the feedback the student reads: which answer, which entries, and, when the answer matches a known mistake
(degrees instead of radians, sin and cos swapped, ...), the name of that mistake.

Symbolic answers are strings such as ``"sin(3*10000**(-1/4))"``. ``sympy.parse_expr`` evaluates its input as
Python code, so it is never called on a student's string: :func:`parse_expression` reads the string with
``ast`` and builds the sympy expression node by node from a whitelist (numbers, ``+ - * / ** ^``, parentheses,
``pi``, ``sin``, ``cos``, ``sqrt``, ``Rational``, ``Integer``), with limits on the length, the number of
nodes, the depth of nested calls, the exponents and the size of every intermediate number, so that no string
can run code or exhaust memory, and sympy's simplification stays quick on what can be written.

Exact numbers (``fractions.Fraction``, ``decimal.Decimal`` and sympy numbers such as ``Rational(3, 4)`` or
``sin(1)``) are accepted wherever a float is, but never turned into floats in the kernel, where the student's
code could change how that happens. A coercion wraps each one in an :class:`ExactNumber` that keeps the name
of the entry; the kernel reports it as text (:func:`exact_text`); the grader reads that text strictly into a
:class:`ReportedNumber` and turns it into a float or an int with :func:`reported_number_value`, which rejects
a number that is not finite or not real with a message naming the entry.

These limits are checked before the work they protect, and are cheap. They do not bound every computation a
check can make (sympy's ``simplify`` has no time limit of its own): :func:`autograder.verdict.decide` runs the
checks in a child process under a wall-clock and a memory limit.
"""

from __future__ import annotations

import ast
import decimal
import fractions
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AnswerError",
    "ExactNumber",
    "FormError",
    "ReportedNumber",
    "UnreadableNumber",
    "as_bool",
    "as_choice",
    "as_integer",
    "as_nested",
    "as_number",
    "as_numbers",
    "as_table",
    "as_text",
    "as_text_set",
    "call",
    "check_close",
    "check_expressions",
    "exact_kind",
    "exact_text",
    "parse_expression",
    "reported_number_value",
    "rounded_from",
    "same_value",
]


class AnswerError(AssertionError):
    """A wrong or malformed answer; the message is the feedback the student reads.

    Raised as such, it is a verdict on the answer's value (a named mistake, a wrong entry, the explanation of a
    quiz), which may say what the right answer is: ``grade --withhold-answers`` replaces its message. A malformed
    answer raises the subclass :class:`FormError`."""


class FormError(AnswerError):
    """An answer of the wrong form (its type, its length or shape, a value that is not finite, an expression
    the grader cannot read): the message says what is asked for, never what is right, and is always shown."""


# --------------------------------------------------------------------------------------------------------
# Plain values from the student's objects
# --------------------------------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _numpy_real_scalar_types() -> frozenset[type]:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return frozenset()
    names = (
        "float16",
        "float32",
        "float64",
        "longdouble",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
    )
    return frozenset(getattr(numpy, name) for name in names if hasattr(numpy, name))


def _torch_tensor_types() -> tuple[type, ...]:
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    return (torch.Tensor, torch.nn.Parameter)


def _numpy_array_type() -> type | None:
    numpy = sys.modules.get("numpy")
    return None if numpy is None else numpy.ndarray


_ALLOWED_NUMBERS = (
    "a plain number (int, float, fractions.Fraction, decimal.Decimal or a sympy number), a numpy number, "
    "a list or tuple of numbers, a numpy array or a torch tensor"
)


# --------------------------------------------------------------------------------------------------------
# Exact numbers: wrapped in the kernel, reported as text, read in the grader
# --------------------------------------------------------------------------------------------------------

EXACT_KINDS = ("fraction", "decimal", "sympy")
MAX_EXACT_TEXT = 1000  # characters of an exact number's text that the grader reads


def exact_kind(value: Any) -> str | None:
    """``"fraction"``, ``"decimal"`` or ``"sympy"`` for an exact number of those exact types, else None.

    A sympy number is an instance of ``sympy.Expr`` whose class is sympy's own (``Integer``, ``Rational``,
    ``Float``, ``sin``, ``Mul``, ...); whether it has a real, finite value is decided by the grader.
    """
    kind = type(value)
    if kind is fractions.Fraction:
        return "fraction"
    if kind is decimal.Decimal:
        return "decimal"
    sympy = sys.modules.get("sympy")
    if sympy is not None and kind.__module__.startswith("sympy.") and isinstance(value, sympy.Expr):
        return "sympy"
    return None


@dataclass(frozen=True)
class ExactNumber:
    """An exact number met by a coercion in the kernel, with the name of its entry (``pe_d4_at_p[2]``)."""

    name: str
    number: Any


def exact_text(value: Any) -> tuple[str, str]:
    """``(kind, text)`` of an exact number, as the kernel reports it: ``"3/4"``, ``"0.5"``, ``"sin(1)"``.

    The text is cut after :data:`MAX_EXACT_TEXT` characters (the grader refuses longer ones), and a fraction
    whose terms have more than :data:`MAX_DIGITS` digits is not written out at all.
    """
    kind = exact_kind(value)
    if kind == "fraction":
        bits = max(abs(value.numerator).bit_length(), value.denominator.bit_length())
        if bits > (MAX_DIGITS + 1) * _BITS_PER_DIGIT:
            return kind, "x" * (MAX_EXACT_TEXT + 1)
        return kind, f"{value.numerator}/{value.denominator}"
    if kind is None:
        raise TypeError(f"not an exact number: {_type_name(value)}")
    return kind, str(value)[: MAX_EXACT_TEXT + 1]


@dataclass(frozen=True)
class ReportedNumber:
    """An exact number as the grader reads it from the kernel's report: its entry's name, kind and text."""

    name: str
    kind: str
    text: str


class UnreadableNumber:
    """A reported exact number that is not a finite real number; every use of it fails with ``message``."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __float__(self) -> float:
        raise FormError(self.message)

    def __repr__(self) -> str:
        return f"<{self.message}>"


_DECIMAL = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:E[+-]?[0-9]{1,12})?")
_NOT_FINITE_SYMPY = frozenset({"oo", "-oo", "zoo", "nan"})


def _finite(number: float, reported: ReportedNumber) -> float:
    if not math.isfinite(number):
        raise FormError(f"{reported.name} is {reported.text}, which is not a finite number")
    return number


def reported_number_value(reported: ReportedNumber) -> int | float:
    """The value of an exact number reported by the kernel: an int when it is a whole number written exactly
    (``12/1``, ``Integer(12)``, ``Decimal("12")``), a float otherwise. Runs in the grader.

    Raises:
        AnswerError, naming the entry: the text is not a number of its kind, is too long, or its value is not
            finite or not real.
    """
    name, kind, text = reported.name, reported.kind, reported.text
    if len(text) > MAX_EXACT_TEXT:
        raise FormError(f"{name} is a {kind} number written with more than {MAX_EXACT_TEXT} characters")
    if kind == "fraction":
        match = re.fullmatch(rf"(-?[0-9]{{1,{MAX_DIGITS}}})/([0-9]{{1,{MAX_DIGITS}}})", text)
        if match is None or int(match[2]) == 0:
            raise FormError(f"{name} is a fraction the grader cannot read ({text[:40]!r})")
        value = fractions.Fraction(int(match[1]), int(match[2]))
        if value.denominator == 1:
            return int(value)
        try:
            return _finite(float(value), reported)
        except OverflowError:
            raise FormError(f"{name} is a fraction too large for a float") from None
    if kind == "decimal":
        if _DECIMAL.fullmatch(text) is None:
            raise FormError(f"{name} is Decimal({text[:40]!r}), which is not a finite number")
        value = decimal.Decimal(text)
        if "." not in text and "E" not in text:
            return int(value)
        return _finite(float(value), reported)
    if kind == "sympy":
        if text in _NOT_FINITE_SYMPY:
            raise FormError(f"{name} is the sympy value {text}, which is not a finite number")
        if re.search(r"\bI\b", text):
            raise FormError(f"{name} is {text}, which is not a real number")
        expression = parse_expression(text, name)
        if expression.is_Integer:
            return int(expression)
        value = _sympy().N(expression, 30)
        if not value.is_real:
            raise FormError(f"{name} is {text}, which is not a real number")
        return _finite(float(value), reported)
    raise FormError(f"{name} is a number of an unknown kind")


def _plain(value: Any, name: str) -> Any:
    """``value`` as an int, a float or nested lists of them; only exact, known types are read."""
    kind = type(value)
    if kind is bool:
        raise FormError(f"{name} is the bool {value}; give a number")
    if kind is int:
        return value
    if kind is float:
        return value
    if kind is complex:
        raise FormError(f"{name} is the complex number {value}; give a real number")
    if kind is UnreadableNumber:
        raise FormError(value.message)
    if exact_kind(value) is not None:
        return ExactNumber(name, value)
    if kind in _numpy_real_scalar_types():
        return int(value) if value.dtype.kind in "iu" else float(value)
    if kind is list or kind is tuple:
        return [_plain(item, f"{name}[{index}]") for index, item in enumerate(value)]
    if kind is _numpy_array_type():
        if value.dtype.kind not in "fiu":
            raise FormError(f"{name} is a numpy array of dtype {value.dtype}; give real numbers")
        return value.tolist()
    if kind in _torch_tensor_types():
        if value.is_complex() or value.dtype is sys.modules["torch"].bool:
            raise FormError(f"{name} is a tensor of dtype {value.dtype}; give real numbers")
        return value.detach().cpu().tolist()
    raise FormError(f"{name} is an object of type {_type_name(value)}; expected {_ALLOWED_NUMBERS}")


def _shape(value: Any) -> tuple[int, ...]:
    """The shape of nested lists, or raise if they are ragged."""
    if type(value) is not list:
        return ()
    shapes = {_shape(item) for item in value}
    if len(shapes) > 1:
        raise FormError("the answer is a ragged list (rows of different lengths)")
    return (len(value), *(shapes.pop() if shapes else ()))


def _check_finite(values: Any, name: str) -> None:
    for item in _flatten(values):
        if type(item) is not ExactNumber and not math.isfinite(item):
            raise FormError(f"{name} contains {item}; every entry must be a finite number")


def _flatten(values: Any) -> list[float]:
    if type(values) is list:
        return [item for value in values for item in _flatten(value)]
    return [values]


MAX_ENTRIES = 4 * 1024 * 1024  # the largest answer asked for is a table of 2048 x 512 numbers


def _too_many_entries(value: Any, limit: int) -> str | None:
    """How many entries an answer has (``"more than 100000"``) if it has more than ``limit``, else None.

    A nested list's entries are its numbers and its lists. Counting stops soon after ``limit``, so that the
    count costs less than reading the answer.
    """
    kind = type(value)
    if kind is _numpy_array_type() or kind in _torch_tensor_types():
        size = value.size if kind is _numpy_array_type() else value.numel()
        return str(size) if size > limit else None
    count, pending = 0, [value]
    while pending and count <= limit:
        item = pending.pop()
        count += 1  # the lists too: nesting is not free, and a list that holds itself is counted to the limit
        if type(item) is list or type(item) is tuple:
            pending.extend(item)
    return f"more than {limit}" if count > limit else None


def as_nested(value: Any, name: str, shape: Sequence[int]) -> Any:
    """``value`` as nested lists of plain numbers with exactly ``shape`` (``()`` for a scalar).

    Raises:
        AnswerError: ``value`` is not made of the known number types, has another shape, holds a number that
            is not finite, or has more than :data:`MAX_ENTRIES` entries (refused before it is read).
    """
    entries = _too_many_entries(value, MAX_ENTRIES)
    if entries is not None:
        raise FormError(f"{name} has {entries} entries; at most {MAX_ENTRIES} are read")
    plain = _plain(value, name)
    actual = _shape(plain)
    if actual != tuple(shape):
        raise FormError(f"{name} has shape {actual}, but shape {tuple(shape)} is asked for")
    _check_finite(plain, name)
    return plain


def _real(value: Any) -> Any:
    """A plain number as a float; an :class:`ExactNumber` stays as it is, for the grader to read."""
    return value if type(value) is ExactNumber else float(value)


def as_number(value: Any, name: str) -> float:
    """A real scalar as a Python float: an int, a float, a numpy number or a 0-d tensor or array (an exact
    number becomes an :class:`ExactNumber`, read by the grader)."""
    return _real(as_nested(value, name, ()))


def as_integer(value: Any, name: str) -> int:
    """A whole number as a Python int; a float with an integral value (``393216.0``) is accepted."""
    number = as_nested(value, name, ())
    if type(number) is float:
        if not number.is_integer():
            raise FormError(f"{name} is {number}, which is not a whole number")
        return int(number)
    return number


def as_numbers(value: Any, name: str, length: int) -> list[float]:
    """A vector of ``length`` real numbers as a list of Python floats."""
    return [_real(item) for item in as_nested(value, name, (length,))]


def as_table(value: Any, name: str, shape: tuple[int, int]) -> list[list[float]]:
    """A matrix of the given shape as a list of rows of Python floats."""
    return [[_real(item) for item in row] for row in as_nested(value, name, shape)]


def as_text(value: Any, name: str) -> str:
    """A string (exactly ``str``, not a subclass), returned as a new plain ``str``."""
    if type(value) is not str:
        raise FormError(f"{name} is an object of type {_type_name(value)}; expected a string (str)")
    return str.__str__(value)


def as_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """One of ``choices``, compared after stripping spaces and ignoring case; returns the canonical choice."""
    text = as_text(value, name).strip()
    by_key = {choice.lower(): choice for choice in choices}
    if text.lower() not in by_key:
        allowed = ", ".join(repr(choice) for choice in by_key.values())
        raise FormError(f"{name} is {text!r}; answer with one of {allowed}")
    return by_key[text.lower()]


def as_text_set(value: Any, name: str, choices: Iterable[str]) -> frozenset[str]:
    """A set of choices given as a set, frozenset, list or tuple of strings (case and spaces ignored)."""
    if type(value) not in (set, frozenset, list, tuple):
        raise FormError(f"{name} is an object of type {_type_name(value)}; expected a set of strings")
    choices = tuple(choices)
    return frozenset(as_choice(item, f"an element of {name}", choices) for item in list(value))


def as_bool(value: Any, name: str) -> bool:
    """``True`` or ``False`` (exactly ``bool``)."""
    if type(value) is not bool:
        raise FormError(f"{name} is an object of type {_type_name(value)}; expected True or False")
    return value is True


def call(function: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the student's function; an exception becomes an AnswerError that names the call."""
    if not callable(function):
        raise FormError(f"{name} is not a function (got an object of type {_type_name(function)})")
    try:
        return function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 (the student's code may raise anything; the feedback names it)
        shown = ", ".join(
            [*(_short(arg) for arg in args), *(f"{key}={_short(v)}" for key, v in kwargs.items())]
        )
        raise FormError(f"{name}({shown}) raised {type(error).__name__}: {error}") from None


def _short(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and type(shape) is not int:
        return f"<{_type_name(value)} of shape {tuple(shape)}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------------------------------------
# Numeric comparison with named mistakes
# --------------------------------------------------------------------------------------------------------


def _all_close(values: list[float], expected: Sequence[float], atol: float) -> bool:
    return len(values) == len(expected) and all(abs(a - b) <= atol for a, b in zip(values, expected))


def check_close(
    values: Any,
    expected: Sequence[float],
    *,
    atol: float,
    name: str,
    mistakes: Iterable[tuple[str, Sequence[float]]] = (),
) -> None:
    """Pass if every entry of ``values`` is within ``atol`` of ``expected``; otherwise raise AnswerError.

    ``values`` are plain numbers (from the ``as_*`` functions), flat or nested; ``expected`` and each
    mistake's values are flat sequences of the same length. When the answer is not right but matches a
    mistake within ``atol``, the message is that mistake's description; otherwise it names the wrong entries.
    """
    flat = [float(value) for value in _flatten(values)] if type(values) is list else [float(values)]
    expected = [float(value) for value in expected]
    if len(flat) != len(expected):
        raise FormError(f"{name} has {len(flat)} values, {len(expected)} are asked for")
    if _all_close(flat, expected, atol):
        return
    for description, wrong in mistakes:
        if _all_close(flat, [float(value) for value in wrong], atol):
            raise AnswerError(f"{name}: {description}")
    wrong_entries = [index for index, (a, b) in enumerate(zip(flat, expected)) if abs(a - b) > atol]
    first = wrong_entries[0]
    raise AnswerError(
        f"{name}: {len(wrong_entries)} of {len(flat)} values are wrong (tolerance {atol:g}); the first is "
        f"entry {first}: got {flat[first]:.6g}, expected {expected[first]:.6g}"
    )


# --------------------------------------------------------------------------------------------------------
# Symbolic answers
# --------------------------------------------------------------------------------------------------------

MAX_EXPRESSION_LENGTH = 200
MAX_EXPRESSION_NODES = 80
MAX_EXPONENT = 64
MAX_DENOMINATOR = 1000
MAX_DIGITS = 400
EQUAL_DIGITS = 400  # significant digits of a difference that simplify did not reduce to 0 (same_value)
EQUAL_EXPONENT = 300  # below 10**-300 it is 0: no expression of MAX_EXPRESSION_LENGTH characters comes so close
COMPUTED_EXPONENT = 20  # closer than 10**-20 but not equal: a value computed to many digits, not an expression
MAX_CALL_DEPTH = 4  # sin(sqrt(...)) needs 2; sympy's simplify grows exponentially with this depth
_BITS_PER_DIGIT = math.log2(10)
_ALLOWED_SYMBOLS = "numbers, + - * / ** ^, parentheses, pi, sin, cos, sqrt, Rational and Integer"


def _sympy():
    import sympy

    return sympy


def _digits(number: Any) -> int:
    """Decimal digits of the larger of the numerator and denominator of a sympy Rational.

    Above ``MAX_DIGITS`` the count is a lower bound from the bit length: writing out a number of 10^5 digits
    in decimal takes long (and Python refuses beyond 4300 digits).
    """
    bits = max(abs(number.p).bit_length(), number.q.bit_length())
    if bits > (MAX_DIGITS + 1) * _BITS_PER_DIGIT:
        return int((bits - 1) / _BITS_PER_DIGIT) + 1
    return max(len(str(abs(number.p))), len(str(number.q)))


def _bounded(result: Any, text: str, name: str) -> Any:
    if result.is_Rational and _digits(result) > MAX_DIGITS:
        raise FormError(f"{name}: {text!r} produces a number with more than {MAX_DIGITS} digits")
    return result


def _literal(node: ast.Constant, source: str, text: str, name: str) -> Any:
    sympy = _sympy()
    value = node.value
    if type(value) is int:
        if len(str(abs(value))) > 30:
            raise FormError(f"{name}: the number {value} in {text!r} is too long")
        return sympy.Integer(value)
    if type(value) is float:
        if not math.isfinite(value):
            raise FormError(f"{name}: {text!r} contains a number that is not finite")
        written = ast.get_source_segment(source, node)
        # 1e-999999999 is a finite float (0.0), but as an exact fraction its denominator has 10^9 digits.
        digits, exponent = decimal.Decimal(written.replace("_", "")).as_tuple()[1:]
        size = len(digits) + exponent if exponent >= 0 else 1 - exponent
        if size > MAX_DIGITS:
            raise FormError(
                f"{name}: the number {written} in {text!r} is a fraction of {size} digits; at most "
                f"{MAX_DIGITS} are allowed"
            )
        # The decimal as written, exactly: 0.479426 stays 239713/500000 and is not mistaken for sin(1/2).
        return sympy.Rational(written)
    raise FormError(f"{name}: {text!r} may contain only {_ALLOWED_SYMBOLS}")


def _power(base: Any, exponent: Any, text: str, name: str) -> Any:
    sympy = _sympy()
    if not exponent.is_number:
        raise FormError(f"{name}: the exponent in {text!r} is not a number")
    if exponent.is_Rational:
        if abs(exponent) > MAX_EXPONENT or exponent.q > MAX_DENOMINATOR:
            raise FormError(f"{name}: the exponent {exponent} in {text!r} is too large")
    elif not abs(sympy.N(exponent, 15)) <= MAX_EXPONENT:
        raise FormError(f"{name}: an exponent in {text!r} is too large")
    return _bounded(sympy.Pow(base, exponent), text, name)


def _call(node: ast.Call, build, text: str, name: str) -> Any:
    sympy = _sympy()
    functions = {"sin": sympy.sin, "cos": sympy.cos, "sqrt": sympy.sqrt}
    if type(node.func) is not ast.Name or node.keywords:
        raise FormError(f"{name}: {text!r} may contain only {_ALLOWED_SYMBOLS}")
    function = node.func.id
    if function in functions and len(node.args) == 1:
        return functions[function](build(node.args[0]))
    if function in ("Rational", "Integer"):
        arguments = [build(argument) for argument in node.args]
        if not 1 <= len(arguments) <= (2 if function == "Rational" else 1) or not all(
            argument.is_Integer for argument in arguments
        ):
            raise FormError(f"{name}: {function}(...) in {text!r} takes whole numbers only")
        if function == "Rational" and len(arguments) == 2 and arguments[1] == 0:
            raise FormError(f"{name}: {text!r} divides by zero")
        return sympy.Rational(*arguments)
    raise FormError(
        f"{name}: {text!r} calls {function}; only sin, cos, sqrt, Rational and Integer are allowed"
    )


def _call_depth(node: ast.AST) -> int:
    """How many calls are nested inside each other in ``node`` (``sin(sqrt(2)) + cos(1)`` has 2)."""
    inner = max((_call_depth(child) for child in ast.iter_child_nodes(node)), default=0)
    return inner + (type(node) is ast.Call)


def parse_expression(value: Any, name: str = "expression") -> Any:
    """Build the sympy expression written in the string ``value``, from a whitelist; never evaluates code.

    ``^`` means a power, as in ``10000^(2/6)``. Decimals are read exactly as written (``0.5`` is 1/2).

    Raises:
        AnswerError: ``value`` is not a str, is too long, is not a valid expression, nests more than
            :data:`MAX_CALL_DEPTH` calls, uses anything outside the whitelist (names, attributes, indexing,
            strings, keywords, ...), or produces numbers or exponents beyond the limits of this module.
    """
    sympy = _sympy()
    text = as_text(value, name)
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise FormError(
            f"{name} is {len(text)} characters long; at most {MAX_EXPRESSION_LENGTH} are allowed"
        )
    source = text.strip().replace("^", "**")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise FormError(f"{name}: {text!r} is not a valid expression") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_EXPRESSION_NODES:
        raise FormError(
            f"{name}: {text!r} is too long an expression ({nodes} syntax nodes; at most "
            f"{MAX_EXPRESSION_NODES} are allowed)"
        )
    depth = _call_depth(tree)
    if depth > MAX_CALL_DEPTH:
        raise FormError(
            f"{name}: {text!r} nests {depth} function calls inside each other; at most {MAX_CALL_DEPTH} are "
            "allowed"
        )
    operators = {ast.Add: sympy.Add, ast.Mult: sympy.Mul}

    def build(node: ast.AST) -> Any:
        kind = type(node)
        if kind is ast.Constant:
            return _literal(node, source, text, name)
        if kind is ast.Name and node.id == "pi":
            return sympy.pi
        if kind is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
            operand = build(node.operand)
            return -operand if type(node.op) is ast.USub else operand
        if kind is ast.BinOp:
            left, right = build(node.left), build(node.right)
            operator = type(node.op)
            if operator in operators:
                return _bounded(operators[operator](left, right), text, name)
            if operator is ast.Sub:
                return _bounded(sympy.Add(left, -right), text, name)
            if operator is ast.Div:
                if right == 0:
                    raise FormError(f"{name}: {text!r} divides by zero")
                return _bounded(sympy.Mul(left, sympy.Pow(right, -1)), text, name)
            if operator is ast.Pow:
                return _power(left, right, text, name)
        if kind is ast.Call:
            return _call(node, build, text, name)
        raise FormError(f"{name}: {text!r} may contain only {_ALLOWED_SYMBOLS}")

    expression = build(tree.body)
    if expression.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise FormError(f"{name}: {text!r} is not a finite number")
    return expression


def same_value(first: Any, second: Any) -> bool:
    """Whether two constant sympy expressions are equal.

    sympy's simplification decides the cases met here (``sin(3/10000**(1/4))`` against
    ``sin(3*10**(-1))``, ``cos(pi/2 - 1/2)`` against ``sin(1/2)``). When it cannot reduce the difference to 0,
    the difference is evaluated to :data:`EQUAL_DIGITS` significant digits and counts as zero below
    ``10**-EQUAL_EXPONENT``. An expression of :data:`MAX_EXPRESSION_LENGTH` characters holds at most that many
    digits, and a value computed to ``k`` digits is about ``10**-k`` off: so a value computed to many digits,
    however it is written (one long decimal, integers over powers of ten, a sum of short decimals), is never
    taken for the expression. What does come that close holds the expression itself, with a term below the
    floor added on purpose (``sin(1/2) + (10**30)**(-11 - sqrt(2))``): its author knew the answer.
    """
    sympy = _sympy()
    difference = first - second
    if difference == 0 or sympy.simplify(difference) == 0:
        return True
    return bool(abs(sympy.N(difference, EQUAL_DIGITS)) < sympy.Rational(1, 10**EQUAL_EXPONENT))


def check_expressions(
    values: Any,
    expected: Sequence[str],
    *,
    name: str,
    mistakes: Iterable[tuple[str, Sequence[str]]] = (),
) -> None:
    """Pass if ``values`` is a list of strings whose expressions equal the ``expected`` ones, entry by entry.

    ``expected`` and the mistakes are written as strings in the hidden test and read with the same parser.
    A wrong answer that equals a mistake's expressions gets that mistake's description; otherwise the message
    names the wrong entries. An entry written as a plain decimal that agrees with the right value to the digits
    it gives (:func:`rounded_from`) is told to be written exactly; any other wrong entry is told it is wrong,
    with the value it evaluates to (never the right one): an expression whose value is merely close, such as
    ``cos(3/100)`` for ``cos(3/10000^(1/3))``, is a wrong expression, not a rounded one. An entry within
    ``10**-COMPUTED_EXPONENT`` of the right value that is not equal to it (a value computed to many digits,
    however written: :func:`same_value`) is told to be written exactly too.
    """
    sympy = _sympy()
    if type(values) not in (list, tuple):
        raise FormError(f"{name} is an object of type {_type_name(values)}; expected a list of strings")
    if len(values) != len(expected):
        raise FormError(f"{name} has {len(values)} entries, {len(expected)} are asked for")
    answers = [parse_expression(value, f"{name}[{index}]") for index, value in enumerate(list(values))]
    targets = [parse_expression(text, "expected") for text in expected]
    wrong = [
        index
        for index, (answer, target) in enumerate(zip(answers, targets))
        if not same_value(answer, target)
    ]
    if not wrong:
        return
    for description, mistake in mistakes:
        if all(
            same_value(answer, parse_expression(text, "mistake")) for answer, text in zip(answers, mistake)
        ):
            raise AnswerError(f"{name}: {description}")
    notes = []
    for index in wrong:
        text, answer = values[index], answers[index]
        # a value computed to many digits, in any form: closer than any slip of an expression comes
        close = abs(sympy.N(answer - targets[index], 60)) < sympy.Rational(1, 10**COMPUTED_EXPONENT)
        if close or rounded_from(text, targets[index]):
            gap = abs(sympy.N(answer - targets[index], 20))
            notes.append(
                f"entry {index} ({text!r}) is numerically close to the right value (it differs by "
                f"{float(gap):.1e}) but not equal to it: write the exact expression, not a rounded number"
            )
        else:
            notes.append(f"entry {index} ({text!r}) is wrong: it evaluates to {_shown(answer)}")
    raise AnswerError(f"{name}: " + "; ".join(notes))


_PLAIN_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def rounded_from(text: str, exact: Any) -> bool:
    """Whether ``text`` is a plain decimal number (digits, a point, a sign, an exponent: no operator and no
    function) whose digits are those of the sympy number ``exact``, rounded or cut at its last digit: with
    ``u`` one unit of that digit and ``d = exact - text``, ``|d| <= u/2``, or ``|d| < u`` with ``d`` of the
    sign of ``text`` (``"0.4794"`` and ``"0.479"`` for sin(1/2) = 0.479426, but neither ``"0.4795"`` nor
    ``"0.5794"``)."""
    sympy = _sympy()
    if type(text) is not str or _PLAIN_DECIMAL.fullmatch(written := text.strip()) is None:
        return False
    unit = sympy.Rational(10) ** decimal.Decimal(written).as_tuple().exponent  # "0.4794" -> 1/10000
    number = sympy.Rational(written)
    difference = sympy.N(exact - number, 30)
    return bool(abs(difference) <= unit / 2 or (abs(difference) < unit and difference * number >= 0))


def _shown(number: Any) -> str:
    """A sympy number in ten significant digits, as a student reads it (``0.9995500337``, ``-0.5``): enough to
    tell apart the values of expressions that differ in the fourth decimal of an exponent."""
    value = _sympy().N(number, 10)
    as_float = float(value)
    return f"{as_float:.10g}" if math.isfinite(as_float) and (as_float != 0 or value == 0) else str(value)
