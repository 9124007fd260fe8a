"""Settings of the example: one database, jobrelay's (JOBRELAY_DATABASE_URL, in any form
``jobrelay.libpq_url`` takes), and Django's tasks on jobrelay as the client ORDERS_CLIENT."""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from jobrelay import libpq_url


def database(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a PostgreSQL URL (no dj-database-url needed)."""
    parts = urllib.parse.urlsplit(libpq_url(url))
    return {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3, as jobrelay's backend needs
        "NAME": urllib.parse.unquote(parts.path.lstrip("/")),
        "USER": urllib.parse.unquote(parts.username or ""),
        "PASSWORD": urllib.parse.unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": dict(urllib.parse.parse_qsl(parts.query)),
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "django_app.urls"
USE_TZ = True
INSTALLED_APPS = ["orders"]  # nothing of jobrelay's: the backend is enough
MIDDLEWARE: list[str] = []
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {"default": database(os.environ["JOBRELAY_DATABASE_URL"])}

TASKS = {
    "default": {
        "BACKEND": "jobrelay.django.JobrelayBackend",
        "OPTIONS": {"client": os.environ.get("ORDERS_CLIENT", "orders")},
    }
}
