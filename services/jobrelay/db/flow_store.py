"""The operators' side of flow control in PostgreSQL: the work queues (``queues``: their
pause, their backlog, their running jobs) and the runtime limits (``type_limits``).

A pause is a row, so it survives restarts of every service; a runtime limit is a row, the limit
in force while it exists (``core/flow.py``). The dispatchers and consumers read both by
themselves, within seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from psycopg.errors import UndefinedColumn, UndefinedTable
from sqlalchemy import TextClause
from sqlalchemy.exc import ProgrammingError

from jobrelay.core.errors import BrokerUnavailable, ConfigurationError
from jobrelay.core.flow import Limit, LimitInForce, Throttle, limit_in_force
from jobrelay.core.queues import QueuesReport, QueueState
from jobrelay.core.registry import Registry
from jobrelay.core.relay import QueueDepth
from jobrelay.core.runtime_limits import throttle_only
from jobrelay.core.topology import queue_of, queue_short_name, type_queue_name
from jobrelay.core.type_catalog import RegisteredType
from jobrelay.db import queries as q
from jobrelay.db.relay_store import route_params
from jobrelay.db.rows import limit_from_row, throttle_from_row
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore

# The broker's figures of the named queues (``BrokerProbe.queue_depths``); raises
# ``BrokerUnavailable`` when the broker does not answer.
DepthReader = Callable[[Sequence[str]], Awaitable[Mapping[str, QueueDepth]]]


class FlowNotMigrated(ConfigurationError):
    """The database has no ``queues`` or ``type_limits`` yet: it was not migrated to 0007."""


@asynccontextmanager
async def _migrated() -> AsyncIterator[None]:
    try:
        yield
    except (UndefinedTable, UndefinedColumn, ProgrammingError) as error:
        cause = getattr(error, "orig", error)
        if isinstance(cause, UndefinedColumn):  # type_limits without its throttle yet
            raise FlowNotMigrated(
                "the database has no runtime throttles yet (revision 0019): run jobrelay migrate"
            ) from None
        if not isinstance(cause, UndefinedTable):
            raise
        raise FlowNotMigrated(
            "the database has no flow-control tables yet (revision 0007): run jobrelay migrate"
        ) from None


class FlowStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    # --- queues -------------------------------------------------------------------------------

    async def queue_states(self, type_queues: Mapping[str, str]) -> list[QueueState]:
        """Every queue of ``queues`` with its backlog (due, unpublished) and running jobs, in
        one snapshot; a type's queue is ``type_queues``' (JOBRELAY_TYPE_QUEUES), else
        ``default``."""
        routes = route_params({t: queue_short_name(name) for t, name in type_queues.items()})
        async with _migrated(), self.store.transaction() as connection:
            rows = (await connection.execute(q.QUEUE_ROWS)).all()
            backlog = _by_queue(await connection.execute(q.QUEUE_BACKLOGS, routes))
            running = _by_queue(await connection.execute(q.QUEUE_RUNNING, routes))
        return [
            QueueState(
                row.name,
                row.paused_at,
                row.paused_by,
                backlog.get(row.name, 0),
                running.get(row.name, 0),
            )
            for row in rows
        ]

    async def queues_report(
        self, type_queues: Mapping[str, str], read_depths: DepthReader
    ) -> QueuesReport:
        """Every queue with the database's figures and the broker's; a broker that does not
        answer leaves its figures unknown, never the whole report."""
        states = await self.queue_states(type_queues)
        # A queue's messages are also in the queues of its types (docs/job-types.md).
        names = await self._all(q.JOB_TYPE_NAMES)
        types = {row.name: type_queue_name(row.name) for row in names}
        try:
            depths = await read_depths([*(state.name for state in states), *types.values()])
        except BrokerUnavailable:
            return QueuesReport(states, None)
        return QueuesReport(states, with_type_queues(depths, types, type_queues))

    async def pause_queue(self, name: str, *, by: str) -> bool:
        """Pause ``name`` (its first pause's time and operator are kept); False: no such queue.
        Once this returns, no job of the queue is claimed until it is resumed."""
        return await self._one(q.PAUSE_QUEUE, name=name, paused_by=by) is not None

    async def resume_queue(self, name: str) -> bool:
        """Resume ``name``; False: no such queue."""
        return await self._one(q.RESUME_QUEUE, name=name) is not None

    # --- runtime limits -------------------------------------------------------------------------

    async def runtime_limits(self) -> dict[str, Limit]:
        """Every runtime override, by type."""
        return {row.type: limit_from_row(row) for row in await self._all(q.TYPE_LIMIT_ROWS)}

    async def runtime_limit(self, job_type: str) -> Limit | None:
        row = await self._one(q.TYPE_LIMIT_ROW, type=job_type)
        return None if row is None else limit_from_row(row)

    async def limits_in_force(self, registry: Registry) -> list[LimitInForce]:
        """Every type with a limit or a throttle in force: the code's (``code_limits``) and the
        runtime rows (which win), by type name."""
        code, code_throttles = await self.code_limits(registry)
        rows = await self._all(q.TYPE_LIMIT_ROWS)
        runtime = {row.type: limit_from_row(row) for row in rows}
        throttles = code_throttles | _throttles(rows)
        names = sorted(code.keys() | runtime.keys() | throttles.keys())
        return [limit_in_force(name, code, runtime, throttles) for name in names]

    async def limit_in_force(self, job_type: str, registry: Registry) -> LimitInForce:
        row = await self._one(q.TYPE_LIMIT_ROW, type=job_type)
        overrides = {} if row is None else {job_type: limit_from_row(row)}
        code, throttles = await self.code_limits(registry)
        throttles |= _throttles([] if row is None else [row])
        return limit_in_force(job_type, code, overrides, throttles)

    async def code_limits(self, registry: Registry) -> tuple[dict[str, Limit], dict[str, Throttle]]:
        """The limits and throttles in the code: the ``registry``'s, and for a type only the
        consumers load, the ones it registered (docs/job-types.md, "Registered types")."""
        registered = await self._registered_elsewhere(registry)
        limits = {t.name: t.limit for t in registered if t.limit is not None}
        throttles = {t.name: t.throttle for t in registered if t.throttle is not None}
        loaded = {t.name: t.throttle for t in registry.types.values() if t.throttle is not None}
        return limits | registry.limits(), throttles | loaded

    async def is_known_type(self, job_type: str, registry: Registry) -> bool:
        """A type of the ``registry``, or one a consumer registered: a runtime limit may be
        set on either."""
        if job_type in registry.types:
            return True
        return any(t.name == job_type for t in await self._registered_elsewhere(registry))

    async def _registered_elsewhere(self, registry: Registry) -> list[RegisteredType]:
        registered = await PgTypeStore(self.store).registered_types()
        return [t for t in registered if t.name not in registry.types]

    async def set_limit(
        self,
        job_type: str,
        limit: Limit,
        throttle: Throttle | None = None,
        *,
        registry: Registry,
    ) -> None:
        """The runtime limit of ``job_type`` (it replaces the code's until cleared) and its
        runtime throttle (None: the code's holds). A throttle given alone keeps the concurrency
        and rate in force (``throttle_only``): it must not lift them."""
        if throttle_only(limit, throttle):
            limit = (await self.limit_in_force(job_type, registry)).limit
        rate = limit.rate
        await self._one(
            q.SET_TYPE_LIMIT,
            type=job_type,
            concurrency=limit.concurrency,
            rate_count=None if rate is None else rate.count,
            rate_period_seconds=None if rate is None else rate.period_seconds,
            per_key=limit.per_key,
            throttle_count=None if throttle is None else throttle.count,
            throttle_period_seconds=None if throttle is None else throttle.period_seconds,
        )

    async def clear_limit(self, job_type: str) -> bool:
        """Back to the code's limit; False: there was no runtime limit."""
        return await self._one(q.CLEAR_TYPE_LIMIT, type=job_type) is not None

    async def _all(self, statement: TextClause, **params: Any) -> list[Any]:
        async with _migrated():
            return await self.store.fetch_all(statement, **params)

    async def _one(self, statement: TextClause, **params: Any) -> Any | None:
        rows = await self._all(statement, **params)
        return rows[0] if rows else None


def _throttles(rows: Iterable[Any]) -> dict[str, Throttle]:
    """The runtime throttles of ``type_limits`` rows, by type."""
    found = {row.type: throttle_from_row(row) for row in rows}
    return {job_type: throttle for job_type, throttle in found.items() if throttle is not None}


def _by_queue(rows: Iterable[Any]) -> dict[str, int]:
    return {row.queue: int(row.n) for row in rows}


def with_type_queues(
    depths: Mapping[str, QueueDepth], types: Mapping[str, str], type_queues: Mapping[str, str]
) -> dict[str, QueueDepth]:
    """Each named queue's figures with its types' queues' ready messages added (``types``: a
    registered type → its queue). Consumers are the shared queue's: every consumer takes it."""
    merged = {name: depth for name, depth in depths.items() if name not in types.values()}
    for job_type, queue in types.items():
        own = depths.get(queue)
        if own is None:
            continue
        name = queue_short_name(queue_of(job_type, type_queues))
        shared = merged.get(name, QueueDepth(ready=0, consumers=0))
        merged[name] = QueueDepth(ready=shared.ready + own.ready, consumers=shared.consumers)
    return merged
