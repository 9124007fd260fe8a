"""The job types the consumers registered, in PostgreSQL (``job_types``, migration 0011): the
``TypeStore`` of ``core/type_catalog.py``.

A database not yet migrated to 0011 has no ``job_types``: a registration is then skipped and
the list is empty, with a warning, so that services of this version run against it as before
(an API then knows only the types it loads).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from psycopg.errors import UndefinedColumn, UndefinedTable
from sqlalchemy.exc import ProgrammingError

from jobrelay.core.flow import Limit, Throttle
from jobrelay.core.type_catalog import RegisteredType
from jobrelay.db import queries as q
from jobrelay.db.rows import limit_from_row, throttle_from_row
from jobrelay.db.store import Store

log = logging.getLogger(__name__)


SERVED_NOT_MIGRATED = (
    "the database has no job_types.served_until yet (revision 0014): run jobrelay migrate; "
    "until then the job views show no_consumer"
)
POLICIES_NOT_MIGRATED = (
    "the database has no job_types.throttle_count yet (revision 0019): run jobrelay migrate; "
    "until then an API throttles only the types it loads"
)


class TypesNotMigrated(Exception):
    """The database has no ``job_types`` yet."""


class PgTypeStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._warned = False  # the missing table is said once, not at every read
        self._warned_columns: set[str] = set()  # each missing column is said once

    @asynccontextmanager
    async def _migrated(self) -> AsyncIterator[None]:
        try:
            yield
        except (UndefinedTable, ProgrammingError) as error:
            if not isinstance(getattr(error, "orig", error), UndefinedTable):
                raise
            if not self._warned:
                self._warned = True
                log.warning(
                    "the database has no job_types table yet (revision 0011): registered job "
                    "types are off until jobrelay migrate runs",
                    extra={"event": "job_types_not_migrated"},
                )
            raise TypesNotMigrated() from None

    async def register_types(self, types: Sequence[RegisteredType]) -> None:
        if not types:
            return
        try:
            async with self._migrated():
                await self.store.fetch_all(q.REGISTER_JOB_TYPES, **register_params(types))
        except TypesNotMigrated:
            return
        await self._register_policies(types)

    async def _register_policies(self, types: Sequence[RegisteredType]) -> None:
        """The code's throttles and windows, a statement of their own: before migration 0019
        it fails alone, with a warning, and the registration stands (the API then throttles
        these types only when it loads their handlers)."""
        async with self._column_missing(POLICIES_NOT_MIGRATED):
            await self.store.fetch_all(q.REGISTER_TYPE_POLICIES, **policy_params(types))

    async def mark_served(self, names: Sequence[str], *, seconds: float) -> None:
        """A consumer consumes the queues of ``names``: they are served for ``seconds``."""
        if not names:
            return
        with contextlib.suppress(TypesNotMigrated):
            async with self._migrated(), self._column_missing(SERVED_NOT_MIGRATED):
                await self.store.fetch_all(q.MARK_TYPES_SERVED, names=list(names), seconds=seconds)

    @asynccontextmanager
    async def _column_missing(self, warning: str) -> AsyncIterator[None]:
        """A column of a later revision is missing: the statement is skipped, ``warning``
        said once."""
        try:
            yield
        except (UndefinedColumn, ProgrammingError) as error:
            if not isinstance(getattr(error, "orig", error), UndefinedColumn):
                raise
            if warning not in self._warned_columns:
                self._warned_columns.add(warning)
                log.warning(warning, extra={"event": "job_types_not_migrated"})

    async def registered_types(self) -> list[RegisteredType]:
        try:
            async with self._migrated():
                rows = await self.store.fetch_all(q.JOB_TYPE_ROWS)
        except TypesNotMigrated:
            return []
        return [registered_from_row(row) for row in rows]

    async def runtime_throttles(self) -> dict[str, Throttle]:
        """The throttles set at runtime (``type_limits``), by type; none before migration
        0007 (no table) or 0019 (no column: the statement reads none)."""
        try:
            async with self._migrated():
                rows = await self.store.fetch_all(q.RUNTIME_THROTTLE_ROWS)
        except TypesNotMigrated:
            return {}
        found = {row.type: throttle_from_row(row) for row in rows}
        return {name: throttle for name, throttle in found.items() if throttle is not None}


def register_params(types: Sequence[RegisteredType]) -> dict[str, list[Any]]:
    """``REGISTER_JOB_TYPES``' arrays, one per column."""
    limits = [t.limit for t in types]
    return {
        "names": [t.name for t in types],
        "payload_schemas": [json.dumps(t.payload_schema) for t in types],
        "max_attempts": [t.max_attempts for t in types],
        "priorities": [t.priority for t in types],
        "timeouts": [float(t.timeout_seconds) for t in types],
        "concurrencies": [limit.concurrency if limit else None for limit in limits],
        "rate_counts": [limit.rate.count if limit and limit.rate else None for limit in limits],
        "rate_periods": [
            limit.rate.period_seconds if limit and limit.rate else None for limit in limits
        ],
        "per_keys": [bool(limit and limit.per_key) for limit in limits],
        "descriptions": [t.description for t in types],
        "registered_by": [t.registered_by for t in types],
        "apis": [t.api for t in types],
    }


def policy_params(types: Sequence[RegisteredType]) -> dict[str, list[Any]]:
    """``REGISTER_TYPE_POLICIES``' arrays, one per column."""
    throttles = [t.throttle for t in types]
    return {
        "names": [t.name for t in types],
        "throttle_counts": [None if th is None else th.count for th in throttles],
        "throttle_periods": [None if th is None else th.period_seconds for th in throttles],
        "unique_fors": [t.unique_for for t in types],
    }


def registered_from_row(row: Any) -> RegisteredType:
    return RegisteredType(
        name=row.name,
        payload_schema=row.payload_schema,
        max_attempts=row.max_attempts,
        priority=row.priority,
        timeout_seconds=row.timeout_seconds,
        limit=_limit_of(row),
        description=row.description,
        registered_by=row.registered_by,
        registered_at=row.registered_at,
        api=row.api,
        throttle=throttle_from_row(row),  # the table's checks keep it whole
        unique_for=row.unique_for_seconds,
    )


def _limit_of(row: Any) -> Limit | None:
    """The row's limit, None without one. A limit no ``Limit`` can be (a row written by hand:
    a rate per 5 s, a concurrency of 0) is left out with a warning: it is for operators to read,
    and its ``ValueError`` would fail every read of the catalog, so every submission of every
    registered type."""
    if row.concurrency is None and row.rate_count is None:
        return None
    try:
        return limit_from_row(row)
    except ValueError as error:
        log.warning(
            "registered job type %s: its limit is left out (%s)",
            row.name,
            error,
            extra={"event": "job_type_limit_invalid", "type": row.name},
        )
        return None
