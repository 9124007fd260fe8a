"""No test asserts on elapsed wall time (STYLE.md habit 19): the machines are shared and noisy,
so a test waits for the event itself, with a generous timeout, and speed is for ``benchmarks/``.

The scan reads every module under ``tests/`` with ``ast`` and flags an ``assert`` that
compares an elapsed time: a difference of two clock readings (``time.monotonic() - started``),
a name bound to one (``took = loop.time() - asked``), a name that says so (``elapsed``,
``took``, ...), or a clock reading against an earlier one plus a margin. A deadline checked
inside a polling loop (``while ...: assert time.monotonic() < deadline``) is a timeout on a
wait, not a measure, and passes; so does a timestamp placed between two clock readings."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# Calls that read a clock: ``time.monotonic()``, ``loop.time()``, ``datetime.now(UTC)``, ...
CLOCK_ATTRIBUTES = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time_ns"}
CLOCK_FUNCTIONS = CLOCK_ATTRIBUTES | {"process_time"}
# Names that say what they hold.
ELAPSED_WORDS = {"elapsed", "took", "waited", "duration", "slowest", "answered_in", "latency"}


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in CLOCK_FUNCTIONS
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in CLOCK_ATTRIBUTES:
        return True
    if func.attr == "time" and not node.args:  # time.time(), loop.time()
        return True
    receiver = func.value
    return (
        func.attr in {"now", "utcnow"}
        and isinstance(receiver, ast.Name)
        and receiver.id == "datetime"
    )


def _operands(node: ast.AST) -> Iterator[ast.AST]:
    """The node and what it is computed from, not looking into calls' arguments or
    attributes' owners (``waited.status_code`` is a response's field, not a duration)."""
    yield node
    if isinstance(node, ast.BinOp):
        yield from _operands(node.left)
        yield from _operands(node.right)
    elif isinstance(node, ast.UnaryOp):
        yield from _operands(node.operand)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in {"max", "min", "abs", "round", "float", "int"}:
            for argument in node.args:
                yield from _operands(argument)
    elif _is_method_call(node, "total_seconds"):  # (now - started).total_seconds()
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        yield from _operands(node.func.value)


def _is_method_call(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    )


def _bindings(function: ast.AST) -> list[tuple[set[str], ast.expr]]:
    """Every ``names = value`` in the function, nested ones included."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        assert node.value is not None
        names = {name.id for t in targets for name in ast.walk(t) if isinstance(name, ast.Name)}
        found.append((names, node.value))
    return found


class _Scope:
    """What one test function binds: clock readings, and elapsed times."""

    def __init__(self, function: ast.AST) -> None:
        self.clocks: set[str] = set()
        self.elapsed: set[str] = set(ELAPSED_WORDS)
        bindings = _bindings(function)
        for _ in range(2):  # a name bound from another bound later in the text
            for names, value in bindings:
                if self.measures(value):
                    self.elapsed |= names
                elif self.reads_clock(value):
                    self.clocks |= names

    def reads_clock(self, node: ast.AST) -> bool:
        return any(
            _is_clock_call(part) or (isinstance(part, ast.Name) and part.id in self.clocks)
            for part in _operands(node)
        )

    def measures(self, node: ast.AST) -> bool:
        """An elapsed time: a clock reading minus another, or a name holding one."""
        for part in _operands(node):
            if isinstance(part, ast.Name) and part.id in self.elapsed:
                return True
            if (
                isinstance(part, ast.BinOp)
                and isinstance(part.op, ast.Sub)
                and self.reads_clock(part.left)
                and self.reads_clock(part.right)
            ):
                return True
        return False

    def offset_clock(self, node: ast.AST) -> bool:
        """An earlier reading plus a margin, written in the comparison (``started + 0.5``)."""
        return (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add | ast.Sub)
            and self.reads_clock(node)
        )


def _times_a_comparison(compare: ast.Compare, scope: _Scope, polling: bool) -> bool:
    sides = [compare.left, *compare.comparators]
    if any(scope.measures(side) for side in sides):
        return True
    for left, right in itertools.pairwise(sides):
        both_clocks = scope.reads_clock(left) and scope.reads_clock(right)
        offset = scope.offset_clock(left) or scope.offset_clock(right)
        # ``now < started + 0.5`` anywhere, ``now < deadline`` outside a polling loop.
        if both_clocks and (offset or not polling):
            return True
    return False


class _Finder(ast.NodeVisitor):
    """Walks a module once, knowing the outermost function and whether a loop of the current
    function surrounds the node."""

    def __init__(self, module: ast.Module, filename: str) -> None:
        self.module, self.filename = module, filename
        self.function: ast.AST | None = None
        self.scope: _Scope | None = None  # built at the function's first assert
        self.loops = 0
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = self.function, self.scope, self.loops
        if self.function is None:
            self.function, self.scope = node, None
        self.loops = 0  # a nested function's body is not polled by the loop around it
        self.generic_visit(node)
        self.function, self.scope, self.loops = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_loop(self, node: ast.While | ast.For | ast.AsyncFor) -> None:
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    visit_While = visit_For = visit_AsyncFor = visit_loop

    def visit_Assert(self, node: ast.Assert) -> None:
        if self.scope is None:
            self.scope = _Scope(self.function or self.module)
        comparisons = [part for part in ast.walk(node.test) if isinstance(part, ast.Compare)]
        polling = self.loops > 0
        if any(_times_a_comparison(compare, self.scope, polling) for compare in comparisons):
            self.found.append(f"{self.filename}:{node.lineno}")


def wall_clock_assertions(source: str, filename: str = "<sample>") -> list[str]:
    """``file:line`` of every assert in ``source`` that compares an elapsed wall time."""
    finder = _Finder(ast.parse(source, filename), filename)
    finder.visit(finder.module)
    return finder.found


def test_no_test_asserts_on_elapsed_wall_time() -> None:
    found = [
        hit
        for path in sorted(TESTS.rglob("*.py"))
        for hit in wall_clock_assertions(path.read_text(), str(path.relative_to(TESTS.parent)))
    ]
    assert found == [], "wait for the event instead (STYLE.md habit 19): " + ", ".join(found)


CAUGHT = {
    "a difference in the assert": """
def test_it():
    started = time.monotonic()
    work()
    assert time.monotonic() - started < 0.25
""",
    "a name bound to a difference": """
async def test_it():
    asked = asyncio.get_running_loop().time()
    await work()
    took = asyncio.get_running_loop().time() - asked
    assert took < 5, took
""",
    "the slowest of several": """
def test_it():
    slowest = 0.0
    for _ in range(3):
        started = time.perf_counter()
        work()
        slowest = max(slowest, time.perf_counter() - started)
    assert slowest < 2.0
""",
    "a lower bound": """
def test_it():
    started = time.time()
    work()
    assert 0.5 <= time.time() - started
""",
    "a name that says so": """
def test_it(elapsed):
    assert elapsed < 1
""",
    "a margin in the comparison": """
def test_it():
    started = monotonic()
    work()
    assert monotonic() < started + 0.5
""",
    "a deadline checked once, not polled": """
def test_it():
    deadline = time.monotonic() + 0.5
    work()
    assert time.monotonic() < deadline
""",
    "datetimes": """
def test_it():
    started = datetime.now(UTC)
    work()
    assert (datetime.now(UTC) - started).total_seconds() < 1
""",
    "inside a helper of the test": """
def test_it():
    def check():
        started = time.monotonic()
        work()
        assert time.monotonic() - started < 1
    check()
""",
}

PASSED = {
    "a deadline in a polling loop": """
def test_it():
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "never done"
        time.sleep(0.1)
""",
    "a timestamp between two readings": """
def test_it():
    before = time.time()
    expires = issue()
    assert before + 590 < expires < time.time() + 610
""",
    "a response that waited": """
def test_it():
    waited = get()
    assert waited.status_code == 200
""",
    "a fake clock's arithmetic": """
def test_it():
    clock.now += timedelta(seconds=6)
    assert store.available_at == clock.now + timedelta(seconds=0.5)
""",
    "a timeout on a wait": """
async def test_it():
    answer = await asyncio.wait_for(work(), 30)
    assert answer.ok
""",
}


@pytest.mark.parametrize("source", CAUGHT.values(), ids=CAUGHT.keys())
def test_the_scan_catches_an_elapsed_time_assertion(source: str) -> None:
    assert wall_clock_assertions(source) != []


@pytest.mark.parametrize("source", PASSED.values(), ids=PASSED.keys())
def test_the_scan_lets_timeouts_and_timestamps_pass(source: str) -> None:
    assert wall_clock_assertions(source) == []
