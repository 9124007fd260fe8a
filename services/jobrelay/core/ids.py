"""The one place ids of stored rows are made: UUIDv7 (RFC 9562), time-ordered.

A random UUIDv4 key puts every insert at a random page of each index that holds it (``jobs``'
primary key, ``job_events(job_id, …)``, ``outbox.job_id``, ``job_results``): once those indexes
outgrow memory, inserts read pages from disk, and after each checkpoint nearly every insert
writes a full page to the WAL. A UUIDv7 starts with the millisecond it was made, so new ids
land at the right edge of those indexes, as a sequence would, while staying unguessable
(74 random bits) and free of any coordination between processes.
"""

from __future__ import annotations

import os
import time
import uuid

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62


def new_id() -> uuid.UUID:
    """48 bits of Unix milliseconds, the version, 74 random bits, the variant."""
    return uuid7_at(time.time_ns() // 1_000_000)


def uuid7_at(unix_ms: int) -> uuid.UUID:
    """A UUIDv7 for the given millisecond (random bits fresh each call)."""
    random_bits = int.from_bytes(os.urandom(10), "big")
    rand_a = (random_bits >> 62) & 0xFFF  # 12 bits beside the version
    rand_b = random_bits & ((1 << 62) - 1)  # 62 bits beside the variant
    timestamp = (unix_ms & ((1 << 48) - 1)) << 80
    return uuid.UUID(int=timestamp | _VERSION_7 | (rand_a << 64) | _VARIANT_RFC | rand_b)
