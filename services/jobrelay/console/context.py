"""What the console reads of the app that includes it, as one typed value: ``ConsoleContext``,
read through ``context_of``.

The console imports nothing of the API (``tests/unit/test_imports.py``), so it names what it
needs here, as a protocol; the API's ``ApiContext`` (``api/context.py``) is such a value, held
by the app as ``app.state.context``, and mypy checks there that it has every member below.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import Request

from jobrelay.auth import Authenticator
from jobrelay.broker.health import BrokerProbe
from jobrelay.console.broker import BrokerCheck
from jobrelay.console.keys import ConsoleKey
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store


class ConsoleContext(Protocol):
    """Read-only members: the app's value is frozen."""

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def store(self) -> Store: ...

    @property
    def auth(self) -> Authenticator: ...  # the sign-in's token lookup, the API's own

    @property
    def broker_probe(self) -> BrokerProbe: ...  # the API's kept broker connection (/readyz's)

    @property
    def console_key(self) -> ConsoleKey: ...  # the session cookie's signing key

    @property
    def console_broker(self) -> BrokerCheck: ...  # the banner's answer, over broker_probe


def context_of(request: Request) -> ConsoleContext:
    """The app's context: one attribute read (the API sets it: ``api/context.py::hold``)."""
    context: ConsoleContext = request.app.state.context
    return context
