"""What PostgreSQL's jsonb can store: the one check for payloads, results and enqueue."""

from __future__ import annotations

import math
from typing import Any


def unstorable_json(value: Any) -> str | None:
    """Why PostgreSQL's jsonb would refuse the value (a NUL character, NaN or an infinity, or a
    value JSON has no form for), or None. Iterative: the parser allows nesting deeper than a
    recursive walk could follow."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a string contains a NUL character"
        elif isinstance(item, bool | int | None):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "a number is NaN or infinite"
        elif isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return "an object has a key that is not a string"
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        else:
            return f"a value of type {type(item).__name__} has no JSON form"
    return None
