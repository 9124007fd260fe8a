"""Keyset paging of jobs, newest first, with an opaque cursor: the value ``GET /v1/jobs`` and
the console's job listing share (pure)."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrelay.core.errors import InvalidCursor


class Listed(Protocol):
    """What a page is keyed by: a job, a workflow."""

    @property
    def created_at(self) -> datetime: ...

    @property
    def id(self) -> uuid.UUID: ...


@dataclass(frozen=True)
class Page:
    """Keyset paging, newest first: ``after`` is the (created_at, id) of the previous page's
    last job, carried in an opaque cursor."""

    limit: int
    after: tuple[datetime, uuid.UUID] | None

    def next_cursor(self, rows: Sequence[Listed]) -> str | None:
        if len(rows) < self.limit:
            return None
        last = rows[-1]
        return base64.urlsafe_b64encode(
            f"{last.created_at.isoformat()}|{last.id}".encode()
        ).decode()


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        created_at, _, job_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(created_at), uuid.UUID(job_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor() from None
