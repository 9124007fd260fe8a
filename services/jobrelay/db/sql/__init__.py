"""The named statements of the ``.sql`` files beside this module, one file per store, read once
at import.

A file is a sequence of blocks (procrastinate's ``sql/queries.sql``, aiosql's format)::

    -- name: release_lease
    -- makes: release
    -- Comment lines: what the statement does and why.
    WITH released AS (
        UPDATE jobrelay.jobs SET ... WHERE id = :id AND lease_token = :lease_token ...
    ) ...
    SELECT id FROM released;

``-- makes:`` names the transitions of ``core/states.py`` the statement makes (tests check its
guards against them). What varies is a ``:name`` parameter, never text. One thing is shared: a
``-- fragment:`` block, written once, that a statement takes in where a line reads ``--
include: <fragment>`` (expanded here, once, at load; the statement makes the fragment's
transitions too): ``dependents_of`` (workflows.sql), the moves of a workflow's waiting jobs,
in every statement that can end their parent, and ``finish_moves`` (execution.sql), the body
that FINISH_JOBS shares with its lean twin FINISH_PLAIN_JOBS (a statement may begin with an
include). ``python -m jobrelay.db.sql NAME`` prints a
statement exactly as it runs, to paste into psql or EXPLAIN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from sqlalchemy import TextClause, text

_HEADER = re.compile(r"^-- (name|fragment): (\w+)\s*$")
_MAKES = re.compile(r"^-- makes: ([\w ]+?)\s*$")
_INCLUDE = re.compile(r"^[ \t]*-- include: (\w+)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Statement:
    """One named statement: ``sql`` is its text as it runs (includes expanded, no ``;``)."""

    name: str
    file: str
    sql: str
    makes: tuple[str, ...]
    comment: str
    includes: tuple[str, ...]  # the fragments it takes in


@dataclass
class _Block:
    kind: str
    name: str
    file: str
    comment: list[str]
    makes: tuple[str, ...]
    body: list[str]


def _blocks(file: str, source: str) -> list[_Block]:
    """The blocks of one file: a header line, its comment lines (the first line that is neither
    a comment nor blank, or an include, starts the statement), the statement's lines."""
    blocks: list[_Block] = []
    for line in source.splitlines():
        if header := _HEADER.match(line):
            blocks.append(_Block(header[1], header[2], file, [], (), []))
            continue
        if not blocks:
            continue  # the file's own comment, before its first block
        block = blocks[-1]
        if block.body or _INCLUDE.match(line) or not (line.startswith("--") or not line.strip()):
            block.body.append(line)
        elif makes := _MAKES.match(line):
            block.makes = tuple(makes[1].split())
        else:
            block.comment.append(line.removeprefix("--").removeprefix(" "))
    return blocks


def parse(files: dict[str, str]) -> dict[str, Statement]:
    """The statements of ``files`` (name: text), fragments expanded. Raises ValueError on a
    name given twice, a statement without its closing ``;``, an unknown or unused fragment."""
    blocks = [block for file, source in sorted(files.items()) for block in _blocks(file, source)]
    names = [block.name for block in blocks]
    if duplicates := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"named twice: {duplicates}")
    fragments = {block.name: block for block in blocks if block.kind == "fragment"}
    statements = [_statement(block, fragments) for block in blocks if block.kind == "name"]
    included = {name for statement in statements for name in statement.includes}
    if unused := sorted(fragments.keys() - included):
        raise ValueError(f"fragments included nowhere: {unused}")
    return {statement.name: statement for statement in statements}


def _statement(block: _Block, fragments: dict[str, _Block]) -> Statement:
    body = "\n".join(block.body).strip()
    if not body.endswith(";"):
        raise ValueError(f"{block.file}: {block.name} does not end with ';'")
    includes = tuple(_INCLUDE.findall(body))
    if unknown := [name for name in includes if name not in fragments]:
        raise ValueError(f"{block.file}: {block.name}: no fragment named {unknown[0]!r}")
    sql = _INCLUDE.sub(lambda match: "\n".join(fragments[match[1]].body).strip(), body[:-1])
    makes = block.makes + tuple(made for name in includes for made in fragments[name].makes)
    comment = "\n".join(block.comment).strip()
    return Statement(block.name, block.file, sql.rstrip(), makes, comment, includes)


def _read_files() -> dict[str, str]:
    folder = resources.files(__name__)
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    }


STATEMENTS: dict[str, Statement] = parse(_read_files())


def clause(name: str) -> TextClause:
    """The statement ``name`` as SQLAlchemy runs it (KeyError for a name no file has)."""
    return text(STATEMENTS[name].sql)
