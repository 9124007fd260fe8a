"""What a contract test checks of an implementation before its scenarios: that it has every
method of its port, with the port's parameters (what mypy checks where it is passed as the port)."""

from __future__ import annotations

import inspect


def port_mismatches(port: type, implementation: type) -> list[str]:
    """The port's public methods that ``implementation`` lacks, does not make async, or takes
    with other parameters."""
    wrong: list[str] = []
    for name, declared in inspect.getmembers(port, inspect.isfunction):
        if name.startswith("_"):
            continue
        method = getattr(implementation, name, None)
        if (
            method is None
            or not inspect.iscoroutinefunction(method)
            or inspect.signature(method) != inspect.signature(declared)
        ):
            wrong.append(name)
    return wrong
