"""Lists sent as PostgreSQL's text form of an array, built here rather than by psycopg.

The group statements (``db/group_commit.py``) take one array per column: a consumer's claim
sends six, its finish eight. psycopg's list dumper inspects every list in Python to choose an
element type and then dumps element by element; the consumer spent about a tenth of its CPU
there (issue 28's profile, ``benchmarks/_cpu_profile.py``). Joined here, a list is one string,
which PostgreSQL parses with the cast the statement already has (``CAST(:ids AS uuid[])``) or
infers from its place (``id = ANY(:ids)``).

Only flat lists of None, booleans, numbers, strings and UUIDs are joined; any other list
(nested, dates, ...) is left to psycopg as it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any


def _quoted(text: str) -> str:
    # Always quoted: NULL, braces, commas, spaces and the empty string then mean themselves;
    # only the quote and the backslash need escaping inside quotes.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Each element type's text form, which PostgreSQL's array parser reads back exactly (a float's
# repr round-trips, inf and nan included). By exact type: a bool is not written as an int.
_TEXT_FORM: dict[type, Callable[[Any], str]] = {
    type(None): lambda _: "NULL",
    bool: lambda flag: "t" if flag else "f",
    str: _quoted,
    int: str,
    float: repr,
    uuid.UUID: str,
}


def array_literal(values: list[Any]) -> str | None:
    """``values`` as an array literal (``{a,NULL,"b c"}``), or None when an element is of a
    type not handled here."""
    try:
        return "{" + ",".join([_TEXT_FORM[type(value)](value) for value in values]) + "}"
    except KeyError:
        return None


def with_array_literals(params: Mapping[str, Any]) -> dict[str, Any]:
    """The statement's parameters, each list among them joined when it can be."""
    converted = dict(params)
    for name, value in params.items():
        if type(value) is list:
            literal = array_literal(value)
            if literal is not None:
                converted[name] = literal
    return converted
