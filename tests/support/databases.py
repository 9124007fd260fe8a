"""A migrated template database, and a fresh copy of it for every test."""

from __future__ import annotations

import os
import urllib.parse
import uuid

import psycopg
from alembic.config import Config

from jobrelay.db import migrations
from jobrelay.db.engine import libpq_url


def with_database(url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def admin_execute(admin_url: str, statement: str) -> None:
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        connection.execute(statement)  # type: ignore[arg-type]


def alembic_config(url: str) -> Config:
    return migrations.alembic_config(url, configure_logger=False)


def migrate(url: str, revision: str = "head") -> None:
    migrations.upgrade(url, revision, configure_logger=False)


def create_database(admin_url: str, name: str, template: str | None = None) -> str:
    """A database whose sessions have only ``public`` on their search_path.

    The servers' role is named ``jobrelay``: PostgreSQL's default path (``"$user", public``)
    would put jobrelay's schema on it, and a statement that named a table without its schema
    would work here and fail in an application's database. Per database: CREATE DATABASE
    does not copy a template's settings."""
    copy = f' TEMPLATE "{template}"' if template else ""
    admin_execute(admin_url, f'CREATE DATABASE "{name}"{copy}')
    admin_execute(admin_url, f'ALTER DATABASE "{name}" SET search_path TO public')
    return with_database(admin_url, name)


def create_empty_database(admin_url: str, prefix: str = "jobrelay_t") -> str:
    return create_database(admin_url, f"{prefix}_{uuid.uuid4().hex[:12]}")


def create_template(admin_url: str) -> str:
    """A migrated database used as TEMPLATE: copying it is much faster than migrating."""
    name = f"jobrelay_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    migrate(create_database(admin_url, name))
    return name


def copy_template(admin_url: str, template: str) -> str:
    return create_database(admin_url, f"jobrelay_t_{uuid.uuid4().hex[:12]}", template)


def drop_database(admin_url: str, url: str) -> None:
    name = urllib.parse.urlsplit(url).path.lstrip("/")
    admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
