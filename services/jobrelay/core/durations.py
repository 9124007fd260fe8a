"""Durations typed by a person (``90s``, ``15m``, ``2h``, ``1d``): the CLI's options and the
console's forms read them the same way."""

from __future__ import annotations

import re

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``2h`` or ``1d``; ValueError with a readable
    message when ``text`` is not a duration."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 2h or 1d")
    return float(match.group(1)) * _UNITS[match.group(2)]
