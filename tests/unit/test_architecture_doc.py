"""docs/architecture.md states facts about the code; these tests keep them true (nothing is
imported, the source is read with ``ast``):

1. every path a row of the module table names (``core/``, ``transactional.py``, and the
   ``states.py`` of its description) exists, every module of the package belongs to one row,
   and that row names it (``routes/flow.py`` in the ``api/`` row's description): a module
   added without its line in the table fails here;
2. every ``module.py::Name`` that a page of docs/ or the README names is defined in that module
   (a class's member: ``Store.fetch_all``);
3. the "may import (from jobrelay)" column of each row is exactly what that row's modules import
   from the rest of jobrelay (its own modules aside; words in parentheses are notes).

Each check has a negative test on made-up input, so that a checker that finds nothing cannot
pass unnoticed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.unit.test_imports import SLIM_SOURCE, SOURCE, _is_package, imported_names, sources

ROOT = SOURCE.parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TABLE_HEADING = "## The parts"
SLIM_HEADING = "## The slim client (`jobrelay_client`)"

CODE = re.compile(r"`([^`\n]+)`")
QUALIFIED = re.compile(
    r"([A-Za-z0-9_][A-Za-z0-9_./-]*\.py)::([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
)
PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*(\.py|/)$")


# --- reading the table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    paths: tuple[str, ...]  # the first column: paths under services/jobrelay
    described: tuple[str, ...]  # the paths its description names (``x.py``, ``dir/``)
    may_import: frozenset[str]  # the third column, notes in parentheses left out


def _without_notes(cell: str) -> str:
    """The cell with every parenthesized note removed (notes may nest)."""
    kept, depth = [], 0
    for char in cell:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth:
            kept.append(char)
    return "".join(kept)


def table_rows(markdown: str, heading: str = TABLE_HEADING) -> list[Row]:
    """The rows of the first table under ``heading``."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    rows: list[Row] = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if set(cells[0]) <= {"-", " "} or not CODE.search(cells[0]):
            continue  # the separator, the header
        rows.append(
            Row(
                paths=tuple(CODE.findall(cells[0])),
                described=tuple(
                    token
                    for token in CODE.findall(cells[1])
                    if PATH.match(token) and "::" not in token
                ),
                may_import=frozenset(CODE.findall(_without_notes(cells[2]))),
            )
        )
    return rows


# --- check 1: the paths -------------------------------------------------------------------------


def missing_paths(rows: Iterable[Row], source: Path = SOURCE, root: Path = ROOT) -> list[str]:
    """``row: path`` for each path of the table that does not exist. A row's own paths are
    under ``source``; a path of its description is under the row's folder, else under
    ``source``, else under the repository ``root``."""
    problems = []
    for row in rows:
        folders = [source / path for path in row.paths if path.endswith("/")]
        for path in row.paths:
            if not (source / path).exists():
                problems.append(f"{row.paths[0]}: {path}")
        for path in row.described:
            bases = [*folders, source, root]
            if not any((base / path.removeprefix("jobrelay/")).exists() for base in bases):
                problems.append(f"{row.paths[0]}: {path}")
    return problems


def _row_of(module: str, rows: Iterable[Row]) -> Row | None:
    inner = module.split(".")[1:]  # jobrelay.db.store -> db, store
    for row in rows:
        for path in row.paths:
            if path == "__init__.py" and not inner:
                return row
            if path.endswith("/") and inner[:1] == [path.rstrip("/")]:
                return row
            if path.endswith(".py") and inner == [path.removesuffix(".py")]:
                return row
    return None


def modules_in_no_row(modules: Iterable[str], rows: list[Row]) -> list[str]:
    return sorted(module for module in modules if _row_of(module, rows) is None)


def _names_file(row: Row, path: str) -> bool:
    """Whether ``row`` names the file ``path`` (under the package): as one of its own paths, or
    in its description, from the row's folder (``routes/flow.py`` in the ``api/`` row) or from
    the package (``api/routes/flow.py``, ``jobrelay/api/routes/flow.py``). A folder's
    ``__init__.py`` is named with its folder (``routes/``; ``api/`` by the row's own path)."""
    folder, _, name = path.rpartition("/")
    wanted = f"{folder}/" if name == "__init__.py" and folder else path
    if wanted in row.paths:
        return True
    row_folders = [own for own in row.paths if own.endswith("/")]
    for named in (token.removeprefix("jobrelay/") for token in row.described):
        if named == wanted or any(f"{own}{named}" == wanted for own in row_folders):
            return True
    return False


def files_no_row_names(rows: list[Row], source: Path = SOURCE) -> list[str]:
    """Each ``.py`` file of the package that the row it belongs to does not name by its path:
    a folder's row must name every module in it, so that a module added without a word in
    docs/architecture.md fails here."""
    problems = []
    for file in sorted(source.rglob("*.py")):
        path = file.relative_to(source).as_posix()
        row = next((row for row in rows if _row_covers(row, path)), None)
        if row is None or not _names_file(row, path):
            problems.append(path)
    return problems


def _row_covers(row: Row, path: str) -> bool:
    return any(path == own or (own.endswith("/") and path.startswith(own)) for own in row.paths)


# --- check 2: module.py::Name -------------------------------------------------------------------


def _defined(body: Iterable[ast.stmt]) -> set[str]:
    """Names bound by these statements (and by those of their if/try blocks)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _defined(node.body + node.orelse + getattr(node, "finalbody", []))
    return names


def _members(node: ast.ClassDef) -> set[str]:
    """A class's names: its body's, and the ``self.x`` its methods assign."""
    names = _defined(node.body)
    for method in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(method, ast.Assign):
            targets = list(method.targets)
        elif isinstance(method, ast.AnnAssign):
            targets = [method.target]
        names.update(
            t.attr
            for t in targets
            if isinstance(t, ast.Attribute)
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
        )
    return names


def has_name(source: str, dotted: str) -> bool:
    """Whether ``dotted`` (``Name`` or ``Class.member``, nested) is defined in ``source``."""
    body: list[ast.stmt] = ast.parse(source).body
    *outer, last = dotted.split(".")
    for depth, name in enumerate(outer, start=1):
        classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
        if not classes:
            return False
        if depth == len(outer):
            return last in _members(classes[0])
        body = classes[0].body
    return last in _defined(body)


def _module_file(path: str, bases: Iterable[Path]) -> Path | None:
    for base in bases:
        for candidate in (path, path.removeprefix("jobrelay/")):
            if (base / candidate).is_file():
                return base / candidate
    return None


def unknown_names(
    markdown: str, bases: Iterable[Path] = (ROOT, ROOT / "services", SOURCE)
) -> list[str]:
    """``path::Name (why)`` for each ``module.py::Name`` of ``markdown`` whose module is found
    under none of ``bases`` or does not define the name."""
    problems = []
    for path, name in sorted(set(QUALIFIED.findall(markdown))):
        found = _module_file(path, bases)
        if found is None:
            problems.append(f"{path}::{name} (no such module)")
        elif not has_name(found.read_text(encoding="utf-8"), name):
            problems.append(f"{path}::{name} (not defined there)")
    return problems


# --- check 3: what each row imports -------------------------------------------------------------


def parts_imported(row: Row, modules: Mapping[str, str]) -> set[str]:
    """The parts of jobrelay (``core``, ``db``, ``transactional``...) that the row's modules
    import, the row's own parts aside."""
    parts = {name.split(".")[1] for name in modules if name.count(".") >= 1}
    own = {path.removesuffix("/").removesuffix(".py") for path in row.paths}
    found: set[str] = set()
    for module, source in modules.items():
        if _row_of(module, [row]) is None:
            continue
        for name in imported_names(module, source, is_package=_is_package(module, modules)):
            pieces = name.split(".")
            if pieces[0] == "jobrelay" and len(pieces) > 1 and pieces[1] in parts:
                found.add(pieces[1])
    return found - own


def import_column_disagreements(rows: Iterable[Row], modules: Mapping[str, str]) -> list[str]:
    problems = []
    for row in rows:
        real = parts_imported(row, modules)
        for part in sorted(real - row.may_import):
            problems.append(f"{row.paths[0]} imports {part}, which its row does not list")
        for part in sorted(row.may_import - real):
            problems.append(f"{row.paths[0]} lists {part}, which it does not import")
    return problems


# --- the project --------------------------------------------------------------------------------


def _rows() -> list[Row]:
    rows = table_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(rows) >= 10, "the module table was not found"
    return rows


def test_every_path_of_the_module_table_exists() -> None:
    assert missing_paths(_rows()) == []


def test_every_module_of_the_package_has_a_row_of_the_module_table() -> None:
    assert modules_in_no_row(sources(), _rows()) == []


def test_every_module_of_the_package_is_named_by_its_row() -> None:
    assert files_no_row_names(_rows()) == []


def test_every_module_and_name_the_docs_name_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert "::" in ARCHITECTURE.read_text(encoding="utf-8")
    problems = {
        page.name: found
        for page in pages
        if (found := unknown_names(page.read_text(encoding="utf-8")))
    }
    assert problems == {}


def test_every_module_of_the_slim_client_has_its_row() -> None:
    # The top-level package jobrelay_client has a table of its own (its paths from its folder),
    # read and checked as the package's table is.
    rows = table_rows(ARCHITECTURE.read_text(encoding="utf-8"), SLIM_HEADING)
    assert rows, "the slim client's table was not found"
    assert missing_paths(rows, SLIM_SOURCE) == []
    assert files_no_row_names(rows, SLIM_SOURCE) == []


def test_each_rows_may_import_column_is_what_its_modules_import() -> None:
    assert import_column_disagreements(_rows(), sources()) == []


# --- the checkers catch made-up mistakes --------------------------------------------------------

MADE_UP_DOC = """\
# Made up

## The parts

| package / module | what it is | may import (from jobrelay) | I/O libraries |
| --- | --- | --- | --- |
| `core/` | `states.py`, `gone.py`, `tests/x.py`, `jobrelay/db/`, `db/store.py::Store` | \
nothing (`core` itself) | none |
| `db/` | `store.py` | `core`, `broker` (`health`, a note) | sqlalchemy |
| `cli.py` | the command | `db` | — |

Text after the table.
"""


def test_the_table_is_read_with_its_notes_left_out() -> None:
    rows = table_rows(MADE_UP_DOC)
    assert [row.paths for row in rows] == [("core/",), ("db/",), ("cli.py",)]
    assert rows[0].described == ("states.py", "gone.py", "tests/x.py", "jobrelay/db/")
    assert [row.may_import for row in rows] == [
        frozenset(),
        frozenset({"core", "broker"}),
        frozenset({"db"}),
    ]


def test_a_missing_path_and_a_module_in_no_row_are_caught(tmp_path: Path) -> None:
    source, root = tmp_path / "jobrelay", tmp_path
    (source / "core").mkdir(parents=True)
    (source / "core" / "states.py").write_text("")
    (source / "db").mkdir()
    (source / "db" / "store.py").write_text("")
    (root / "tests").mkdir()
    (root / "tests" / "x.py").write_text("")
    rows = table_rows(MADE_UP_DOC)
    assert missing_paths(rows, source, root) == ["core/: gone.py", "cli.py: cli.py"]
    modules = ["jobrelay.core.states", "jobrelay.db", "jobrelay.cli", "jobrelay.api.app"]
    assert modules_in_no_row(modules, rows) == ["jobrelay.api.app"]


def test_a_module_its_row_does_not_name_is_caught(tmp_path: Path) -> None:
    source = tmp_path / "jobrelay"
    for path in (
        "__init__.py",
        "cli.py",
        "core/__init__.py",
        "core/states.py",
        "core/gone_unnamed.py",
        "core/sub/__init__.py",
        "core/sub/inner.py",
        "db/__init__.py",
        "db/store.py",
        "db/sql/__init__.py",
        "db/sql/loader.py",
        "loose.py",
    ):
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text("")
    doc = MADE_UP_DOC.replace("`db/store.py::Store`", "`sub/`, `core/sub/inner.py`")
    assert files_no_row_names(table_rows(doc), source) == [
        "__init__.py",
        "core/gone_unnamed.py",
        "db/sql/__init__.py",
        "db/sql/loader.py",
        "loose.py",
    ]


def test_an_unknown_module_or_name_is_caught(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "store.py").write_text(
        "from x import Imported\n"
        "LIMIT = 3\n"
        "class Store:\n"
        "    kind: str = 'pg'\n"
        "    def __init__(self):\n"
        "        self.engine = None\n"
        "    async def fetch_all(self): ...\n"
        "    class Inner:\n"
        "        DEPTH = 1\n"
        "if True:\n"
        "    def guarded(): ...\n"
    )
    text = (
        "`db/store.py::Store`, db/store.py::Store.fetch_all. `db/store.py::Store.engine`"
        " `db/store.py::Store.kind` `db/store.py::Store.Inner.DEPTH` `db/store.py::LIMIT`"
        " `db/store.py::guarded` `db/store.py::Imported` `jobrelay/db/store.py::Store`\n"
        "gone: `db/store.py::Store.accept_jobs` `db/store.py::Relay` `db/store.py::Store.Inner.x`"
        " `db/store.py::LIMIT.real` `db/gone.py::Store`\n"
    )
    assert unknown_names(text, [tmp_path]) == [
        "db/gone.py::Store (no such module)",
        "db/store.py::LIMIT.real (not defined there)",
        "db/store.py::Relay (not defined there)",
        "db/store.py::Store.Inner.x (not defined there)",
        "db/store.py::Store.accept_jobs (not defined there)",
    ]


def test_an_import_the_column_omits_or_a_part_it_lists_in_vain_is_caught() -> None:
    rows = table_rows(MADE_UP_DOC)
    modules = {
        "jobrelay": "",
        "jobrelay.core": "",
        "jobrelay.core.states": "from . import jobs\n",  # its own part: no mention needed
        "jobrelay.core.jobs": "def f():\n    from jobrelay.db import store\n",  # lazy, still
        "jobrelay.db": "",
        "jobrelay.db.store": "from jobrelay.core.states import JobState\nimport sqlalchemy\n",
        "jobrelay.broker": "",
        "jobrelay.cli": "from jobrelay import db\nfrom .db import x\n",
    }
    assert import_column_disagreements(rows, modules) == [
        "core/ imports db, which its row does not list",
        "db/ lists broker, which it does not import",
    ]
