"""Import rules, read from the source with ``ast`` (nothing is imported):

1. the pure core (``jobrelay.core``) imports no I/O library;
2. an adapter (``jobrelay.db``, ``jobrelay.broker``) imports no service package;
3. jobrelay's modules import one another without a cycle, counting the imports inside
   functions too (a lazy import is still a dependency);
4. the arrows between services run one way (``ONE_WAY``): the API includes the console's
   routes, so the console imports nothing of the API (what both need lives below them:
   ``core/pages.py``, ``jobrelay/auth.py``).

Each rule has a negative test on a made-up source, so that a checker that finds nothing
cannot pass unnoticed.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "services" / "jobrelay"

IO_LIBRARIES = frozenset(
    {
        "sqlalchemy",
        "psycopg",
        "aio_pika",
        "aiormq",
        "fastapi",
        "starlette",
        "uvicorn",
        "httpx",
        "prometheus_client",
        "asyncpg",
        "pika",
        "requests",
        "socket",
        "urllib.request",
        "uvloop",
        "alembic",
        "opentelemetry",
        "jinja2",
    }
)
ADAPTERS = ("jobrelay.db", "jobrelay.broker")
SERVICES = (
    "jobrelay.api",
    "jobrelay.dispatcher",
    "jobrelay.consumer",
    "jobrelay.cli",
    "jobrelay.console",
    "jobrelay.operations",
)

# Service -> the services it must not import: each pair's arrow runs the other way only.
ONE_WAY: Mapping[str, tuple[str, ...]] = {"jobrelay.console": ("jobrelay.api",)}

# Groups of modules that import one another, known and accepted: each a frozenset of the
# modules of the group (none today).
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


# --- reading the source -------------------------------------------------------------------------


def sources(root: Path = SOURCE) -> dict[str, str]:
    """Module name -> source text, for every ``.py`` file of the package."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path.read_text()
    return found


def _is_package(module: str, modules: Iterable[str]) -> bool:
    prefix = module + "."
    return any(other.startswith(prefix) for other in modules)


def imported_names(module: str, source: str, *, is_package: bool = False) -> set[str]:
    """Every dotted name a module imports, anywhere in it (functions included), with relative
    imports resolved; ``from a import b`` gives both ``a`` and ``a.b`` (``b`` may be a module).
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# --- the rules ----------------------------------------------------------------------------------


def io_violations(modules: Mapping[str, str]) -> list[str]:
    """Rule 1: ``core module imports library`` for each I/O library a core module imports."""
    problems = []
    for module, source in sorted(modules.items()):
        if not _within(module, "jobrelay.core"):
            continue
        names = imported_names(module, source, is_package=_is_package(module, modules))
        for library in sorted(IO_LIBRARIES):
            if any(_within(name, library) for name in names):
                problems.append(f"{module} imports {library}")
    return problems


def adapter_violations(modules: Mapping[str, str]) -> list[str]:
    """Rule 2: ``adapter imports service`` for each service package an adapter imports."""
    return one_way_violations(modules, dict.fromkeys(ADAPTERS, SERVICES))


def one_way_violations(
    modules: Mapping[str, str], one_way: Mapping[str, tuple[str, ...]] = ONE_WAY
) -> list[str]:
    """Rule 4: ``module imports service`` for each service a module of ``one_way``'s keys must
    not import."""
    problems = []
    for module, source in sorted(modules.items()):
        for importer, forbidden in one_way.items():
            if not _within(module, importer):
                continue
            names = imported_names(module, source, is_package=_is_package(module, modules))
            problems += [
                f"{module} imports {service}"
                for service in forbidden
                if any(_within(name, service) for name in names)
            ]
    return problems


def import_graph(modules: Mapping[str, str]) -> dict[str, set[str]]:
    """Module -> the jobrelay modules it imports, from anywhere in it. ``import a.b`` is an edge
    to ``a.b``; ``from a import b`` to ``a.b`` when that is a module, else to ``a``. A package's
    ``__init__`` being run before its sub-modules is no edge (else every package that imports
    its own modules would be a cycle)."""
    graph: dict[str, set[str]] = {}
    for module, source in modules.items():
        is_package = _is_package(module, modules)
        edges: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                names = imported_names(module, ast.unparse(node), is_package=is_package)
                base = min(names, key=len)
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        edges.add(target)
                    elif base in modules:
                        edges.add(base)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[tuple[list[str], set[str]]]:
    """For each strongly connected group of modules: one of its cycles (``a, b, ..., a``) and
    the group."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph is small
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [(_a_cycle_in(group, graph), group) for group in groups]


def _a_cycle_in(group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    start = min(group)
    paths = [[start]]
    seen = {start}
    while paths:  # breadth first: the shortest way back to the start
        path = paths.pop(0)
        for target in sorted(graph[path[-1]] & group):
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                paths.append([*path, target])
    raise AssertionError(f"no cycle in {group}")  # pragma: no cover (an SCC always has one)


def cycle_violations(modules: Mapping[str, str]) -> list[str]:
    """One line per group of modules that import one another: a shortest cycle in it, and the
    whole group when it is larger than that cycle."""
    problems = []
    for cycle, group in cycles(import_graph(modules)):
        if frozenset(group) in KNOWN_CYCLES:
            continue
        line = " -> ".join(cycle)
        if len(group) > len(cycle) - 1:
            line += f" (and the rest of the group: {', '.join(sorted(group - set(cycle)))})"
        problems.append(line)
    return problems


# --- the project --------------------------------------------------------------------------------


def test_the_source_is_found() -> None:
    modules = sources()
    assert "jobrelay.core.settings" in modules
    assert "jobrelay.cli" in modules
    assert "jobrelay.cli.common" in modules


def test_the_core_imports_no_io_library() -> None:
    assert io_violations(sources()) == []


def test_no_adapter_imports_a_service() -> None:
    assert adapter_violations(sources()) == []


def test_the_console_imports_nothing_of_the_api() -> None:
    assert one_way_violations(sources()) == []


def test_jobrelay_has_no_import_cycle() -> None:
    assert cycle_violations(sources()) == []


def test_no_cli_command_module_imports_another() -> None:
    modules = sources()
    shared = {"jobrelay.cli.common", "jobrelay.cli.output"}  # helpers, not commands
    commands = (
        {m for m in modules if m.startswith("jobrelay.cli.")} - shared - {"jobrelay.cli.__main__"}
    )
    graph = import_graph(modules)
    for module in sorted(commands | shared):
        assert not (graph[module] & (commands | {"jobrelay.cli"})), (module, graph[module])


# --- the checkers catch a made-up violation -----------------------------------------------------


def test_an_io_import_in_the_core_is_caught_wherever_it_is() -> None:
    made_up = {
        "jobrelay.core.bad": "import json\n\ndef f():\n    import aio_pika.abc\n",
        "jobrelay.core.worse": "from urllib import request\n",
        "jobrelay.core.fine": "import urllib.parse\nfrom jobrelay.core import states\n",
        "jobrelay.db.engine": "import sqlalchemy\n",  # an adapter may
    }
    assert io_violations(made_up) == [
        "jobrelay.core.bad imports aio_pika",
        "jobrelay.core.worse imports urllib.request",
    ]


def test_a_service_import_in_an_adapter_is_caught() -> None:
    made_up = {
        "jobrelay.db.store": "def f():\n    from jobrelay.api.schemas import JobView\n",
        "jobrelay.broker": "",
        "jobrelay.broker.connection": "from ..operations import Operations\n",
        "jobrelay.db.engine": "from jobrelay.core import settings\nimport jobrelay.apix\n",
    }
    assert adapter_violations(made_up) == [
        "jobrelay.broker.connection imports jobrelay.operations",
        "jobrelay.db.store imports jobrelay.api",
    ]


def test_a_console_import_of_the_api_is_caught_wherever_it_is() -> None:
    made_up = {
        "jobrelay.console": "from jobrelay.console import jobs\n",
        "jobrelay.console.jobs": "from jobrelay.api.deps import Page\n",
        "jobrelay.console.signin": "def f():\n    from ..api import auth\n",
        "jobrelay.console.web": "import jobrelay.apix\nfrom jobrelay.core.pages import Page\n",
        "jobrelay.api.app": "from jobrelay import console\n",  # the arrow that may be
    }
    assert one_way_violations(made_up) == [
        "jobrelay.console.jobs imports jobrelay.api",
        "jobrelay.console.signin imports jobrelay.api",
    ]


def test_a_cycle_through_a_lazy_import_is_caught_and_named() -> None:
    made_up = {
        "jobrelay": "",
        "jobrelay.cli": "from jobrelay import ops_cli\n",
        "jobrelay.ops_cli": "def f():\n    from jobrelay import cli\n    return cli._job_id\n",
        "jobrelay.core": "",
        "jobrelay.core.a": "from . import b\n",
        "jobrelay.core.b": "from .c import x\n",
        "jobrelay.core.c": "def g():\n    import jobrelay.core.a\n",
    }
    assert cycle_violations(made_up) == [
        "jobrelay.cli -> jobrelay.ops_cli -> jobrelay.cli",
        "jobrelay.core.a -> jobrelay.core.b -> jobrelay.core.c -> jobrelay.core.a",
    ]


def test_a_package_importing_its_own_modules_is_no_cycle() -> None:
    made_up = {
        "jobrelay.cli": "from jobrelay.cli import jobs\nfrom jobrelay.cli.common import run\n",
        "jobrelay.cli.common": "import jobrelay.core.settings\n",
        "jobrelay.cli.jobs": "from jobrelay.cli.common import run\n",
        "jobrelay.core.settings": "",
    }
    assert cycle_violations(made_up) == []
    assert import_graph(made_up)["jobrelay.cli"] == {"jobrelay.cli.jobs", "jobrelay.cli.common"}
    made_up["jobrelay.cli.jobs"] += "from jobrelay.cli import main\n"  # a real cycle
    made_up["jobrelay.cli.common"] += "def f():\n    from jobrelay.cli import jobs\n"
    assert cycle_violations(made_up) == [
        "jobrelay.cli -> jobrelay.cli.jobs -> jobrelay.cli"
        " (and the rest of the group: jobrelay.cli.common)"
    ]


# --- the slim client ----------------------------------------------------------------------------

SLIM_SOURCE = SOURCE.parent / "jobrelay_client"
# What the distribution jobrelay-client depends on (clients/python/pyproject.toml).
SLIM_DEPENDENCIES = frozenset({"httpx"})
# Its pure modules, which the server's core imports: no httpx either.
SLIM_PURE = frozenset(
    {
        "jobrelay_client",
        "jobrelay_client.bounds",
        "jobrelay_client.backoff",
        "jobrelay_client.flow",
        "jobrelay_client.workflows",
        "jobrelay_client.models",
        "jobrelay_client.errors",
        "jobrelay_client._retry",
    }
)


def slim_violations(modules: Mapping[str, str]) -> list[str]:
    """``module imports name`` for each import of a slim client module that is neither the
    standard library, its own package nor its dependencies (httpx; none in ``SLIM_PURE``,
    lazy imports under ``if TYPE_CHECKING`` aside: they run for the type checker only)."""
    problems = []
    for module, source in sorted(modules.items()):
        tree = ast.parse(source)
        checked_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        allowed = set() if module in SLIM_PURE else SLIM_DEPENDENCIES
        for node in ast.walk(tree):
            if id(node) in checked_only or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = imported_names(module, ast.unparse(node), is_package=module in SLIM_PURE)
            for name in sorted(names):
                top = name.split(".")[0]
                if top and top not in sys.stdlib_module_names | {"jobrelay_client"} | allowed:
                    problems.append(f"{module} imports {name}")
    return problems


def test_the_slim_client_imports_only_the_standard_library_and_httpx() -> None:
    modules = sources(SLIM_SOURCE)
    assert "jobrelay_client.sync" in modules  # the source is found
    assert slim_violations(modules) == []


def test_a_slim_client_import_of_the_server_or_of_httpx_in_a_pure_module_is_caught() -> None:
    made_up = {
        "jobrelay_client.sync": "import httpx\nimport json\nfrom jobrelay.core import jobs\n",
        "jobrelay_client.flow": "def f():\n    import httpx\n",
        "jobrelay_client.models": "from pydantic import BaseModel\n",
        "jobrelay_client": "if TYPE_CHECKING:\n    import httpx\n",
    }
    assert slim_violations(made_up) == [
        "jobrelay_client.flow imports httpx",
        "jobrelay_client.models imports pydantic",
        "jobrelay_client.models imports pydantic.BaseModel",
        "jobrelay_client.sync imports jobrelay.core",
        "jobrelay_client.sync imports jobrelay.core.jobs",
    ]
