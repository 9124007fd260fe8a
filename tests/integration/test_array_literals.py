"""Lists sent as array literals (``db/arrays.py``) read back by PostgreSQL exactly as given,
through the store's fast path, prepared statements included (psycopg prepares a statement on
its fifth run, so each case runs six times)."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from jobrelay.db.store import Store

ROUND_TRIP = text(
    """
    SELECT t, u, f, b FROM unnest(CAST(:texts AS text[]), CAST(:ids AS uuid[]),
                                  CAST(:floats AS float8[]), CAST(:flags AS boolean[]))
                       AS a(t, u, f, b)
    """
)
ANY_OF = text("SELECT CAST(:one AS uuid) = ANY(:ids) AS found")

AWKWARD = [
    "NULL",
    "",
    "a,b}{",
    '"quoted" \\back\\slash\\',
    '{"result": "v\\\\", "n": [1, 2]}',
    "line\nbreak\ttab",
    "ünïcødé ✓",
    None,
]


async def test_texts_ids_numbers_and_flags_come_back_unchanged(store: Store) -> None:
    ids = [uuid.uuid4() for _ in AWKWARD]
    floats = [0.1, 1e-300, 2.5, float("inf"), -0.0, 3.0, 1e300, None]
    flags = [True, False, None, True, False, True, False, None]
    for _ in range(6):
        rows = await store.fetch_all(ROUND_TRIP, texts=AWKWARD, ids=ids, floats=floats, flags=flags)
        assert [tuple(row) for row in rows] == list(zip(AWKWARD, ids, floats, flags, strict=True))


async def test_a_list_compared_with_any_is_typed_by_its_place(store: Store) -> None:
    ids = [uuid.uuid4(), uuid.uuid4()]
    for _ in range(6):
        assert (await store.fetch_all(ANY_OF, one=ids[1], ids=ids))[0].found is True
        assert (await store.fetch_all(ANY_OF, one=uuid.uuid4(), ids=[]))[0].found is False
