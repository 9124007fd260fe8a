"""Ids are UUIDv7: version 7, RFC variant, the millisecond first, so later ids sort after."""

from __future__ import annotations

import time

from jobrelay.core.ids import new_id, uuid7_at


def test_an_id_is_a_version_7_uuid_of_the_rfc_variant() -> None:
    made = new_id()
    assert made.version == 7
    assert made.variant == "specified in RFC 4122"


def test_an_id_starts_with_its_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    assert before <= made.int >> 80 <= after


def test_ids_of_later_milliseconds_sort_after_and_none_repeat() -> None:
    ids = [uuid7_at(ms) for ms in range(1_700_000_000_000, 1_700_000_000_100) for _ in range(50)]
    assert len(set(ids)) == len(ids)
    by_millisecond = [made.int >> 80 for made in sorted(ids)]
    assert by_millisecond == sorted(by_millisecond)
    assert str(uuid7_at(0)).startswith("00000000-0000-7")
