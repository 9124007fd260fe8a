"""The operator console at ``/ui/`` on the API's port (docs/console.md): server-rendered pages
over the same store, operations and CLI code paths as ``/v1/admin`` and ``jobrelay``.

- ``security.py``: the signed session cookie, CSRF tokens, flash messages, safe redirects (pure);
- ``context.py``: what the console reads of the app (``ConsoleContext``), one typed value;
- ``keys.py``: the signing key (``JOBRELAY_CONSOLE_SECRET`` or the database's ``console_keys``);
- ``web.py``: templates, the signed-in operator, the CSRF check, HTML error pages;
- ``charts.py``: the inline SVG's geometry (pure);
- ``broker.py``: whether the broker answers, for the banner and the replay and purge buttons;
- one module of routes per page: ``signin``, ``overview``, ``jobs``, ``quarantine``,
  ``schedules``, ``clients``, ``queues``, ``limits``, ``sequences``, ``workflows``.

Every asset is served by the API itself (``static/``): no CDN, no external font, so the console
works in a closed network. The routes are not part of the API's OpenAPI document.
"""

from __future__ import annotations

from fastapi import FastAPI

from jobrelay.console import (
    clients,
    jobs,
    limits,
    overview,
    quarantine,
    queues,
    schedules,
    sequences,
    signin,
    workflows,
)
from jobrelay.console.web import STATIC_DIR, STATIC_PATH, ConsoleAssets

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Serve the console's assets and pages from ``app``, whose context provides what they
    read (``context.py``)."""
    # Before the pages: the catch-all of signin.fallback would otherwise answer for them.
    app.mount(STATIC_PATH, ConsoleAssets(directory=STATIC_DIR), name="console-static")
    pages = (
        signin,
        overview,
        jobs,
        workflows,
        quarantine,
        schedules,
        queues,
        limits,
        sequences,
        clients,
    )
    for page in pages:
        app.include_router(page.router)
    app.include_router(signin.fallback)
